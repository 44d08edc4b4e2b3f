// One pre-LN GPT block, Megatron's TransformerLayer: LN → QKV (column-parallel) → causal
// attention over this rank's heads → projection (row-parallel) → residual; LN → fc1
// (column-parallel) → GeLU → fc2 (row-parallel) → residual. Activations are (T·B, C),
// row t·B + b, sequence-first as Megatron's [s, b, h]; with sequence parallelism the
// layer's input, layer norms and residuals are this rank's contiguous sequence shard
// (T·B / tp, C) and only the tensor-parallel regions see whole sequences.
//
// LayerOptions turn it into a Llama-style layer (Megatron's flags in brackets): RMSNorm
// [--normalization RMSNorm], no linear biases [--disable-bias-linear], rotary embeddings
// of q and k [--position-embedding-type rope], SwiGLU over a fused gate+up fc1 of 2·ffn
// rows [--swiglu], fused attention that keeps no (T, T) matrix [--use-flash-attn] and
// grouped-query attention [--group-query-attention --num-query-groups G]. Fused attention
// uses Megatron's grouped QKV layout, (groups, heads_per_group + 2, head_dim) per row, so
// a tensor-parallel rank's contiguous rows are its G / tp whole query groups. Heads are
// kv_channels wide [--kv-channels] (hidden / heads unless set): the QKV projection makes
// heads·kv_channels query and groups·kv_channels key and value columns, the output
// projection takes heads·kv_channels back to the hidden size. With qk_layernorm
// [--qk-layernorm] the layer's normalization runs over each query and each key head after
// the QKV projection and before RoPE, one kv_channels-wide weight for the queries and one
// for the keys, as Megatron-Core's q_layernorm and k_layernorm. With multi-latent attention
// [--multi-latent-attention] the QKV projection and its norms give way to
// model/mla_attention.hpp's projections through low-rank latents; the input norm is then a
// module of its own, and the output projection takes heads·v_head_dim back.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/fp8_linear.hpp"
#include "model/fp8_params.hpp"
#include "model/mla_attention.hpp"
#include "model/moe_layer.hpp"
#include "model/tensor_parallel.hpp"

namespace tandem {

enum class Recompute { none, selective, full };
Recompute parse_recompute(const std::string& granularity);  // "none" | "selective" | "full"

enum class Normalization { layer_norm, rms_norm };
// "LayerNorm" | "RMSNorm" (Megatron's --normalization spellings).
Normalization parse_normalization(const std::string& name);

// Architecture switches of a layer; the defaults are GPT's (Megatron's defaults).
struct LayerOptions {
  int num_query_groups = 0;  // 0: one per head (multi-head attention)
  bool swiglu = false;
  Normalization normalization = Normalization::layer_norm;
  float norm_epsilon = 1e-5f;
  bool rope = false;  // rotary position embedding instead of a learned absolute one
  float rotary_base = 10000.0f;
  float rotary_percent = 1.0f;  // fraction of head_dim rotated
  bool add_bias_linear = true;
  bool flash_attn = false;
  int kv_channels = 0;        // a head's width; 0: hidden / heads (Megatron's default)
  bool qk_layernorm = false;  // normalize each query and key head (Megatron-Core's)
  // The model's, not the layer's: an output layer of its own; a learned absolute position
  // embedding (false with rope, or Megatron's position_embedding_type none).
  bool untie_embeddings_and_output_weights = false;
  bool learned_position_embedding = true;
  // Megatron's --fp8-* flags: the linear layers of the layers in FP8 run their GEMMs in FP8
  // (model/fp8_linear.hpp).
  Fp8Config fp8{};
  // Multi-latent attention in place of the QKV projection (model/mla_attention.hpp).
  MlaOptions mla{};
};

struct LayerDims {
  int hidden = 0;                  // C
  int heads = 0;                   // all heads; this rank holds heads / tp
  int ffn = 0;                     // all of the MLP width; this rank holds ffn / tp
  int seq = 0;                     // T
  int micro_batch = 0;             // B
  int num_layers = 0;              // of the whole model, for the output-layer init scale
  bool sequence_parallel = false;  // activations outside tp regions are sequence shards
  LayerOptions options;
  // A mixture-of-experts layer when moe.num_experts > 0: its MLP is a MoeLayer, whose
  // experts this rank holds as ep rank ep_rank of ep_size.
  MoeOptions moe;
  int ep_size = 1, ep_rank = 0;
};

// What backward needs from forward. With full recomputation only `input` is kept; with
// selective recomputation everything but the attention probabilities. Fused attention
// keeps the per-row log-sum-exp (lse) instead of probs; RMSNorm leaves the means empty.
struct LayerActivations {
  Tensor input, ln1_out, ln1_mean, ln1_rstd, qkv, probs, lse, attn_out;
  // qk_layernorm: the query and key heads before their norms, (heads·rows, head_dim) each,
  // and the norms' statistics.
  Tensor q_in, q_mean, q_rstd, k_in, k_mean, k_rstd;
  // Context parallelism: the keys and values backward meets again (p2p: this rank's, sent
  // round the ring once more; all_gather: the whole sequence's).
  Tensor context_kv;
  Tensor residual, ln2_out, ln2_mean, ln2_rstd, fc1_out, gelu_out;
  MoeActivations moe;  // the MoE MLP's, in a mixture-of-experts layer
  MlaActivations mla;  // multi-latent attention's (attn_out is its output)
  // FP8 linear layers (qkv, proj, fc1, fc2): the FP8 copy of each one's input that its
  // weight gradient reads (Fp8Linear::saves_input). Where one is held, the compute-dtype
  // input is not (ln1_out, ln2_out, gelu_out empty; attn_out only for fused attention's
  // backward), as Transformer Engine saves only the quantized input.
  std::array<Fp8Tensor, 4> fp8_input;
};

// A head's width: kv_channels, or hidden / heads when it is not set.
std::int64_t head_dim_of(const LayerDims& dims);

class TransformerLayer {
 public:
  // The layer's FP8 scaling state (checkpoints), null when it runs without FP8.
  Fp8LayerState* fp8_state() { return fp8_state_.get(); }
  // Its FP8 parameters (--fp8-param-gather) with the state they are cast with; none without.
  std::vector<Fp8Weight> fp8_weights();
  int index() const { return index_; }
  // Registers the layer's parameters in `params` under "layers.{index}.…", or under `prefix`
  // when given (a multi-token prediction depth's "mtp.layers.0.transformer_layer."); the
  // index also names the layer's dropout streams.
  TransformerLayer(ParameterSet& params, int index, const LayerDims& dims, Recompute recompute,
                   const std::string& prefix = "");

