// SwiGLU (Shazeer 2020, Megatron's --swiglu): the MLP's first projection is a fused
// gate+up GEMM of width 2·F, and the activation is y = silu(gate)·up, silu(g) = g·σ(g).
//   dgate = dy·up·σ(g)·(1 + g·(1 − σ(g))),  dup = dy·silu(g).
// σ goes through exp_approx(−g), whose input clamp keeps very negative g finite (σ → 0).
#pragma once

#include "kernels/math/exp.hpp"
#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

TANDEM_HOST_DEVICE inline float sigmoid(float x) {
  return 1.0f / (1.0f + exp_approx(-x));
}

TANDEM_HOST_DEVICE inline float swiglu(float gate, float up) {
  return gate * sigmoid(gate) * up;
}

TANDEM_HOST_DEVICE inline float swiglu_gate_grad(float dy, float gate, float up) {
  const float s = sigmoid(gate);
  return dy * up * s * (1.0f + gate * (1.0f - s));
}

TANDEM_HOST_DEVICE inline float swiglu_up_grad(float dy, float gate) {
  return dy * gate * sigmoid(gate);
}

}  // namespace tandem::kernels::math
