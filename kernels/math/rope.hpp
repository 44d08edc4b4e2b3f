// Rotary position embedding (Su et al. 2021) as Megatron applies it by default
// (rotary_interleaved = False, "rotate half"): the first `rotary_dim` features of a head
// (rotary_dim = head_dim · rotary_percent) are two halves x1 = x[0, d/2), x2 = x[d/2, d),
// rotated pairwise by θ_i = position · base^(−2i/d):
//   y1 = x1·cos θ − x2·sin θ,  y2 = x2·cos θ + x1·sin θ;  features past rotary_dim pass.
// The rotation is orthogonal, so backward is the same rotation by −θ.
// Multi-latent attention rotates only its positional features, the last
// qk_pos_emb_head_dim of each query head and the shared positional key, and pairs them as
// (x[2i], x[2i+1]): Megatron-Core de-interleaves them into halves and rotates the halves
// (mla_rotary_interleaved), leaving the features in the de-interleaved order; rotating the
// adjacent pairs in place gives the same features in the original order, and q·k, which
// sees both orders alike, is the same.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// θ of pair i at `position`: base^(−2i/rotary_dim)·position, the inverse frequency in
// fp32 as Megatron's RotaryEmbedding computes it.
TANDEM_HOST_DEVICE inline float rope_angle(std::int64_t position, std::int64_t i,
                                           std::int64_t rotary_dim, float base) {
  const float inv_freq =
      1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
  return static_cast<float>(position) * inv_freq;
}

// The features of pair i among the rotated `rotary_dim`: (i, i + rotary_dim / 2) by halves,
// (2i, 2i + 1) interleaved.
struct RopePair {
  std::int64_t first, second;
};
TANDEM_HOST_DEVICE inline RopePair rope_pair(std::int64_t i, std::int64_t rotary_dim,
                                             bool interleaved) {
  return interleaved ? RopePair{2 * i, 2 * i + 1} : RopePair{i, i + rotary_dim / 2};
}

struct RotatedPair {
  float first, second;
};

// The pair (x1_i, x2_i) rotated by θ (inverse: by −θ).
TANDEM_HOST_DEVICE inline RotatedPair rope_rotate(float x1, float x2, float cos_t, float sin_t,
                                                  bool inverse) {
  const float s = inverse ? -sin_t : sin_t;
  return RotatedPair{x1 * cos_t - x2 * s, x2 * cos_t + x1 * s};
}

}  // namespace tandem::kernels::math
