// GeLU (tanh approximation) forward and backward over n elements, the MLP's activation
// between fc1 and fc2. The element math is kernels/math/gelu.hpp.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// out = gelu(in); out may be in.
void gelu_forward(const float* in, float* out, std::int64_t n);

// din = dout · gelu'(in), written (not accumulated); din may be dout.
void gelu_backward(const float* dout, const float* in, float* din, std::int64_t n);

// Megatron's fused bias-GeLU over (rows, C): out = gelu(in + bias); out may be in.
void bias_gelu_forward(const float* in, const float* bias, float* out, std::int64_t rows,
                       std::int64_t C);

// din = dout · gelu'(in + bias), written; din may be dout.
void bias_gelu_backward(const float* dout, const float* in, const float* bias, float* din,
                        std::int64_t rows, std::int64_t C);

}  // namespace tandem::kernels::cpu
