// FLOPs per iteration of a GPT, as the field reports them.
//  - megatron_log_flops: what Megatron-LM's training log uses today
//    (training.py num_floating_point_operations for a dense GPT with a 4h MLP): the
//    attention-score term halved for the causal mask, 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)).
//  - paper_model_flops: Narayanan et al. 2021 / Korthikanti et al. 2022 eq. 7, the
//    formula of the published tables: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)), with 96 and
//    16 in place of 72 and 12 when full recomputation adds a forward pass (hardware FLOPs).
//  - num_floating_point_operations: Megatron-LM's training.py function of that name for a
//    dense decoder of any of today's shapes (grouped-query attention, SwiGLU, kv_channels,
//    untied output), with parameter_count beside it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/pipeline_layout.hpp"
#include "core/scenario.hpp"

namespace tandem {

struct FlopsShape {
  double global_batch = 0;  // B, sequences per iteration
  double seq = 0;           // s
  double layers = 0;        // L
  double hidden = 0;        // h
  double vocab = 0;         // V (padded)
};

inline double megatron_log_flops(const FlopsShape& m) {
  return 72.0 * m.global_batch * m.seq * m.layers * m.hidden * m.hidden *
         (1.0 + m.seq / (12.0 * m.hidden) + m.vocab / (12.0 * m.layers * m.hidden));
}

inline double paper_model_flops(const FlopsShape& m, bool full_recompute = false) {
  const double k = full_recompute ? 96.0 : 72.0, v = full_recompute ? 16.0 : 12.0;
  return k * m.global_batch * m.seq * m.layers * m.hidden * m.hidden *
         (1.0 + m.seq / (6.0 * m.hidden) + m.vocab / (v * m.layers * m.hidden));
}

// The shape of a dense decoder as the FLOP and parameter counts need it.
struct DenseShape {
  double layers = 0, hidden = 0, heads = 0;
  double query_groups = 0;  // key/value heads (= heads without grouped-query attention)
  double kv_channels = 0;   // per-head width
  double ffn = 0;           // MLP hidden width
  double padded_vocab = 0, seq = 0, max_positions = 0;
  bool swiglu = false, bias = true, rmsnorm = false, learned_positions = true, untied = false;
  bool qk_layernorm = false;  // a norm of kv_channels over each query head and each key head
  // Multi-latent attention (mla false: the QKV projection above): the query latent (0: one
  // projection, linear_q_proj), the shared key/value latent, a head's query/key features
  // without and with RoPE and its value features. With qk_layernorm the norms are over the
  // latents (q_layernorm, kv_layernorm), not over each head.
  bool mla = false;
  double q_lora = 0, kv_lora = 0, qk_head = 0, pe_head = 0, v_head = 0;
  // Mixture of experts (moe_layers = 0: dense): experts of width moe_ffn, top_k per token,
  // a shared expert of width shared_ffn (0: none), in moe_layers of the layers.
  double experts = 0, top_k = 0, moe_ffn = 0, shared_ffn = 0, moe_layers = 0;
  // Multi-token prediction: its depths, each a layer of the decoder's last layer's kind
  // (mtp_moe: an MoE layer) with enorm, hnorm, eh_proj (2h -> h) and a final norm.
  double mtp_layers = 0;
  bool mtp_moe = false;
};

inline DenseShape dense_shape(const Scenario& s) {
  const auto& m = s.model;
  DenseShape d;
  d.layers = m.num_layers;
  d.hidden = m.hidden_size;
  d.heads = m.num_attention_heads;
  d.query_groups = num_query_groups(s);
  d.kv_channels = m.kv_channels
                      ? *m.kv_channels
                      : static_cast<double>(m.hidden_size / std::max(1, m.num_attention_heads));
  d.ffn = ffn_hidden_size(s);
  d.padded_vocab = padded_vocab_size(s);
  d.seq = m.seq_length;
  d.max_positions = m.max_position_embeddings.value_or(m.seq_length);
  d.swiglu = m.swiglu;
  d.bias = !m.disable_bias_linear;
  d.rmsnorm = m.normalization == "RMSNorm";
  d.learned_positions = m.position_embedding_type == "learned_absolute";
  d.untied = m.untie_embeddings_and_output_weights;
  d.qk_layernorm = m.qk_layernorm;
  if (m.mla.enabled()) {
    d.mla = true;
    d.q_lora = m.mla.q_lora_rank.value_or(0);
    d.kv_lora = m.mla.kv_lora_rank;
    d.qk_head = m.mla.qk_head_dim;
    d.pe_head = m.mla.qk_pos_emb_head_dim;
    d.v_head = m.mla.v_head_dim;
  }
  if (m.num_experts) {
    d.experts = *m.num_experts;
    d.top_k = m.moe_router_topk;
    d.moe_ffn = moe_ffn_hidden_size(s);
    d.shared_ffn = m.moe_shared_expert_intermediate_size.value_or(0);
    d.moe_layers = num_moe_layers(s);
  }
  d.mtp_layers = mtp_depths(m);
  d.mtp_moe = is_moe_layer(s, m.num_layers - 1);
  return d;
}

// The decoder's layers and the MTP depths' together, as Megatron's FLOP count takes them
// (num_layers + mtp_num_layers, the depths' MLPs dense or MoE as the last layer's).
inline DenseShape with_mtp_layers(DenseShape d) {
  d.layers += d.mtp_layers;
  if (d.mtp_moe) d.moe_layers += d.mtp_layers;
  return d;
}

// One token's attention projections as num_floating_point_operations counts them, before
// its 3·2: QKV h·(q + 2·kv) and the output q·h; or Megatron's multi-latent attention term
// (training.py, its "MLA" branch, with its +1 for each latent norm): the queries
// h·H·(qk + pe), or q_lora·(h + H·(qk + pe) + 1) through the latent; the keys and values
// kv_lora·(h + H·(qk + v) + 1) + h·pe; the output H·v·h.
inline double attention_projection_macs(const DenseShape& d) {
  if (!d.mla) {
    const double q = d.kv_channels * d.heads, kv = d.kv_channels * d.query_groups;
    return d.hidden * (q + 2.0 * kv + q);
  }
  const double q_head = d.qk_head + d.pe_head;
  const double queries =
      d.q_lora > 0 ? d.q_lora * (d.hidden + d.heads * q_head + 1.0) : d.hidden * d.heads * q_head;
  const double keys_values =
      d.kv_lora * (d.hidden + d.heads * (d.qk_head + d.v_head) + 1.0) + d.hidden * d.pe_head;
  return queries + keys_values + d.heads * d.v_head * d.hidden;
}

// The attention core's FLOPs of `batch` sequences as Megatron counts them (QKᵀ and ·V over
// the causal half, 3 passes, 2 FLOPs a multiply-add): 6·B·s²·L·q, or with multi-latent
// attention's query/key heads of qk + pe and value heads of v, 3·B·s²·L·H·(qk + pe + v).
inline double attention_core_flops(const DenseShape& d, double batch) {
  const double per_layer =
      d.mla ? 3.0 * d.heads * (d.qk_head + d.pe_head + d.v_head) : 6.0 * d.kv_channels * d.heads;
  return batch * d.seq * d.seq * d.layers * per_layer;
}

// Megatron-LM's num_floating_point_operations (training.py) for `batch` sequences: every
// GEMM 3 times (forward, weight and data gradients) at 2 FLOPs per multiply-add; the MLP
// has 3 GEMMs with SwiGLU, else 2; attention's QKᵀ and ·V over the causal half; an MoE
// layer's MLP counts the top_k experts a token goes to and the shared expert (the router's
// h·E GEMM is left out, as Megatron does).
//   3·2·B·s·[L·h·(q + 2·kv + q) + h·f·(ffn·(L − Lm) + (moe_ffn·k + shared)·Lm) + h·V]
//     + 3·2·B·s²·L·q
// with q = kv_channels·heads, kv = kv_channels·groups, f = 3 (SwiGLU) or 2, Lm MoE layers;
// with multi-latent attention its projections and core as attention_projection_macs and
// attention_core_flops say. With D multi-token prediction depths, L and Lm count the depths'
// layers too, and each depth adds its norms and eh_proj, 3·2·B·s·D·(3h + 2h²) (Megatron
// counts a norm as h FLOPs), and its logits, 3·2·B·s·D·h·V.
inline double num_floating_point_operations(const DenseShape& model, double batch) {
  const DenseShape d = with_mtp_layers(model);
  const double mtp =
      6.0 * d.mtp_layers * (3.0 * d.hidden + 2.0 * d.hidden * d.hidden + d.hidden * d.padded_vocab);
  const double f = d.swiglu ? 3.0 : 2.0;
  const double mlp =
      d.ffn * (d.layers - d.moe_layers) + (d.moe_ffn * d.top_k + d.shared_ffn) * d.moe_layers;
  const double per_token = 6.0 * d.layers * attention_projection_macs(d) +
                           6.0 * d.hidden * f * mlp + 6.0 * d.hidden * d.padded_vocab;
  return batch * d.seq * (per_token + mtp) + attention_core_flops(d, batch);
}

// Parameters, as Megatron-Core's GPT holds them. One layer: QKV h·(q + 2kv) and output
// q·h projections, the MLP h·ffn·(2 with SwiGLU, else 1) in and ffn·h out, biases of each
// unless disabled, and two norms (weight, plus bias for LayerNorm); with qk_layernorm two
// more of kv_channels (q_layernorm, k_layernorm), replicated over tp; with multi-latent
// attention its projections in place of QKV (attention_parameters). An MoE layer has, in
// place of the MLP, the router's h·E weight (no bias), E expert MLPs of width moe_ffn and
// the shared expert's MLP; a token uses top_k of the experts (the active parameters).
// Around the layers: the word embedding V·h, learned positions max_positions·h, the final
// norm, and an output layer V·h when untied.
struct ParameterCount {
  double per_layer = 0;         // a dense layer
  double per_moe_layer = 0;     // an MoE layer, every expert
  double active_moe_layer = 0;  // an MoE layer, the top_k experts a token goes to
  double embedding = 0;         // word (and learned position) embeddings, first stage
  double output = 0;            // final norm and (untied) output layer, last stage
  double total = 0;
  double active = 0;  // what one token's forward uses (= total for a dense model)
  // The multi-token prediction module apart, as DeepSeek counts V3's 671B without its 14B:
  // per depth enorm, hnorm and the final norm, eh_proj 2h·h (no bias) and its layer (the
  // shared embedding and output layer are the main model's). In neither total nor active.
  double mtp = 0;
  double active_mtp = 0;
};

// qk_layernorm's two norms over a head's kv_channels (weight, plus bias for LayerNorm);
// with multi-latent attention its norms over the query latent (if any) and the key/value
// latent.
inline double qk_norm_parameters(const DenseShape& d) {
  if (!d.qk_layernorm) return 0.0;
  const double per_feature = d.rmsnorm ? 1.0 : 2.0;
  return per_feature * (d.mla ? d.q_lora + d.kv_lora : 2.0 * d.kv_channels);
}

// Multi-latent attention's down projections, which every tp rank holds whole (Transformer
// Engine's duplicated linears): h·q_lora (with a query latent) and h·(kv_lora + pe).
inline double mla_duplicated_parameters(const DenseShape& d) {
  return d.mla ? d.hidden * d.q_lora + d.hidden * (d.kv_lora + d.pe_head) : 0.0;
}

// A layer's attention: the QKV and output projections with their biases and the QK norms;
// or multi-latent attention's projections (no biases but the output's) and latent norms.
inline double attention_parameters(const DenseShape& d) {
  if (d.mla) {
    const double q_head = d.qk_head + d.pe_head;
    const double queries = d.q_lora > 0 ? d.q_lora * d.heads * q_head : d.hidden * d.heads * q_head;
    const double up = d.kv_lora * d.heads * (d.qk_head + d.v_head);
    const double output = d.heads * d.v_head * d.hidden + (d.bias ? d.hidden : 0.0);
    return mla_duplicated_parameters(d) + queries + up + output + qk_norm_parameters(d);
  }
  const double q = d.kv_channels * d.heads, kv = d.kv_channels * d.query_groups;
  return d.hidden * (q + 2.0 * kv) + q * d.hidden + (d.bias ? (q + 2.0 * kv) + d.hidden : 0.0) +
         qk_norm_parameters(d);
}

// An MLP of width `ffn` on hidden `h`: fc1 (twice as wide with SwiGLU) and fc2, with biases.
inline double mlp_parameters(const DenseShape& d, double ffn) {
  const double fc1 = d.swiglu ? 2.0 * ffn : ffn;
  return d.hidden * fc1 + ffn * d.hidden + (d.bias ? fc1 + d.hidden : 0.0);
}

inline ParameterCount parameter_count(const DenseShape& d) {
  const double norm = d.rmsnorm ? d.hidden : 2.0 * d.hidden;
  const double attention = attention_parameters(d);
  const double shared = d.shared_ffn > 0 ? mlp_parameters(d, d.shared_ffn) : 0.0;
  const double router = d.hidden * d.experts;
  ParameterCount c;
  c.per_layer = attention + mlp_parameters(d, d.ffn) + 2.0 * norm;
  c.per_moe_layer =
      attention + router + d.experts * mlp_parameters(d, d.moe_ffn) + shared + 2.0 * norm;
  c.active_moe_layer =
      attention + router + d.top_k * mlp_parameters(d, d.moe_ffn) + shared + 2.0 * norm;
  c.embedding = d.padded_vocab * d.hidden + (d.learned_positions ? d.max_positions * d.hidden : 0);
  c.output = norm + (d.untied ? d.padded_vocab * d.hidden : 0.0);
  const double dense_layers = d.layers - d.moe_layers;
  c.total = dense_layers * c.per_layer + d.moe_layers * c.per_moe_layer + c.embedding + c.output;
  c.active =
      dense_layers * c.per_layer + d.moe_layers * c.active_moe_layer + c.embedding + c.output;
  const double depth = 3.0 * norm + 2.0 * d.hidden * d.hidden;
  c.mtp = d.mtp_layers * (depth + (d.mtp_moe ? c.per_moe_layer : c.per_layer));
  c.active_mtp = d.mtp_layers * (depth + (d.mtp_moe ? c.active_moe_layer : c.per_layer));
  return c;
}

// Parameters one rank holds, on the busiest pipeline stage: its layers (num_layers / pp,
// or as `partition` gives them, indexed [chunk · pp + pp rank] as pipeline_partition()
// returns it) and the embedding (the stage holding it) or final norm and output layer (the
// stage holding the loss; with tied embeddings and pp > 1 Megatron keeps a copy of the
// word embedding there); the MTP block where the partition puts it (with the final norm
// then on the last layer's stage, and a copy of the word embedding).
// Tensor parallelism splits the weights, the column-parallel biases and the vocabulary;
// norms, learned positions, the row-parallel biases (attention output, fc2) and multi-latent
// attention's down projections are replicated over tp. In an MoE layer expert parallelism gives
// each rank experts / ep of the experts (each split over tp like an MLP), and the router is
// replicated. Which layers are MoE layers `moe_layer` says, one flag per layer (empty for a dense
// model; is_moe_layer() in core/scenario.hpp gives Megatron's moe_layer_freq either form).
inline double parameters_per_rank(const DenseShape& d, int tp, int pp, int ep = 1,
                                  const std::vector<bool>& moe_layer = {},
                                  const std::vector<ChunkPlan>& partition = {}) {
  const ParameterCount c = parameter_count(d);
  const double norm = d.rmsnorm ? d.hidden : 2.0 * d.hidden;
  const double replicated = 2.0 * norm + (d.bias ? 2.0 * d.hidden : 0.0) + qk_norm_parameters(d) +
                            mla_duplicated_parameters(d);
  const double layer = (c.per_layer - replicated) / tp + replicated;
  const double router = d.hidden * d.experts;
  const double moe =
      (c.per_moe_layer - d.experts * mlp_parameters(d, d.moe_ffn) - router - replicated) / tp +
      (d.experts / ep) * mlp_parameters(d, d.moe_ffn) / tp + router + replicated;
  std::vector<ChunkPlan> chunks = partition;
  const int depths = static_cast<int>(d.mtp_layers);
  if (chunks.empty()) {  // the even split, one chunk per stage (MTP on the last)
    const int per_stage = static_cast<int>(d.layers) / pp;
    for (int r = 0; r < pp; ++r)
      chunks.push_back({r * per_stage, per_stage, r == 0, r == pp - 1, r == pp - 1 ? depths : 0});
  }
  const double word = d.padded_vocab * d.hidden / tp;
  const double embedding = word + (d.learned_positions ? d.max_positions * d.hidden : 0);
  // The output layer on the last stage: untied, or with pp > 1 a copy of the word embedding.
  const double output = d.untied || pp > 1 ? word : 0.0;
  // An MTP depth: its three norms (replicated), eh_proj (rows over tp) and its layer.
  const double mtp_depth = 3.0 * norm + 2.0 * d.hidden * d.hidden / tp + (d.mtp_moe ? moe : layer);
  std::vector<double> stage(static_cast<std::size_t>(pp), 0.0);
  for (std::size_t v = 0; v < chunks.size(); ++v) {
    const ChunkPlan& chunk = chunks[v];
    double& sum = stage[v % static_cast<std::size_t>(pp)];
    for (int i = chunk.first_layer; i < chunk.first_layer + chunk.num_layers; ++i)
      sum +=
          static_cast<std::size_t>(i) < moe_layer.size() && moe_layer[static_cast<std::size_t>(i)]
              ? moe
              : layer;
    if (chunk.pre_process) sum += embedding;
    if (chunk.post_process) sum += output;
    // The final norm: on the loss chunk, or with MTP on the last layer's.
    const bool last_layer =
        chunk.num_layers > 0 && chunk.first_layer + chunk.num_layers == d.layers;
    if (depths > 0 ? last_layer : chunk.post_process) sum += norm;
    // The MTP block, with a copy of the word embedding unless the output layer is one or
    // the chunk holds the embedding.
    if (chunk.mtp_layers > 0) {
      sum += chunk.mtp_layers * mtp_depth;
      if (!chunk.pre_process && (d.untied || !chunk.post_process)) sum += word;
    }
  }
  return *std::max_element(stage.begin(), stage.end());
}

}  // namespace tandem
