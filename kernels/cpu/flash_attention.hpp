// Fused (flash-style) scaled-dot-product attention with grouped queries, forward and
// backward, on the query groups of one tensor-parallel rank. Blocked online softmax
// (math: kernels/math/flash_attention.hpp): no (Tq, Tk) matrix is ever stored; forward
// saves the per-row log-sum-exp, backward recomputes the probabilities block by block
// (Dao 2023, FlashAttention-2's loop order: key blocks outside, query blocks inside).
//
// Layout, sequence-first as Megatron's [s, b, h], grouped as Megatron's fused QKV:
//   q_source  (Tq, B, G, P + 2, HD): per group P query heads, then its key and value head
//   kv_source (Tk, B, G, P + 2, HD): only the key and value heads are read
//   out       (Tq, B, G·P, VD);  lse (B, G·P, Tq), fp32
// where the value heads are VD wide (VD = HD unless set: multi-latent attention's queries
// and keys are wider than its values), so a group's row is [P·HD queries | HD key | VD
// value] and a key/value-only row [HD | VD]. The scores are scaled by 1/sqrt(HD).
// Query head h belongs to group h / P (GQA; P = 1 is multi-head attention). q_source and
// kv_source may be the same tensor (self-attention) or different blocks of a longer
// sequence (ring attention), which is why positions are explicit: query i sits at
// q_offset + i, key j at k_offset + j.
#pragma once

#include <cstdint>

#include "kernels/math/flash_attention.hpp"

namespace tandem::kernels::cpu {

struct FlashShape {
  std::int64_t B = 0;
  std::int64_t Tq = 0;
  std::int64_t Tk = 0;
  std::int64_t G = 0;   // query groups (= key/value heads) on this rank
  std::int64_t P = 1;   // query heads per group
  std::int64_t HD = 0;  // head dimension of the queries and keys
  std::int64_t VD = 0;  // of the values; 0: HD
  std::int64_t q_offset = 0;
  std::int64_t k_offset = 0;
  math::AttentionMask mask = math::AttentionMask::causal;
  // kv_source holds keys and values only, (Tk, B, G, 2, HD), instead of the grouped QKV
  // (what ring attention passes around the context-parallel group).
  bool kv_only = false;
  // Forward: output and lse hold an earlier call's result for the same queries, which this
  // call's keys extend (ring attention's merge). Backward: add into the gradients instead
  // of writing them.
  bool accumulate = false;
  std::int64_t vd() const { return VD > 0 ? VD : HD; }
};

void flash_attention_forward(FlashShape s, const float* q_source, const float* kv_source,
                             float* out, float* lse);

// Writes the query slots of grad_q_source and the key/value slots of grad_kv_source (the
// other slots are left alone, so both may be the same tensor); dout, out and lse as forward.
void flash_attention_backward(FlashShape s, const float* dout, const float* q_source,
                              const float* kv_source, const float* out, const float* lse,
                              float* grad_q_source, float* grad_kv_source);

// Visible (query, key) pairs of one head: what both directions' FLOPs scale with.
double flash_visible_pairs(FlashShape s);

}  // namespace tandem::kernels::cpu
