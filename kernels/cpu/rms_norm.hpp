// RMSNorm over the last dimension (C features) of a (rows, C) activation (Llama's norm,
// Megatron's --normalization RMSNorm). Forward saves each row's rstd; backward writes the
// input gradient and accumulates γ's gradient. Row math: kernels/math/rms_norm.hpp.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct RmsNormShape {
  std::int64_t rows = 0;
  std::int64_t C = 0;
};

// out = in·rstd·γ per row; rstd (rows) saved for backward.
void rms_norm_forward(RmsNormShape s, const float* in, const float* gamma, float* out, float* rstd,
                      float epsilon);

// din written; dgamma += Σ_rows dout·norm, summed in double, rows in order (deterministic
// whatever the thread count). din must not alias dout or in.
void rms_norm_backward(RmsNormShape s, const float* dout, const float* in, const float* gamma,
                       const float* rstd, float* din, float* dgamma);

}  // namespace tandem::kernels::cpu
