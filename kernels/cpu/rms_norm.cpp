// RMSNorm loops; see rms_norm.hpp. Backward: rows in parallel for the input gradient,
// then column blocks in parallel for γ's gradient (fixed order, no float atomics).
#include "kernels/cpu/rms_norm.hpp"

#include <algorithm>

#include "kernels/cpu/threads.hpp"
#include "kernels/math/rms_norm.hpp"

namespace tandem::kernels::cpu {

void rms_norm_forward(RmsNormShape s, const float* in, const float* gamma, float* out, float* rstd,
                      float epsilon) {
  const std::int64_t C = s.C;
#pragma omp parallel for schedule(static) if (s.rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* x = in + r * C;
    float* y = out + r * C;
    const float rs = math::rms_norm_row_rstd(x, C, epsilon);
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) y[c] = x[c] * rs * gamma[c];
    rstd[r] = rs;
  }
}

void rms_norm_backward(RmsNormShape s, const float* dout, const float* in, const float* gamma,
                       const float* rstd, float* din, float* dgamma) {
  const std::int64_t C = s.C;
#pragma omp parallel for schedule(static) if (s.rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* dy = dout + r * C;
    const float* x = in + r * C;
    float* dx = din + r * C;
    const float rs = rstd[r];
    float dnorm_norm_sum = 0;
#pragma omp simd reduction(+ : dnorm_norm_sum)
    for (std::int64_t c = 0; c < C; ++c) dnorm_norm_sum += dy[c] * gamma[c] * (x[c] * rs);
    const float dnorm_norm_mean = dnorm_norm_sum / static_cast<float>(C);
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c)
      dx[c] = math::rms_norm_input_grad(dy[c] * gamma[c], x[c] * rs, dnorm_norm_mean, rs);
  }
  const std::int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (s.rows * C >= kMinParallelElements)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, C - c0);
    double sum_gamma[kColumnBlock] = {};
    for (std::int64_t r = 0; r < s.rows; ++r) {
      const float* dy = dout + r * C + c0;
      const float* x = in + r * C + c0;
      const float rs = rstd[r];
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c)
        sum_gamma[c] += static_cast<double>(dy[c] * (x[c] * rs));
    }
    for (std::int64_t c = 0; c < width; ++c)
      dgamma[c0 + c] = static_cast<float>(static_cast<double>(dgamma[c0 + c]) + sum_gamma[c]);
  }
}

}  // namespace tandem::kernels::cpu
