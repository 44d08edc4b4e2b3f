// GeLU with the tanh approximation, as GPT-2 and Megatron's bias_gelu use it:
//   gelu(x) = 0.5·x·(1 + tanh(u)),  u = sqrt(2/π)·(x + 0.044715·x³).
// The derivative is written out rather than derived by autograd, as Megatron's
// bias_gelu_back does:
//   gelu'(x) = 0.5·(1 + tanh u) + 0.5·x·(1 - tanh² u)·sqrt(2/π)·(1 + 3·0.044715·x²).
#pragma once

#include "kernels/math/exp.hpp"
#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

TANDEM_HOST_DEVICE inline float gelu(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanh_approx(u));
}

// d gelu(x) / dx.
TANDEM_HOST_DEVICE inline float gelu_derivative(float x) {
  const float x2 = x * x;
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x2 * x);
  const float t = tanh_approx(u);
  const float du_dx = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x2);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

}  // namespace tandem::kernels::math
