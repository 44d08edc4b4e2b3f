// The optimizer's kernels: AdamW over fp32 main parameters (one element per step of a
// grid-stride loop, math::adamw_update as on the CPU) and the sum of squares behind the
// global grad norm, in double over a fixed split: kSumSquaresBlocks blocks each reduce
// their strided share, then one thread adds the block sums in order.
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"

namespace tandem::kernels::cuda {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                             std::int64_t n, math::AdamStep step) {
  TANDEM_GRID_STRIDE(i, n) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    math::adamw_update(p, grad[i], m, v, step);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

__global__ void sum_squares_blocks(ConstFloats x, std::int64_t n, double* block_sums) {
  double sum = 0;
  TANDEM_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(load(x, i));
    sum += v * v;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = sum;
}

__global__ void sum_squares_total(const double* block_sums, float* out) {
  double total = static_cast<double>(out[0]);
  for (int b = 0; b < kSumSquaresBlocks; ++b) total += block_sums[b];
  out[0] = static_cast<float>(total);
}

// found[0] = 1 where an element was an inf or a NaN: every writer writes the same 1.
__global__ void unscale_kernel(float* x, std::int64_t n, float inv_scale, float* found) {
  TANDEM_GRID_STRIDE(i, n) {
    float g = x[i];
    if (!math::unscale_is_finite(g, inv_scale)) *found = 1.0f;
    x[i] = g;
  }
}

}  // namespace

void check_finite_and_unscale(Context c, float* x, std::int64_t n, float inv_scale, float* found) {
  if (n == 0) return;
  unscale_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(x, n, inv_scale, found);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void sum_squares(Context c, ConstFloats x, std::int64_t n, float* out, double* scratch) {
  sum_squares_blocks<<<kSumSquaresBlocks, kThreads, 0, c.stream>>>(x, n, scratch);
  TANDEM_CUDA_CHECK_LAUNCH();
  sum_squares_total<<<1, 1, 0, c.stream>>>(scratch, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void adamw(Context c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
           std::int64_t n, const math::AdamStep& step) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(param, grad, exp_avg, exp_avg_sq, n, step);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
