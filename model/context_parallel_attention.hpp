// Fused attention over a context-parallel group, as Megatron-Core runs it with Transformer
// Engine (cp_comm_type p2p, its default, and all_gather). Each of the group's cp ranks
// holds two of the sequence's 2·cp chunks, r and 2·cp − 1 − r (sequence_position), so that
// every rank meets the same share of the causal mask. Only keys and values travel: they
// are taken out of the grouped QKV (copy_columns) into a block of their own.
//
//   p2p         the blocks go round the ring: at step i a rank holds rank (r − i)'s keys
//               and values, sends them on to r + 1 while it attends to them, and extends
//               its two chunks' output and log-sum-exp with them (the fused op's
//               accumulate). Backward sends the blocks round again with their gradients,
//               which every rank adds to; after cp steps each block's gradient is home.
//   all_gather  every rank's block gathered at once and put in sequence order; each chunk
//               attends to the keys up to its own; the key/value gradients of the whole
//               sequence are reduce-scattered back.
//
// A pair of a query chunk and a key chunk is causal when they are the same chunk, whole
// when the key chunk comes earlier, and skipped when it comes later.
#pragma once

#include <string>

#include "model/tensor_parallel.hpp"

namespace tandem {

// "p2p" | "all_gather" (Megatron's --cp-comm-type spellings).
CpCommType parse_cp_comm_type(const std::string& name);

// What a context-parallel attention keeps for backward besides the QKV it was given.
struct ContextAttentionSaved {
  Tensor output;  // (local rows · B, heads · head_dim)
  Tensor lse;     // (2, B, heads, chunk) fp32: the two chunks' log-sum-exp
  Tensor kv;      // p2p: this rank's keys and values; all_gather: the whole sequence's
};

// `qkv`: this rank's grouped QKV (local rows, B, groups, heads_per_group + 2, head_dim),
// its queries and keys already rotated (RoPE) at their sequence positions.
ContextAttentionSaved context_parallel_attention_forward(ModelEnv& env, CpCommType comm,
                                                         const Tensor& qkv);

// The gradient of the grouped QKV (same shape as `qkv`) from the output's gradient.
Tensor context_parallel_attention_backward(ModelEnv& env, CpCommType comm,
                                           const Tensor& grad_output, const Tensor& qkv,
                                           const ContextAttentionSaved& saved);

}  // namespace tandem
