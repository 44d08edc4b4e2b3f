// Layer norm loops; see layer_norm.hpp. Backward runs in two passes: rows in parallel
// for the input gradient (each row needs its own two means), then column blocks in
// parallel for γ and β gradients (sums over rows, no float atomics, fixed order).
#include "kernels/cpu/layer_norm.hpp"

#include <algorithm>

#include "kernels/cpu/threads.hpp"
#include "kernels/math/layer_norm.hpp"

namespace tandem::kernels::cpu {

void layer_norm_forward(LayerNormShape s, const float* in, const float* gamma, const float* beta,
                        float* out, float* mean, float* rstd, float epsilon) {
  const std::int64_t C = s.C;
#pragma omp parallel for schedule(static) if (s.rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* x = in + r * C;
    float* y = out + r * C;
    const math::RowStats stats = math::layer_norm_row_stats(x, C, epsilon);
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c)
      y[c] = math::layer_norm_normalize(x[c], stats) * gamma[c] + beta[c];
    mean[r] = stats.mean;
    rstd[r] = stats.rstd;
  }
}

namespace {

void input_grad(LayerNormShape s, const float* dout, const float* in, const float* gamma,
                const float* mean, const float* rstd, float* din) {
  const std::int64_t C = s.C;
#pragma omp parallel for schedule(static) if (s.rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* dy = dout + r * C;
    const float* x = in + r * C;
    float* dx = din + r * C;
    const math::RowStats stats{.mean = mean[r], .rstd = rstd[r]};
    float dnorm_sum = 0;
    float dnorm_norm_sum = 0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
    for (std::int64_t c = 0; c < C; ++c) {
      const float dnorm = dy[c] * gamma[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * math::layer_norm_normalize(x[c], stats);
    }
    const float dnorm_mean = dnorm_sum / static_cast<float>(C);
    const float dnorm_norm_mean = dnorm_norm_sum / static_cast<float>(C);
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) {
      dx[c] = math::layer_norm_input_grad(dy[c] * gamma[c], math::layer_norm_normalize(x[c], stats),
                                          dnorm_mean, dnorm_norm_mean, stats.rstd);
    }
  }
}

void parameter_grads(LayerNormShape s, const float* dout, const float* in, const float* mean,
                     const float* rstd, float* dgamma, float* dbeta) {
  const std::int64_t C = s.C;
  const std::int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (s.rows * C >= kMinParallelElements)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, C - c0);
    double sum_gamma[kColumnBlock] = {};
    double sum_beta[kColumnBlock] = {};
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const float* dy = dout + r * C + c0;
      const float* x = in + r * C + c0;
      const math::RowStats stats{.mean = mean[r], .rstd = rstd[r]};
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) {
        sum_gamma[c] += static_cast<double>(dy[c] * math::layer_norm_normalize(x[c], stats));
        sum_beta[c] += static_cast<double>(dy[c]);
      }
    }
    for (std::int64_t c = 0; c < width; ++c) {
      dgamma[c0 + c] = static_cast<float>(static_cast<double>(dgamma[c0 + c]) + sum_gamma[c]);
      dbeta[c0 + c] = static_cast<float>(static_cast<double>(dbeta[c0 + c]) + sum_beta[c]);
    }
  }
}

}  // namespace

void layer_norm_backward(LayerNormShape s, const float* dout, const float* in, const float* gamma,
                         const float* mean, const float* rstd, float* din, float* dgamma,
                         float* dbeta) {
  input_grad(s, dout, in, gamma, mean, rstd, din);
  parameter_grads(s, dout, in, mean, rstd, dgamma, dbeta);
}

}  // namespace tandem::kernels::cpu