  Tensor forward(ModelEnv& env, const Tensor& x, LayerActivations& saved);
  // `loss_scale` is the LM loss gradient's scale, which the MoE aux loss's follows.
  Tensor backward(ModelEnv& env, const Tensor& grad_out, LayerActivations& saved,
                  float loss_scale = 1.0f);
  // The indices of this layer's parameters in the ParameterSet.
  std::vector<int> parameter_indices() const;
  const MoeLayer* moe() const { return moe_.get(); }  // null in a dense layer
  MoeLayer* moe() { return moe_.get(); }

 private:
  Tensor forward_all(ModelEnv& env, const Tensor& x, LayerActivations& a, bool keep_probs);
  // The attention core between the QKV and the output projection, forward and backward.
  void attention_forward(ModelEnv& env, LayerActivations& a, bool keep_probs);
  Tensor attention_backward(ModelEnv& env, const Tensor& d_attn, LayerActivations& a);
  // The same over a context-parallel group (env.cp): model/context_parallel_attention.hpp.
  void cp_attention_forward(ModelEnv& env, LayerActivations& a, bool keep_lse);
  Tensor cp_attention_backward(ModelEnv& env, const Tensor& d_attn, LayerActivations& a);
  // RoPE on the two context-parallel chunks of a grouped QKV (or its gradient).
  void rotate_chunks(ModelEnv& env, const Tensor& grouped, bool inverse);
  void norm_forward(ModelEnv& env, const Tensor& x, int w, int b, Tensor& out, Tensor& mean,
                    Tensor& rstd);
  void norm_backward(ModelEnv& env, const Tensor& dy, const Tensor& x, int w, int b,
                     const Tensor& mean, const Tensor& rstd, Tensor& dx);
  // qk_layernorm on the fresh QKV (in place; keeps what backward needs) and its gradient
  // on d_qkv (in place).
  void qk_norm_forward(ModelEnv& env, LayerActivations& a);
  void qk_norm_backward(ModelEnv& env, Tensor& d_qkv, LayerActivations& a);
  Parameter* bias(int index) { return index < 0 ? nullptr : &params_[index]; }
  // Megatron's fusions of the biases into the kernels after them (ModelEnv).
  bool fused_bias_gelu(const ModelEnv& env) const;
  const Parameter* unfused_bias(const ModelEnv& env, int index);
  void residual_add(ModelEnv& env, const Tensor& y, int bias_index, const Tensor& residual,
                    Tensor& out, std::uint64_t site);
  Tensor dropout_grad(ModelEnv& env, const Tensor& grad_out, std::uint64_t site);
  std::int64_t head_dim() const { return head_dim_of(dims_); }
  // Grouped layout: (T, B, local groups, heads_per_group + 2, head_dim) view of the QKV.
  Shape grouped_shape() const;

  // The attention dropout of this layer's current microbatch (none when p is 0).
  AttentionDropout attention_dropout(const ModelEnv& env, std::int64_t local_heads) const;

  ParameterSet& params_;
  int index_;  // the layer's number in the model (its parameters' "layers.{index}.")
  LayerDims dims_;
  Recompute recompute_;
  // -1 where the configuration has no such parameter (biases, RMSNorm's β).
  int ln1_w_ = -1, ln1_b_ = -1, qkv_w_ = -1, qkv_b_ = -1, proj_w_ = -1, proj_b_ = -1;
  int ln2_w_ = -1, ln2_b_ = -1, fc1_w_ = -1, fc1_b_ = -1, fc2_w_ = -1, fc2_b_ = -1;
  int q_norm_w_ = -1, q_norm_b_ = -1, k_norm_w_ = -1, k_norm_b_ = -1;  // qk_layernorm
  std::unique_ptr<MoeLayer> moe_;      // in place of fc1 / fc2 in a mixture-of-experts layer
  std::unique_ptr<MlaAttention> mla_;  // in place of the QKV with multi-latent attention
  // FP8 linear layers (qkv, proj, fc1, fc2), when this layer runs in FP8; else empty.
  std::unique_ptr<Fp8LayerState> fp8_state_;
  std::vector<Fp8Linear> fp8_;
  Fp8Linear* fp8(int linear) { return fp8_.empty() ? nullptr : &fp8_[linear]; }
  // The FP8 copy of linear `linear`'s input saved in forward, or null when none was.
  static const Fp8Tensor* saved_fp8(const LayerActivations& a, int linear) {
    const Fp8Tensor& t = a.fp8_input[static_cast<std::size_t>(linear)];
    return t.codes.storage ? &t : nullptr;
  }
};

}  // namespace tandem
