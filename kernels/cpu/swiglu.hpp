// SwiGLU over the fused gate+up projection (Megatron's --swiglu): each row of the input
// holds [gate (F), up (F)] — this tensor-parallel rank's halves, as Megatron's fused
// linear_fc1 output is chunked — and the output row is silu(gate)·up (F).
// Math: kernels/math/swiglu.hpp.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// in (rows, 2F) → out (rows, F).
void swiglu_forward(const float* in, float* out, std::int64_t rows, std::int64_t F);
// din (rows, 2F) written from dout (rows, F) and the forward's in.
void swiglu_backward(const float* dout, const float* in, float* din, std::int64_t rows,
                     std::int64_t F);

}  // namespace tandem::kernels::cpu
