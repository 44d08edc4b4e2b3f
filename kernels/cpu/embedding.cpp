// Embedding lookups and their gradients; see embedding.hpp.
#include "kernels/cpu/embedding.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/threads.hpp"
#include "kernels/math/vocab.hpp"

namespace tandem::kernels::cpu {
namespace {

bool in_shard(std::int64_t token, VocabShard shard) {
  return math::vocab_local_index(token, shard.begin, shard.size) >= 0;
}

}  // namespace

void embedding_forward(const std::int32_t* tokens, const float* table, VocabShard shard,
                       std::int64_t rows, std::int64_t C, float* out) {
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* y = out + r * C;
    const std::int64_t token = tokens[r];
    if (in_shard(token, shard)) {
      std::memcpy(y, table + (token - shard.begin) * C,
                  static_cast<std::size_t>(C) * sizeof(float));
    } else {
      std::fill(y, y + C, 0.0f);
    }
  }
}

void embedding_backward(const std::int32_t* tokens, const float* dout, VocabShard shard,
                        std::int64_t rows, std::int64_t C, float* dtable) {
  const std::int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t c0 = blk * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, C - c0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t token = tokens[r];
      if (!in_shard(token, shard)) continue;
      float* g = dtable + (token - shard.begin) * C + c0;
      const float* d = dout + r * C + c0;
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) g[c] += d[c];
    }
  }
}

void position_embedding_forward(const float* position, std::int64_t B, std::int64_t T,
                                std::int64_t C, float* out) {
#pragma omp parallel for collapse(2) schedule(static) if (B * T * C >= kMinParallelElements)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      float* y = out + (b * T + t) * C;
      const float* p = position + t * C;
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) y[c] += p[c];
    }
  }
}

void position_embedding_backward(const float* dout, std::int64_t B, std::int64_t T, std::int64_t C,
                                 float* dposition) {
  // Parallel over positions: each row of dposition sums the batch in order.
#pragma omp parallel for schedule(static) if (B * T * C >= kMinParallelElements)
  for (std::int64_t t = 0; t < T; ++t) {
    float* g = dposition + t * C;
    for (std::int64_t b = 0; b < B; ++b) {
      const float* d = dout + (b * T + t) * C;
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) g[c] += d[c];
    }
  }
}

}  // namespace tandem::kernels::cpu
