// The per-row pieces of a blocked online-softmax (flash-style) attention, shared by the
// CPU kernel (kernels/cpu/flash_attention.cpp) and the CUDA one. A query row meets the
// keys block by block; it keeps a running max m, a running Σ exp(s − m) and an
// accumulator of Σ exp(s − m)·v, rescaled by exp(m_old − m_new) when the max grows (the
// SoftmaxState rule of softmax.hpp). No (T, T) matrix is kept: forward saves the
// log-sum-exp lse = m + log l per row, and backward recomputes p = exp(s − lse).
// Masks are by absolute positions so a caller can run one block of a longer sequence
// (ring attention): query i sits at q_offset + i, key j at k_offset + j.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/math/exp.hpp"
#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

enum class AttentionMask : std::int32_t {
  causal = 0,  // key visible when its position ≤ the query's
  none = 1,    // every key visible (a block wholly in the past of a ring step)
};

TANDEM_HOST_DEVICE inline bool attention_visible(AttentionMask mask, std::int64_t query_position,
                                                 std::int64_t key_position) {
  return mask == AttentionMask::none || key_position <= query_position;
}

// The log-sum-exp of a row that saw no visible key: its output is 0 and exp(s − lse) of
// any score underflows to 0 (exp_approx clamps its argument, so this stays finite).
constexpr float kEmptyRowLse = -FLT_MAX;

// Factor that rescales a row's sum and accumulator when its max moves from m_old to m_new.
TANDEM_HOST_DEVICE inline float online_rescale(float m_old, float m_new) {
  return exp_approx(m_old - m_new);
}

TANDEM_HOST_DEVICE inline float row_lse(float max, float sum) {
  return sum > 0 ? max + std::log(sum) : kEmptyRowLse;
}

// A row resumed from an earlier call's normalised output and log-sum-exp (ring attention
// meets the keys block by block across calls): with max = lse and sum = 1 the accumulator
// is that output itself, and the next blocks continue the same online softmax exactly.
TANDEM_HOST_DEVICE inline void resume_row(float lse, float& max, float& sum) {
  if (lse == kEmptyRowLse) {
    max = -FLT_MAX;
    sum = 0;
  } else {
    max = lse;
    sum = 1;
  }
}

// Slots per query group of a key/value source, and where its key slot sits: the grouped
// QKV (heads_per_group + 2 slots, keys after the queries), or keys and values only (2).
TANDEM_HOST_DEVICE inline std::int64_t kv_slots(std::int64_t heads_per_group, bool kv_only) {
  return kv_only ? 2 : heads_per_group + 2;
}
TANDEM_HOST_DEVICE inline std::int64_t key_slot(std::int64_t heads_per_group, bool kv_only) {
  return kv_only ? 0 : heads_per_group;
}

// Feature widths of the grouped layouts when the value heads are `vd` wide and the query
// and key heads `hd` (multi-latent attention: vd 128 against hd 192; vd = hd otherwise): a
// group's row holds its P query heads, its key and its value, [P·hd | hd | vd]; a
// key/value-only row [hd | vd]; the key sits after the queries (or first).
TANDEM_HOST_DEVICE inline std::int64_t group_width(std::int64_t heads_per_group, std::int64_t hd,
                                                   std::int64_t vd) {
  return (heads_per_group + 1) * hd + vd;
}
TANDEM_HOST_DEVICE inline std::int64_t kv_group_width(std::int64_t heads_per_group, std::int64_t hd,
                                                      std::int64_t vd, bool kv_only) {
  return kv_only ? hd + vd : group_width(heads_per_group, hd, vd);
}
TANDEM_HOST_DEVICE inline std::int64_t key_offset(std::int64_t heads_per_group, std::int64_t hd,
                                                  bool kv_only) {
  return key_slot(heads_per_group, kv_only) * hd;
}

// Backward: the probability of one score from the row's saved log-sum-exp.
TANDEM_HOST_DEVICE inline float prob_from_lse(float score, float lse) {
  return exp_approx(score - lse);
}

}  // namespace tandem::kernels::math
