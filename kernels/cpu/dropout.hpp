// Megatron's hidden dropout on activations (after the embedding, on each layer's attention
// and MLP output) and its fused bias-dropout-add, with the mask drawn from the counter-based
// hash of kernels/math/dropout.hpp: backward and recomputation redraw the forward's.
#pragma once

#include <cstdint>

#include "kernels/math/dropout.hpp"

namespace tandem::kernels::cpu {

// out = dropout(in) over n elements; out may be in. With p = 0 a copy.
void dropout_forward(const float* in, float* out, std::int64_t n, math::HiddenDropoutMask m);

// din = dout through the same mask (kept · 1 / (1 − p), dropped 0); din may be dout.
void dropout_backward(const float* dout, float* din, std::int64_t n, math::HiddenDropoutMask m);

// Megatron's bias-dropout-add: out(rows, C) = residual + dropout(in + bias(C)); bias may be
// null. Rounded as bias_add, dropout and add round it, so fused and unfused give the same
// bits; out may be in or residual.
void bias_dropout_add(const float* in, const float* bias, const float* residual, float* out,
                      std::int64_t rows, std::int64_t C, math::HiddenDropoutMask m);

}  // namespace tandem::kernels::cpu
