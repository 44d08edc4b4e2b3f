// Layer norm of one row of C features, split into the pieces a CPU loop over rows and a
// GPU block per row both need: the row statistics (mean and 1/sqrt(var + ε), saved for
// backward), the normalisation of one element, and the input gradient of one element
// given the two row means of the backward pass:
//   norm = (x - mean)·rstd,  y = norm·γ + β,  dnorm = dy·γ,
//   dx = (dnorm - mean(dnorm) - norm·mean(dnorm·norm))·rstd.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

struct RowStats {
  float mean = 0;
  float rstd = 0;  // 1 / sqrt(variance + ε), the biased (population) variance
};

// 1/sqrt(variance + ε) from the row's Σ (x - mean)² over C features (population variance).
TANDEM_HOST_DEVICE inline float layer_norm_rstd(float squared_deviations, std::int64_t C,
                                                float epsilon) {
  return 1.0f / std::sqrt(squared_deviations / static_cast<float>(C) + epsilon);
}

// Two passes over the row (mean, then squared deviations): no cancellation from
// E[x²] - E[x]², which loses digits on rows with a large mean.
TANDEM_HOST_DEVICE inline RowStats layer_norm_row_stats(const float* x, std::int64_t C,
                                                        float epsilon) {
  float sum = 0;
  TANDEM_SIMD_SUM(sum)
  for (std::int64_t i = 0; i < C; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(C);
  float squares = 0;
  TANDEM_SIMD_SUM(squares)
  for (std::int64_t i = 0; i < C; ++i) {
    const float d = x[i] - mean;
    squares += d * d;
  }
  return RowStats{.mean = mean, .rstd = layer_norm_rstd(squares, C, epsilon)};
}

TANDEM_HOST_DEVICE inline float layer_norm_normalize(float x, RowStats s) {
  return (x - s.mean) * s.rstd;
}

// dx of one element; dnorm = dy·γ, the two means are over the row.
TANDEM_HOST_DEVICE inline float layer_norm_input_grad(float dnorm, float norm, float dnorm_mean,
                                                      float dnorm_norm_mean, float rstd) {
  return (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
}

}  // namespace tandem::kernels::math
