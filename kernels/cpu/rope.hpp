// Rotary position embedding applied in place to the query and key heads of a fused QKV
// activation (math: kernels/math/rope.hpp). The activation is sequence-first,
// (T, B, groups, per_group, head_dim): Megatron's grouped layout puts each query group's
// query heads, then its key head, then its value head side by side; the first
// `rotate_per_group` heads of every group are rotated (the queries and the key), the rest
// (the value) pass. Backward is the same call with inverse = true on the gradient.
// Multi-latent attention rotates features [first_feature, first_feature + rotary_dim) of
// each head, in adjacent pairs (interleaved; kernels/math/rope.hpp).
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct RopeShape {
  std::int64_t T = 0;
  std::int64_t B = 0;
  std::int64_t groups = 0;
  std::int64_t per_group = 0;
  std::int64_t rotate_per_group = 0;
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;       // even, ≤ head_dim
  std::int64_t position_offset = 0;  // position of row t is position_offset + t
  float base = 10000.0f;
  std::int64_t first_feature = 0;  // the rotated features start here, within head_dim
  bool interleaved = false;        // pairs (2i, 2i + 1) instead of (i, i + rotary_dim / 2)
};

void rope_apply(RopeShape s, float* x, bool inverse);

}  // namespace tandem::kernels::cpu
