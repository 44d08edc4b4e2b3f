// Bias of a linear layer, kept apart from the GEMM: forward adds it to every row of the
// GEMM output, backward sums the output gradient over rows (Megatron's linear layers
// with skip_bias_add off; the column-parallel bias is sharded like the output columns).
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// out(rows, C) += bias(C)
void bias_add(float* out, const float* bias, std::int64_t rows, std::int64_t C);

// dbias(C) += Σ_rows dout(rows, C); summed in double, rows in order, so the result does
// not depend on the thread count.
void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C);

}  // namespace tandem::kernels::cpu
