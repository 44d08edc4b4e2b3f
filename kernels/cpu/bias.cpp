// Bias add and bias gradient; see bias.hpp.
#include "kernels/cpu/bias.hpp"

#include <algorithm>

#include "kernels/cpu/threads.hpp"

namespace tandem::kernels::cpu {

void bias_add(float* out, const float* bias, std::int64_t rows, std::int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = out + r * C;
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) row[c] += bias[c];
  }
}

void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t C) {
  const std::int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, C - c0);
    double sum[kColumnBlock] = {};
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = dout + r * C + c0;
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) sum[c] += static_cast<double>(row[c]);
    }
    for (std::int64_t c = 0; c < width; ++c)
      dbias[c0 + c] = static_cast<float>(static_cast<double>(dbias[c0 + c]) + sum[c]);
  }
}

}  // namespace tandem::kernels::cpu
