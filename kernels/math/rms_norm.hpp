// RMSNorm of one row of C features (Zhang & Sennrich 2019; Llama's and Megatron's
// --normalization RMSNorm): no mean subtraction and no β,
//   rstd = 1/sqrt(mean(x²) + ε),  norm = x·rstd,  y = norm·γ,  dnorm = dy·γ,
//   dx = (dnorm − norm·mean(dnorm·norm))·rstd.
// The CPU loops (kernels/cpu/rms_norm.cpp) and the CUDA kernel share these functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// 1/sqrt(Σx²/C + ε) from the row's sum of squares.
TANDEM_HOST_DEVICE inline float rms_norm_rstd(float sum_squares, std::int64_t C, float epsilon) {
  return 1.0f / std::sqrt(sum_squares / static_cast<float>(C) + epsilon);
}

TANDEM_HOST_DEVICE inline float rms_norm_row_rstd(const float* x, std::int64_t C, float epsilon) {
  float squares = 0;
  TANDEM_SIMD_SUM(squares)
  for (std::int64_t i = 0; i < C; ++i) squares += x[i] * x[i];
  return rms_norm_rstd(squares, C, epsilon);
}

// dx of one element; dnorm = dy·γ, norm = x·rstd, the mean is over the row.
TANDEM_HOST_DEVICE inline float rms_norm_input_grad(float dnorm, float norm, float dnorm_norm_mean,
                                                    float rstd) {
  return (dnorm - norm * dnorm_norm_mean) * rstd;
}

}  // namespace tandem::kernels::math
