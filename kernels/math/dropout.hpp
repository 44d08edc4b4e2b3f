// Attention dropout (Megatron's --attention-dropout on the softmax probabilities), with
// the mask drawn from a counter-based hash instead of a stored bit tensor: element
// `index` of a (seed) stream is kept when its hash clears p. Forward, activation
// recomputation and backward regenerate the same mask from (seed, index), on every
// binding, as cuRAND's Philox streams do for fused attention kernels; kept elements are
// scaled by 1 / (1 − p) (inverted dropout, torch.nn.functional.dropout's convention).
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix whose output
// bits pass BigCrush for consecutive inputs.
TANDEM_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The stream of one attention call: a seed and the stream's identity (microbatch,
// layer) mixed into one key.
TANDEM_HOST_DEVICE inline std::uint64_t dropout_stream(std::uint64_t seed, std::uint64_t a,
                                                       std::uint64_t b) {
  return mix64(mix64(seed ^ mix64(a + 0x9e3779b97f4a7c15ULL)) + b);
}

// Whether element `index` of `stream` survives dropout with probability p of dropping
// (0 ≤ p < 1); the top 32 hash bits against p·2³².
TANDEM_HOST_DEVICE inline bool dropout_keep(std::uint64_t stream, std::uint64_t index, float p) {
  const std::uint64_t u = mix64(stream + index * 0x9e3779b97f4a7c15ULL) >> 32;
  return static_cast<double>(u) >= static_cast<double>(p) * 4294967296.0;
}

// The stream index of probability (i, j) of head bh = b·heads_here + h of a rank that
// holds heads [head_offset, head_offset + heads_here) of heads_total (0: heads_here):
// ((b·heads_total + head_offset + h)·T + i)·T + j, the same under any tensor-parallel split.
TANDEM_HOST_DEVICE inline std::uint64_t dropout_element(std::int64_t bh, std::int64_t heads_here,
                                                        std::int64_t head_offset,
                                                        std::int64_t heads_total, std::int64_t T,
                                                        std::int64_t i, std::int64_t j) {
  const std::int64_t heads = heads_total > 0 ? heads_total : heads_here;
  const std::int64_t global = (bh / heads_here) * heads + head_offset + bh % heads_here;
  return static_cast<std::uint64_t>((global * T + i) * T + j);
}

// The stream of one hidden dropout (core/device.hpp HiddenDropout: a site per embedding
// and layer output), salted apart from the attention dropout streams.
TANDEM_HOST_DEVICE inline std::uint64_t hidden_dropout_stream(std::uint64_t seed,
                                                              std::uint64_t microbatch,
                                                              std::uint64_t site) {
  return dropout_stream(seed ^ 0x68696464656e2d64ULL, microbatch, site);
}

// A hidden dropout as the kernels take it: element i of a call is element first + i of
// the stream (first = row_offset · C).
struct HiddenDropoutMask {
  std::uint64_t stream = 0;
  std::uint64_t first = 0;
  float p = 0;
};

// x after dropout: 0 when dropped, x / (1 − p) when kept.
TANDEM_HOST_DEVICE inline float dropout_apply(float x, std::uint64_t stream, std::uint64_t index,
                                              float p) {
  return dropout_keep(stream, index, p) ? x / (1.0f - p) : 0.0f;
}

}  // namespace tandem::kernels::math
