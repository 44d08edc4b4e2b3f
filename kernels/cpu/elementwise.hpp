// Elementwise kernels of the GPT step on flat fp32 buffers of n elements: residual adds,
// gradient scaling (loss scaling, clipping), zeroing gradient buffers, copies.
// Multi-threaded above kMinParallelElements; each element is computed independently,
// so results never depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/math/copy_columns.hpp"

namespace tandem::kernels::cpu {

// out = a + b; out may be a or b (in-place residual add or gradient accumulation).
void add(const float* a, const float* b, float* out, std::int64_t n);

// x *= factor.
void scale(float* x, std::int64_t n, float factor);

// x = value.
void fill(float* x, std::int64_t n, float value);

// to = from (buffers must not overlap).
void copy(const float* from, float* to, std::int64_t n);

// Columns of every row from one matrix into another (or added): math::ColumnCopy.
void copy_columns(const math::ColumnCopy& c, const float* from, float* to);

}  // namespace tandem::kernels::cpu
