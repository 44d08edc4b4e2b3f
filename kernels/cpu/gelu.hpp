// GeLU (tanh approximation) forward and backward over n elements, the MLP's activation
// between fc1 and fc2. The element math is kernels/math/gelu.hpp.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// out = gelu(in); out may be in.
void gelu_forward(const float* in, float* out, std::int64_t n);

// din = dout · gelu'(in), written (not accumulated); din may be dout.
void gelu_backward(const float* dout, const float* in, float* din, std::int64_t n);

}  // namespace tandem::kernels::cpu
