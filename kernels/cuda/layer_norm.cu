// Layer norm on the GPU: one warp per row for the forward and for the input gradient
// (two-pass statistics as on the CPU: mean, then squared deviations), and a column-sum
// kernel for γ and β gradients (double, rows in a fixed order, as column_sums.cu). The
// element math is kernels/math/layer_norm.hpp, the functions the CPU loops call.
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/layer_norm.hpp"

namespace tandem::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

__global__ void forward_kernel(cpu::LayerNormShape s, ConstFloats in, ConstFloats gamma,
                               ConstFloats beta, Floats out, float* mean, float* rstd,
                               float epsilon) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= s.rows) return;
  const int lane = threadIdx.x;
  const std::int64_t base = r * s.C;
  float sum = 0;
  for (std::int64_t c = lane; c < s.C; c += 32) sum += load(in, base + c);
  const float m = warp_sum(sum) / static_cast<float>(s.C);
  float squares = 0;
  for (std::int64_t c = lane; c < s.C; c += 32) {
    const float d = load(in, base + c) - m;
    squares += d * d;
  }
  const math::RowStats stats{.mean = m,
                             .rstd = math::layer_norm_rstd(warp_sum(squares), s.C, epsilon)};
  for (std::int64_t c = lane; c < s.C; c += 32)
    store(out, base + c,
          math::layer_norm_normalize(load(in, base + c), stats) * load(gamma, c) + load(beta, c));
  if (lane == 0) {
    mean[r] = stats.mean;
    rstd[r] = stats.rstd;
  }
}

__global__ void input_grad_kernel(cpu::LayerNormShape s, ConstFloats dout, ConstFloats in,
                                  ConstFloats gamma, const float* mean, const float* rstd,
                                  Floats din) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= s.rows) return;
  const int lane = threadIdx.x;
  const std::int64_t base = r * s.C;
  const math::RowStats stats{.mean = mean[r], .rstd = rstd[r]};
  float dnorm_sum = 0, dnorm_norm_sum = 0;
  for (std::int64_t c = lane; c < s.C; c += 32) {
    const float dnorm = load(dout, base + c) * load(gamma, c);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * math::layer_norm_normalize(load(in, base + c), stats);
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(s.C);
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(s.C);
  for (std::int64_t c = lane; c < s.C; c += 32) {
    const float dnorm = load(dout, base + c) * load(gamma, c);
    const float norm = math::layer_norm_normalize(load(in, base + c), stats);
    store(din, base + c,
          math::layer_norm_input_grad(dnorm, norm, dnorm_mean, dnorm_norm_mean, stats.rstd));
  }
}

constexpr int kColumns = 32;
constexpr int kRowLanes = 8;

__global__ void parameter_grads_kernel(cpu::LayerNormShape s, ConstFloats dout, ConstFloats in,
                                       const float* mean, const float* rstd, Floats dgamma,
                                       Floats dbeta) {
  __shared__ double partial_gamma[kRowLanes][kColumns];
  __shared__ double partial_beta[kRowLanes][kColumns];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  double sum_gamma = 0, sum_beta = 0;
  if (col < s.C) {
    for (std::int64_t r = threadIdx.y; r < s.rows; r += kRowLanes) {
      const float dy = load(dout, r * s.C + col);
      const math::RowStats stats{.mean = mean[r], .rstd = rstd[r]};
      sum_gamma +=
          static_cast<double>(dy * math::layer_norm_normalize(load(in, r * s.C + col), stats));
      sum_beta += static_cast<double>(dy);
    }
  }
  partial_gamma[threadIdx.y][threadIdx.x] = sum_gamma;
  partial_beta[threadIdx.y][threadIdx.x] = sum_beta;
  __syncthreads();
  if (threadIdx.y != 0 || col >= s.C) return;
  double total_gamma = 0, total_beta = 0;
  for (int k = 0; k < kRowLanes; ++k) {
    total_gamma += partial_gamma[k][threadIdx.x];
    total_beta += partial_beta[k][threadIdx.x];
  }
  store(dgamma, col, static_cast<float>(static_cast<double>(load(dgamma, col)) + total_gamma));
  store(dbeta, col, static_cast<float>(static_cast<double>(load(dbeta, col)) + total_beta));
}

unsigned int row_blocks(std::int64_t rows) {
  return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void layer_norm_forward(Context c, cpu::LayerNormShape s, ConstFloats in, ConstFloats gamma,
                        ConstFloats beta, Floats out, float* mean, float* rstd, float epsilon) {
  if (s.rows == 0) return;
  forward_kernel<<<row_blocks(s.rows), dim3(32, kRowsPerBlock), 0, c.stream>>>(
      s, in, gamma, beta, out, mean, rstd, epsilon);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(Context c, cpu::LayerNormShape s, ConstFloats dout, ConstFloats in,
                         ConstFloats gamma, const float* mean, const float* rstd, Floats din,
                         Floats dgamma, Floats dbeta) {
  if (s.rows == 0 || s.C == 0) return;
  input_grad_kernel<<<row_blocks(s.rows), dim3(32, kRowsPerBlock), 0, c.stream>>>(
      s, dout, in, gamma, mean, rstd, din);
  TANDEM_CUDA_CHECK_LAUNCH();
  const auto blocks = static_cast<unsigned int>((s.C + kColumns - 1) / kColumns);
  parameter_grads_kernel<<<blocks, dim3(kColumns, kRowLanes), 0, c.stream>>>(s, dout, in, mean,
                                                                             rstd, dgamma, dbeta);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
