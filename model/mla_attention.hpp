// Megatron-Core's multi-latent attention (MLASelfAttention, DeepSeek-V2/V3) between a
// layer's input norm and its output projection, as Transformer Engine's layer spec shards
// it over tensor parallelism (get_gpt_layer_with_transformer_engine_submodules):
//
//   queries   linear_q_proj (column-parallel, hidden → heads·(qk + pe)); or with
//             q_lora_rank linear_q_down_proj (duplicated: every tp rank holds all of it
//             and runs it on its own rows), q_layernorm on the latent (with qk_layernorm;
//             TE fuses it into the next linear), linear_q_up_proj (column-parallel,
//             q_lora_rank → heads·(qk + pe))
//   keys and  linear_kv_down_proj (duplicated, hidden → kv_lora_rank + pe), split into the
//   values    latent and one positional key k_pe shared by every head; kv_layernorm on the
//             latent (with qk_layernorm), linear_kv_up_proj (column-parallel,
//             kv_lora_rank → heads·(qk + v)) split per head into k_nope and v
//   RoPE      on the last pe features of every query head and on k_pe (decoupled RoPE;
//             adjacent pairs, kernels/math/rope.hpp), then k = [k_nope | k_pe] per head
//   core      fused attention with queries and keys of qk + pe features and values of v
//             (Device::flash_attention's v_head_dim), scaled by 1/sqrt(qk + pe)
//
// with qk = qk_head_dim, pe = qk_pos_emb_head_dim, v = v_head_dim. Rows are sequence-first
// (t·B + b). With sequence parallelism the duplicated projections and the latent norms see
// this rank's sequence shard (their weights are marked sequence_parallel: the trainer sums
// their gradients over tp), the column-parallel up projections gather the normalized
// latents, and k_pe is gathered along the sequence (its gradient reduce-scattered back).
// Without sequence parallelism at tp > 1 every rank holds whole sequences and the
// gradient of k_pe, which each rank's heads see only in part, is all-reduced over tp: the
// copy_to_tensor_model_parallel_region that Megatron-LM PR #6839 adds for its issue #1699
// (without it Megatron-Core's TE spec leaves that gradient partial). Megatron's local spec
// (transformer_impl "local") shards the down projections column-parallel instead; the
// step runs the TE spec's sharding for both, which computes the same model.
//
// Each rank's attention rows hold its heads, one row of features per (t, b, head):
// [q (qk + pe) | k (qk + pe) | v (v)], put together from the up projections and k_pe by
// strided copy_columns (Megatron's torch.cat and expand) and taken apart the same way in
// backward, where k_pe's gradient is the sum over the heads.
#pragma once

#include <vector>

#include "model/tensor_parallel.hpp"

namespace tandem {

// Megatron's MLA sizes (MLATransformerConfig); enabled: the layer's attention is MLA.
struct MlaOptions {
  bool enabled = false;
  int q_lora_rank = 0;  // 0: linear_q_proj (Megatron's q_lora_rank None)
  int kv_lora_rank = 0;
  int qk_head_dim = 0;
  int qk_pos_emb_head_dim = 0;
  int v_head_dim = 0;
  int rotary_dim = 0;  // the positional features RoPE rotates (even, ≤ qk_pos_emb_head_dim)
};

// What the MLA's backward needs from its forward (the norms' inputs and statistics, the
// up projections' inputs, the attention rows, output and log-sum-exp).
struct MlaActivations {
  Tensor q_latent, q_mean, q_rstd, q_normed;      // (rows_s, q_lora_rank) each; stats (rows_s)
  Tensor kv_latent, kv_mean, kv_rstd, kv_normed;  // (rows_s, kv_lora_rank)
  Tensor rows;                                    // (T·B, local heads · (2·(qk + pe) + v))
  Tensor output, lse;                             // (T·B, local heads · v), (B, local heads, T)
};

// The layer's normalization, for the latent norms (the same as its other norms).
struct MlaNorm {
  bool rms = false;
  float epsilon = 1e-5f;
  bool qk_layernorm = false;  // Megatron's q_layernorm and kv_layernorm on the latents
};

class MlaAttention {
 public:
  // Registers the projections (and latent norms) under `prefix` ("layers.3.attention.").
  MlaAttention(ParameterSet& params, const std::string& prefix, const MlaOptions& options,
               const MlaNorm& norm, int hidden, int heads, int seq, int micro_batch,
               bool sequence_parallel, float rotary_base);

  // x: the input norm's output, (rows_s, hidden) (this rank's shard with sequence
  // parallelism). Returns the attention output (T·B, local heads · v_head_dim), which the
  // layer's row-parallel projection takes. `keep_lse`: false under selective recomputation
  // (backward runs the core again for it, as Megatron's checkpointed core attention does).
  Tensor forward(ModelEnv& env, const Tensor& x, MlaActivations& a, bool keep_lse);
  // d_out: the projection's input gradient; returns the gradient of x. `x` as forward's.
  Tensor backward(ModelEnv& env, const Tensor& d_out, const Tensor& x, MlaActivations& a);

  std::vector<int> parameter_indices() const;
  std::int64_t local_heads() const { return local_heads_; }

 private:
  void norm_forward(ModelEnv& env, const Tensor& x, int w, int b, Tensor& out, Tensor& mean,
                    Tensor& rstd);
  void norm_backward(ModelEnv& env, const Tensor& dy, const Tensor& x, int w, int b,
                     const Tensor& mean, const Tensor& rstd, Tensor& dx);
  // RoPE on the positional features of a (T·B, heads · width) tensor, from feature `first`.
  void rotate(ModelEnv& env, const Tensor& x, std::int64_t heads, std::int64_t width,
              std::int64_t first, bool inverse);
  // Runs the core on a.rows into a.output / lse.
  void attention(ModelEnv& env, MlaActivations& a, Tensor& lse);

  ParameterSet& params_;
  MlaOptions o_;
  MlaNorm norm_;
  std::int64_t seq_, micro_batch_, local_heads_;
  float rotary_base_;
  std::int64_t q_head_ = 0, kv_head_ = 0, row_head_ = 0;  // features per head: q, kv up, rows
  // -1 where the configuration has none.
  int q_proj_ = -1, q_down_ = -1, q_norm_w_ = -1, q_norm_b_ = -1, q_up_ = -1;
  int kv_down_ = -1, kv_norm_w_ = -1, kv_norm_b_ = -1, kv_up_ = -1;
};

}  // namespace tandem
