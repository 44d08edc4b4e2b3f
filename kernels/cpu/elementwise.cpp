// Elementwise kernels; see elementwise.hpp.
#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/threads.hpp"

namespace tandem::kernels::cpu {

void add(const float* a, const float* b, float* out, std::int64_t n) {
  // No __restrict: out may alias a or b, which is safe elementwise.
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale(float* x, std::int64_t n, float factor) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void fill(float* x, std::int64_t n, float value) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i) x[i] = value;
}

void copy(const float* from, float* to, std::int64_t n) {
  // Memory-bound: two threads each copying their share move more bytes per second
  // than one memcpy; the chunks are large enough for memcpy's fast paths.
  constexpr std::int64_t kChunk = kMinParallelElements;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk;
    const std::int64_t count = std::min(kChunk, n - begin);
    std::memcpy(to + begin, from + begin, static_cast<std::size_t>(count) * sizeof(float));
  }
}

void copy_columns(const math::ColumnCopy& c, const float* from, float* to) {
  // Row by row: a block's columns are contiguous on both sides.
  const std::int64_t per_row = c.per_row();
#pragma omp parallel for schedule(static) if (c.elements() >= kMinParallelElements)
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t b0 = 0; b0 < per_row; b0 += c.width) {
      const std::int64_t e = r * per_row + b0;
      float* t = to + c.to(e);
      if (c.sums()) {
        for (std::int64_t j = 0; j < c.width; ++j) {
          float sum = 0;
          for (std::int64_t k = 0; k < c.count; ++k) sum += from[c.from(e, k) + j];
          t[j] = c.accumulate ? t[j] + sum : sum;
        }
        continue;
      }
      const float* f = from + c.from(e);
      if (c.accumulate)
        for (std::int64_t j = 0; j < c.width; ++j) t[j] += f[j];
      else
        std::copy_n(f, c.width, t);
    }
  }
}

}  // namespace tandem::kernels::cpu
