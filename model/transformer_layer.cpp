#include "model/transformer_layer.hpp"

#include <cmath>
#include <optional>
#include <stdexcept>

#include "model/context_parallel_attention.hpp"
#include "model/library_call.hpp"

namespace tandem {

Recompute parse_recompute(const std::string& g) {
  if (g == "none" || g.empty()) return Recompute::none;
  if (g == "selective") return Recompute::selective;
  if (g == "full") return Recompute::full;
  throw std::invalid_argument("recompute_granularity must be none, selective or full, not " + g);
}

Normalization parse_normalization(const std::string& name) {
  if (name == "LayerNorm" || name.empty()) return Normalization::layer_norm;
  if (name == "RMSNorm") return Normalization::rms_norm;
  throw std::invalid_argument("normalization must be LayerNorm or RMSNorm, not " + name);
}

namespace {

struct Heads {
  std::int64_t groups;     // query groups (= key/value heads) of the whole layer
  std::int64_t per_group;  // query heads per group
};

Heads heads_of(const LayerDims& d) {
  const int groups = d.options.num_query_groups > 0 ? d.options.num_query_groups : d.heads;
  if (d.heads % groups != 0)
    throw std::invalid_argument("num_attention_heads " + std::to_string(d.heads) +
                                " is not a multiple of num_query_groups " + std::to_string(groups));
  if (groups != d.heads && !d.options.flash_attn)
    throw std::invalid_argument("grouped-query attention (num_query_groups " +
                                std::to_string(groups) + " < heads " + std::to_string(d.heads) +
                                ") runs on the fused attention op: set use_flash_attn");
  return {groups, d.heads / groups};
}

}  // namespace

std::int64_t head_dim_of(const LayerDims& d) {
  return d.options.kv_channels > 0 ? d.options.kv_channels : d.hidden / d.heads;
}

TransformerLayer::TransformerLayer(ParameterSet& params, int index, const LayerDims& dims,
                                   Recompute recompute, const std::string& prefix)
    : params_(params), index_(index), dims_(dims), recompute_(recompute) {
  const LayerOptions& o = dims.options;
  const std::int64_t C = dims.hidden, F = dims.ffn;
  const std::string p = prefix.empty() ? "layers." + std::to_string(index) + "." : prefix;
  const float std_dev = 0.02f;
  // Megatron scales the init of the layers that write into the residual stream.
  const float out_std = std_dev / std::sqrt(2.0f * static_cast<float>(dims.num_layers));
  const bool sp = dims.sequence_parallel;
  const bool rms = o.normalization == Normalization::rms_norm;
  const bool bias = o.add_bias_linear;
  auto norm = [&](const std::string& n, float v) {
    return params.add({p + n, Shape{C}, ShardKind::replicated, 0.0f, v, false, false, sp});
  };
  auto linear = [&](const std::string& n, Shape shape, ShardKind kind, float init) {
    return params.add({p + n, std::move(shape), kind, init, 0, true, false});
  };
  // The weights of the FP8 linear layers, held in FP8 with --fp8-param-gather.
  const bool in_fp8 = o.fp8.layer_in_fp8(index, dims.num_layers);
  auto fp8_linear = [&](const std::string& n, Shape shape, ShardKind kind, float init) {
    ParameterSpec spec{p + n, std::move(shape), kind, init, 0, true, false};
    spec.fp8 = in_fp8 && o.fp8.param_gather;
    return params.add(std::move(spec));
  };
  auto linear_bias = [&](const std::string& n, std::int64_t size, ShardKind kind) {
    // Row-parallel biases are added after the reduction: replicated, sequence-parallel.
    const bool replicated = kind == ShardKind::replicated;
    return params.add({p + n, Shape{size}, kind, 0, 0, false, false, replicated && sp});
  };
  if (o.mla.enabled) {
    // The input norm, the latent projections and the output projection from heads·v_head_dim.
    if (!o.flash_attn)
      throw std::invalid_argument(
          "multi-latent attention runs on the fused attention op: set use_flash_attn");
    if (o.fp8.enabled())
      throw std::invalid_argument("multi-latent attention's projections are not built in FP8");
    ln1_w_ = norm("input_layernorm.weight", 1.0f);
    if (!rms) ln1_b_ = norm("input_layernorm.bias", 0.0f);
    mla_ = std::make_unique<MlaAttention>(
        params, p + "attention.", o.mla,
        MlaNorm{.rms = rms, .epsilon = o.norm_epsilon, .qk_layernorm = o.qk_layernorm}, dims.hidden,
        dims.heads, dims.seq, dims.micro_batch, sp, o.rotary_base);
    proj_w_ =
        linear("attention.dense.weight", Shape{C, std::int64_t{dims.heads} * o.mla.v_head_dim},
               ShardKind::columns, out_std);
    if (bias) proj_b_ = linear_bias("attention.dense.bias", C, ShardKind::replicated);
  } else {
    const Heads h = heads_of(dims);
    const std::int64_t hd = head_dim_of(dims), q_width = dims.heads * hd;  // query columns
    if (o.flash_attn && h.groups % params.tp_size() != 0)
      throw std::invalid_argument("num_query_groups " + std::to_string(h.groups) +
                                  " is not divisible by tensor_model_parallel_size " +
                                  std::to_string(params.tp_size()));
    ln1_w_ = norm("input_layernorm.weight", 1.0f);
    if (!rms) ln1_b_ = norm("input_layernorm.bias", 0.0f);
    // Fused attention reads Megatron's grouped QKV: a tp rank's rows are whole query groups.
    const std::int64_t qkv_rows = o.flash_attn ? h.groups * (h.per_group + 2) * hd : 3 * q_width;
    const ShardKind qkv_kind = o.flash_attn ? ShardKind::rows : ShardKind::qkv_rows;
    qkv_w_ = fp8_linear("attention.qkv.weight", Shape{qkv_rows, C}, qkv_kind, std_dev);
    if (bias) qkv_b_ = linear_bias("attention.qkv.bias", qkv_rows, qkv_kind);
    proj_w_ = fp8_linear("attention.dense.weight", Shape{C, q_width}, ShardKind::columns, out_std);
    if (bias) proj_b_ = linear_bias("attention.dense.bias", C, ShardKind::replicated);
    if (o.qk_layernorm) {
      // One weight over a head's channels, shared by the heads of every tp rank: each rank's
      // gradient holds its heads' share, summed over tp (heads_partial_grad).
      auto head_norm = [&](const std::string& n, float v) {
        ParameterSpec spec{p + n, Shape{hd}, ShardKind::replicated, 0.0f, v, false, false, false};
        spec.heads_partial_grad = true;
        return params.add(std::move(spec));
      };
      q_norm_w_ = head_norm("attention.q_layernorm.weight", 1.0f);
      if (!rms) q_norm_b_ = head_norm("attention.q_layernorm.bias", 0.0f);
      k_norm_w_ = head_norm("attention.k_layernorm.weight", 1.0f);
      if (!rms) k_norm_b_ = head_norm("attention.k_layernorm.bias", 0.0f);
    }
  }
  ln2_w_ = norm("post_attention_layernorm.weight", 1.0f);
  if (!rms) ln2_b_ = norm("post_attention_layernorm.bias", 0.0f);
  if (dims.moe.num_experts > 0) {
    if (bias)
      throw std::invalid_argument(
          "num_experts: the experts have no biases (Megatron's grouped experts have none): set "
          "disable_bias_linear");
    moe_ = std::make_unique<MoeLayer>(params, p + "mlp.", dims.hidden, dims.moe, o.swiglu, sp,
                                      dims.ep_size, dims.ep_rank, std_dev, out_std);
    return;
  }
  // SwiGLU: one column-parallel GEMM for gate and up; each rank holds its rows of both.
  const std::int64_t fc1_rows = o.swiglu ? 2 * F : F;
  const ShardKind fc1_kind = o.swiglu ? ShardKind::glu_rows : ShardKind::rows;
  fc1_w_ = fp8_linear("mlp.fc1.weight", Shape{fc1_rows, C}, fc1_kind, std_dev);
  if (bias) fc1_b_ = linear_bias("mlp.fc1.bias", fc1_rows, fc1_kind);
  fc2_w_ = fp8_linear("mlp.fc2.weight", Shape{C, F}, ShardKind::columns, out_std);
  if (bias) fc2_b_ = linear_bias("mlp.fc2.bias", C, ShardKind::replicated);
  // Megatron-Core's get_fp8_context by the global layer number (first / last in bf16).
  if (in_fp8) {
    fp8_state_ = std::make_unique<Fp8LayerState>(o.fp8);
    for (int l = 0; l < Fp8LayerState::kLinears; ++l) fp8_.emplace_back(*fp8_state_, l);
  }
}

std::vector<Fp8Weight> TransformerLayer::fp8_weights() {
  std::vector<Fp8Weight> out;
  const int linears[] = {qkv_w_, proj_w_, fc1_w_, fc2_w_};
  for (int l = 0; l < Fp8LayerState::kLinears; ++l)
    if (linears[l] >= 0 && params_[linears[l]].spec.fp8)
      out.push_back({.param = linears[l], .state = fp8_state_.get(), .linear = l});
  return out;
}

std::vector<int> TransformerLayer::parameter_indices() const {
  std::vector<int> out;
  for (int i : {ln1_w_, ln1_b_, qkv_w_, qkv_b_, q_norm_w_, q_norm_b_, k_norm_w_, k_norm_b_, proj_w_,
                proj_b_, ln2_w_, ln2_b_, fc1_w_, fc1_b_, fc2_w_, fc2_b_})
    if (i >= 0) out.push_back(i);
  if (mla_)
    for (int i : mla_->parameter_indices()) out.push_back(i);
  if (moe_)
    for (int i : moe_->parameter_indices()) out.push_back(i);
  return out;
}

Shape TransformerLayer::grouped_shape() const {
  const Heads h = heads_of(dims_);
  const std::int64_t hd = head_dim();
  const std::int64_t local_groups = params_[qkv_w_].local_shape[0] / ((h.per_group + 2) * hd);
  return Shape{dims_.seq, dims_.micro_batch, local_groups, h.per_group + 2, hd};
}

void TransformerLayer::norm_forward(ModelEnv& env, const Tensor& x, int w, int b, Tensor& out,
                                    Tensor& mean, Tensor& rstd) {
  Device& d = env.device;
  const std::int64_t rows = x.shape[0];
  const float eps = dims_.options.norm_epsilon;
  if (dims_.options.normalization == Normalization::rms_norm) {
    rstd = allocate_fp32(d, Shape{rows});
    d.rms_norm(env.stream, {x, params_[w].compute, out, rstd, eps});
    return;
  }
  mean = allocate_fp32(d, Shape{rows});
  rstd = allocate_fp32(d, Shape{rows});
  d.layer_norm(env.stream, {x, params_[w].compute, params_[b].compute, out, mean, rstd, eps});
}

void TransformerLayer::norm_backward(ModelEnv& env, const Tensor& dy, const Tensor& x, int w, int b,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx) {
  if (dims_.options.normalization == Normalization::rms_norm) {
    env.device.rms_norm_backward(env.stream,
                                 {dy, x, params_[w].compute, rstd, dx, params_[w].grad});
    return;
  }
  env.device.layer_norm_backward(
      env.stream, {dy, x, params_[w].compute, mean, rstd, dx, params_[w].grad, params_[b].grad});
}

namespace {

// RoPE on the queries and keys of a QKV activation, viewed as (T, B, groups, per_group, hd)
// with the first `rotated` heads of each group rotated.
void apply_rope(ModelEnv& env, const LayerDims& dims, Tensor x, std::int64_t rotated, bool inverse,
                std::int64_t position_offset = 0) {
  const std::int64_t hd = head_dim_of(dims);
  const auto rotary_dim =
      static_cast<std::int64_t>(static_cast<float>(hd) * dims.options.rotary_percent) / 2 * 2;
  env.device.rope(env.stream, {.x = x,
                               .rotate_per_group = rotated,
                               .rotary_dim = rotary_dim,
                               .base = dims.options.rotary_base,
                               .position_offset = position_offset,
                               .inverse = inverse});
}

// Where the query and key heads lie in a rank's QKV activation, seen as (rows, width):
// fused attention's grouped layout has a row per (t, b, query group), its queries in the
// first per_group·head_dim columns and its key in the next head_dim; the unfused
// [q | k | v] layout a row per (t, b), its queries in the first heads·head_dim columns and
// its keys in the next heads·head_dim. Either way the keys start at column q_width.
struct QkColumns {
  std::int64_t rows = 0, width = 0;
  std::int64_t q_width = 0, k_width = 0;
};

QkColumns qk_columns(const LayerDims& dims, std::int64_t local_qkv_rows) {
  const std::int64_t hd = head_dim_of(dims), tokens = std::int64_t{dims.seq} * dims.micro_batch;
  if (dims.options.flash_attn) {
    const Heads h = heads_of(dims);
    const std::int64_t group = (h.per_group + 2) * hd;
    return {tokens * (local_qkv_rows / group), group, h.per_group * hd, hd};
  }
  const std::int64_t q = local_qkv_rows / 3;
  return {tokens, local_qkv_rows, q, q};
}

}  // namespace

// Megatron-Core's q_layernorm and k_layernorm (SelfAttention.get_query_key_value_tensors):
// the query heads and the key heads copied out of the QKV into blocks of their own, one row
// per head, normalized over head_dim and copied back, before RoPE.
void TransformerLayer::qk_norm_forward(ModelEnv& env, LayerActivations& a) {
  Device& d = env.device;
  Stream& s = env.stream;
  const QkColumns c = qk_columns(dims_, params_[qkv_w_].local_shape[0]);
  const std::int64_t hd = head_dim();
  Tensor wide = a.qkv.view(Shape{c.rows, c.width});
  auto normalize = [&](std::int64_t column, std::int64_t width, int w, int b, Tensor& in,
                       Tensor& mean, Tensor& rstd) {
    in = allocate_like(env, Shape{c.rows, width});
    d.copy_columns(s, {.from = wide, .to = in, .from_column = column, .width = width});
    const Shape heads{c.rows * width / hd, hd};
    Tensor out = allocate_like(env, heads);
    norm_forward(env, in.view(heads), w, b, out, mean, rstd);
    d.copy_columns(
        s,
        {.from = out.view(Shape{c.rows, width}), .to = wide, .to_column = column, .width = width});
  };
  normalize(0, c.q_width, q_norm_w_, q_norm_b_, a.q_in, a.q_mean, a.q_rstd);
  normalize(c.q_width, c.k_width, k_norm_w_, k_norm_b_, a.k_in, a.k_mean, a.k_rstd);
}

// The norms' backward on the query and key columns of d_qkv, in place; the value columns
// pass.
void TransformerLayer::qk_norm_backward(ModelEnv& env, Tensor& d_qkv, LayerActivations& a) {
  Device& d = env.device;
  Stream& s = env.stream;
  const QkColumns c = qk_columns(dims_, params_[qkv_w_].local_shape[0]);
  const std::int64_t hd = head_dim();
  Tensor wide = d_qkv.view(Shape{c.rows, c.width});
  auto backward = [&](std::int64_t column, std::int64_t width, int w, int b, const Tensor& in,
                      const Tensor& mean, const Tensor& rstd) {
    const Shape heads{c.rows * width / hd, hd};
    Tensor dy = allocate_like(env, Shape{c.rows, width});
    d.copy_columns(s, {.from = wide, .to = dy, .from_column = column, .width = width});
    Tensor dx = allocate_like(env, heads);
    norm_backward(env, dy.view(heads), in.view(heads), w, b, mean, rstd, dx);
    d.copy_columns(
        s,
        {.from = dx.view(Shape{c.rows, width}), .to = wide, .to_column = column, .width = width});
  };
  backward(c.q_width, c.k_width, k_norm_w_, k_norm_b_, a.k_in, a.k_mean, a.k_rstd);
  backward(0, c.q_width, q_norm_w_, q_norm_b_, a.q_in, a.q_mean, a.q_rstd);
  a.q_in = a.q_mean = a.q_rstd = a.k_in = a.k_mean = a.k_rstd = Tensor{};
}

AttentionDropout TransformerLayer::attention_dropout(const ModelEnv& env,
                                                     std::int64_t local_heads) const {
  if (env.attention_dropout <= 0) return {};
  return {.p = env.attention_dropout,
          .seed = env.dropout_seed,
          .microbatch = env.dropout_microbatch,
          .layer = static_cast<std::uint64_t>(index_),
          .head_offset = local_heads * env.tp.rank(),
          .heads_total = local_heads * env.tp.size()};
}

void TransformerLayer::attention_forward(ModelEnv& env, LayerActivations& a, bool keep_probs) {
  Device& d = env.device;
  Stream& s = env.stream;
  const std::int64_t hd = head_dim(), T = dims_.seq, B = dims_.micro_batch;
  if (env.cp != nullptr) return cp_attention_forward(env, a, keep_probs);
  if (dims_.options.flash_attn) {
    const Shape g = grouped_shape();
    const std::int64_t local_heads = g[2] * (g[3] - 2);
    Tensor qkv = a.qkv.view(g);
    if (dims_.options.rope) apply_rope(env, dims_, qkv, g[3] - 1, false);
    a.attn_out = allocate_like(env, Shape{T * B, local_heads * hd});  // whole sequences
    Tensor lse = allocate_fp32(d, Shape{B, local_heads, T});
    d.flash_attention(s, {qkv, qkv, a.attn_out, lse});
    // Selective recomputation drops what Megatron's checkpointed core attention drops.
    if (keep_probs) a.lse = lse;
    return;
  }
  const std::int64_t local_heads = params_[qkv_w_].local_shape[0] / 3 / hd;
  if (dims_.options.rope)
    apply_rope(env, dims_, a.qkv.view(Shape{T, B, 1, 3 * local_heads, hd}), 2 * local_heads, false);
  a.attn_out = allocate_like(env, Shape{T * B, local_heads * hd});  // whole sequences
  Tensor probs = allocate_like(env, Shape{B, local_heads, T, T});
  d.attention(s, {a.qkv.view(Shape{T, B, 3, local_heads, hd}), a.attn_out, probs,
                  attention_dropout(env, local_heads)});
  if (keep_probs) a.probs = probs;
}

Tensor TransformerLayer::attention_backward(ModelEnv& env, const Tensor& d_attn,
                                            LayerActivations& a) {
  Device& d = env.device;
  Stream& s = env.stream;
  const std::int64_t hd = head_dim(), T = dims_.seq, B = dims_.micro_batch;
  if (env.cp != nullptr) return cp_attention_backward(env, d_attn, a);
  if (dims_.options.flash_attn) {
    const Shape g = grouped_shape();
    Tensor qkv = a.qkv.view(g);
    if (a.lse.shape.dims().empty()) {  // selective: recompute the fused forward for its lse
      a.lse = allocate_fp32(d, Shape{B, g[2] * (g[3] - 2), T});
      Tensor scratch = allocate_like(env, a.attn_out.shape);
      d.flash_attention(s, {qkv, qkv, scratch, a.lse});
    }
    Tensor d_qkv = allocate_like(env, a.qkv.shape);
    Tensor dg = d_qkv.view(g);
    d.flash_attention_backward(s, {d_attn, qkv, qkv, a.attn_out, a.lse, dg, dg});
    a.attn_out = a.lse = Tensor{};
    if (dims_.options.rope) apply_rope(env, dims_, dg, g[3] - 1, true);
    return d_qkv;
  }
  const std::int64_t local_heads = params_[qkv_w_].local_shape[0] / 3 / hd;
  a.attn_out = Tensor{};
  Tensor d_qkv = allocate_like(env, a.qkv.shape);
  d.attention_backward(s, {d_attn, a.qkv.view(Shape{T, B, 3, local_heads, hd}), a.probs, d_qkv,
                           attention_dropout(env, local_heads)});
  a.probs = Tensor{};
  if (dims_.options.rope)
    apply_rope(env, dims_, d_qkv.view(Shape{T, B, 1, 3 * local_heads, hd}), 2 * local_heads, true);
  return d_qkv;
}

void TransformerLayer::cp_attention_forward(ModelEnv& env, LayerActivations& a, bool keep_lse) {
  const Shape g = grouped_shape();
  Tensor qkv = a.qkv.view(g);
  rotate_chunks(env, qkv, false);
  ContextAttentionSaved saved = tandem::context_parallel_attention_forward(env, env.cp_comm, qkv);
  a.attn_out = saved.output;
  a.context_kv = saved.kv;
  // Selective recomputation drops what Megatron's checkpointed core attention drops.
  if (keep_lse) a.lse = saved.lse;
}

Tensor TransformerLayer::cp_attention_backward(ModelEnv& env, const Tensor& d_attn,
                                               LayerActivations& a) {
  const Shape g = grouped_shape();
  const Tensor qkv = a.qkv.view(g);
  ContextAttentionSaved saved{a.attn_out, a.lse, a.context_kv};
  if (a.lse.shape.dims().empty())  // selective: the core attention again, its ring included
    saved = tandem::context_parallel_attention_forward(env, env.cp_comm, qkv);
  Tensor d_qkv = tandem::context_parallel_attention_backward(env, env.cp_comm, d_attn, qkv, saved);
  a.attn_out = a.lse = a.context_kv = Tensor{};
  rotate_chunks(env, d_qkv, true);
  return d_qkv.view(a.qkv.shape);
}

// RoPE on this rank's two context-parallel chunks, each at its place in the sequence.
void TransformerLayer::rotate_chunks(ModelEnv& env, const Tensor& grouped, bool inverse) {
  if (!dims_.options.rope) return;
  const Shape& g = grouped.shape;
  const std::int64_t chunk = g[0] / 2, row = g.numel() / g[0];
  for (int j = 0; j < 2; ++j)
    apply_rope(env, dims_, grouped.view(Shape{chunk, g[1], g[2], g[3], g[4]}, j * chunk * row),
               g[3] - 1, inverse, sequence_position(env, j * chunk, g[0]));
}

bool TransformerLayer::fused_bias_gelu(const ModelEnv& env) const {
  return env.bias_gelu_fusion && fc1_b_ >= 0 && !dims_.options.swiglu;
}

// The bias row_parallel_forward adds: none when residual_add fuses it.
const Parameter* TransformerLayer::unfused_bias(const ModelEnv& env, int index) {
  return env.bias_dropout_fusion ? nullptr : bias(index);
}

// out = residual + dropout(y + bias), Megatron's bias-dropout-add at `site`: one fused
// kernel, or (no fusion: the bias is in y already) a dropout and an add; without bias and
// dropout, the add alone.
void TransformerLayer::residual_add(ModelEnv& env, const Tensor& y, int bias_index,
                                    const Tensor& residual, Tensor& out, std::uint64_t site) {
  const HiddenDropout drop = hidden_dropout_at(env, site, y);
  if (env.bias_dropout_fusion && (bias_index >= 0 || drop.p > 0)) {
    const Tensor* b = bias_index >= 0 ? &params_[bias_index].compute : nullptr;
    env.device.bias_dropout_add(env.stream, {y, b, residual, out, drop});
    return;
  }
  if (drop.p <= 0) {
    env.device.add(env.stream, residual, y, out);
    return;
  }
  Tensor dropped = allocate_like(env, y.shape);
  env.device.dropout(env.stream, y, dropped, drop);
  env.device.add(env.stream, residual, dropped, out);
}

// The gradient of residual_add's y: grad_out through the site's dropout mask.
Tensor TransformerLayer::dropout_grad(ModelEnv& env, const Tensor& grad_out, std::uint64_t site) {
  const HiddenDropout drop = hidden_dropout_at(env, site, grad_out);
  if (drop.p <= 0) return grad_out;
  Tensor g = allocate_like(env, grad_out.shape);
  env.device.dropout_backward(env.stream, grad_out, g, drop);
  return g;
}

Tensor TransformerLayer::forward_all(ModelEnv& env, const Tensor& x, LayerActivations& a,
                                     bool keep_probs) {
  Device& d = env.device;
  Stream& s = env.stream;
  if (env.observer) env.observer->layer_pass(s);
  a.input = x;
  // Transformer Engine's modules are one library call each (env.transformer_engine); the
  // residual adds, the activation and the QK norms stay framework ops, as in Megatron-Core.
  const bool te = env.transformer_engine;
  if (mla_) {
    {
      const LibraryCall input_norm(env, te);  // TENorm: MLA's projections take its output
      a.ln1_out = allocate_like(env, x.shape);
      norm_forward(env, x, ln1_w_, ln1_b_, a.ln1_out, a.ln1_mean, a.ln1_rstd);
    }
    a.attn_out = mla_->forward(env, a.ln1_out, a.mla, keep_probs);
  } else {
    {
      const LibraryCall layer_norm_linear(env, te);
      a.ln1_out = allocate_like(env, x.shape);
      norm_forward(env, x, ln1_w_, ln1_b_, a.ln1_out, a.ln1_mean, a.ln1_rstd);
      // Megatron-Core's QKV keeps its bias add (skip_bias_add off): under Transformer
      // Engine the bias is the GEMM's epilogue.
      a.qkv = column_parallel_forward(env, a.ln1_out, params_[qkv_w_], bias(qkv_b_), fp8(0),
                                      &a.fp8_input[0], te);
    }
    if (saved_fp8(a, 0)) a.ln1_out = Tensor{};
    if (dims_.options.qk_layernorm) qk_norm_forward(env, a);
    {
      const LibraryCall dot_product_attention(env, te);
      attention_forward(env, a, keep_probs);
    }
  }
  a.residual = allocate_like(env, x.shape);
  Tensor proj;
  {
    const LibraryCall linear(env, te);
    proj = row_parallel_forward(env, a.attn_out, params_[proj_w_], unfused_bias(env, proj_b_),
                                fp8(1), &a.fp8_input[1]);
  }
  residual_add(env, proj, proj_b_, x, a.residual, hidden_dropout_site(index_, false));
  proj = Tensor{};
  // Fused attention's backward reads its output; the unfused one does not.
  if (saved_fp8(a, 1) && !dims_.options.flash_attn && env.cp == nullptr) a.attn_out = Tensor{};
  std::optional<LibraryCall> pre_mlp(std::in_place, env, te);  // closed after fc1
  a.ln2_out = allocate_like(env, x.shape);
  norm_forward(env, a.residual, ln2_w_, ln2_b_, a.ln2_out, a.ln2_mean, a.ln2_rstd);
  if (moe_) {
    pre_mlp.reset();  // the experts' layer norm is a module of its own (TENorm)
    Tensor out = allocate_like(env, x.shape);
    residual_add(env, moe_->forward(env, a.ln2_out, a.moe), -1, a.residual, out,
                 hidden_dropout_site(index_, true));
    return out;
  }
  // With the fusion fc1_out is kept without its bias, as Megatron's bias_gelu keeps it.
  const bool fuse_gelu = fused_bias_gelu(env);
  a.fc1_out = column_parallel_forward(env, a.ln2_out, params_[fc1_w_],
                                      fuse_gelu ? nullptr : bias(fc1_b_), fp8(2), &a.fp8_input[2]);
  pre_mlp.reset();
  if (saved_fp8(a, 2)) a.ln2_out = Tensor{};
  if (dims_.options.swiglu) {
    a.gelu_out = allocate_like(env, Shape{a.fc1_out.shape[0], a.fc1_out.shape[1] / 2});
    d.swiglu(s, a.fc1_out, a.gelu_out);
  } else if (fuse_gelu) {
    a.gelu_out = allocate_like(env, a.fc1_out.shape);
    d.bias_gelu(s, a.fc1_out, params_[fc1_b_].compute, a.gelu_out);
  } else {
    a.gelu_out = allocate_like(env, a.fc1_out.shape);
    d.gelu(s, a.fc1_out, a.gelu_out);
  }
  Tensor fc2;
  {
    const LibraryCall linear(env, te);
    fc2 = row_parallel_forward(env, a.gelu_out, params_[fc2_w_], unfused_bias(env, fc2_b_), fp8(3),
                               &a.fp8_input[3]);
  }
  Tensor out = allocate_like(env, x.shape);
  residual_add(env, fc2, fc2_b_, a.residual, out, hidden_dropout_site(index_, true));
  fc2 = Tensor{};
  if (saved_fp8(a, 3)) a.gelu_out = Tensor{};
  return out;
}

Tensor TransformerLayer::forward(ModelEnv& env, const Tensor& x, LayerActivations& saved) {
  if (fp8_state_) fp8_state_->begin_step(env);
  Tensor out = forward_all(env, x, saved, recompute_ == Recompute::none);
  if (recompute_ == Recompute::full) saved = LayerActivations{.input = x};
  return out;
}

Tensor TransformerLayer::backward(ModelEnv& env, const Tensor& grad_out, LayerActivations& a,
                                  float loss_scale) {
  Device& d = env.device;
  Stream& s = env.stream;
  if (recompute_ == Recompute::full) forward_all(env, a.input, a, true);
  if (env.observer) env.observer->layer_pass(s);
  const std::int64_t hd = head_dim(), T = dims_.seq, B = dims_.micro_batch;
  if (!dims_.options.flash_attn && a.probs.shape.dims().empty()) {
    // selective: recompute the attention core. Megatron's checkpointed core attention runs
    // again whole, its dropout included (the mask regenerated from the RNG state): the
    // saved probabilities are those before dropout either way, and the cost is that of the
    // forward's op.
    const std::int64_t local_heads = params_[qkv_w_].local_shape[0] / 3 / hd;
    a.probs = allocate_like(env, Shape{B, local_heads, T, T});
    Tensor scratch = allocate_like(env, Shape{T * B, local_heads * hd});
    d.attention(s, {a.qkv.view(Shape{T, B, 3, local_heads, hd}), scratch, a.probs,
                    attention_dropout(env, local_heads)});
  }
  // MLP half: out = residual + fc2(act(fc1(norm2(residual)))), or the experts'. Transformer
  // Engine's modules are one library call each backward too (their autograd functions).
  const bool te = env.transformer_engine;
  Tensor d_ln2;
  std::optional<LibraryCall> pre_mlp;  // fc1's backward and the norm's (LayerNormLinear)
  if (moe_) {
    d_ln2 = moe_->backward(env, dropout_grad(env, grad_out, hidden_dropout_site(index_, true)),
                           a.moe, loss_scale);
    pre_mlp.emplace(env, te);  // the experts' TENorm
  } else {
    Tensor d_out = dropout_grad(env, grad_out, hidden_dropout_site(index_, true));
    Tensor d_gelu;
    {
      const LibraryCall linear(env, te);
      d_gelu = row_parallel_backward(env, a.gelu_out, d_out, params_[fc2_w_], bias(fc2_b_), fp8(3),
                                     saved_fp8(a, 3));
    }
    d_out = Tensor{};
    a.gelu_out = Tensor{};
    a.fp8_input[3] = Fp8Tensor{};
    Tensor d_fc1 = allocate_like(env, a.fc1_out.shape);
    if (dims_.options.swiglu)
      d.swiglu_backward(s, d_gelu, a.fc1_out, d_fc1);
    else if (fused_bias_gelu(env))
      d.bias_gelu_backward(s, d_gelu, a.fc1_out, params_[fc1_b_].compute, d_fc1);
    else
      d.gelu_backward(s, d_gelu, a.fc1_out, d_fc1);
    d_gelu = Tensor{};
    a.fc1_out = Tensor{};
    pre_mlp.emplace(env, te);
    d_ln2 = column_parallel_backward(env, a.ln2_out, d_fc1, params_[fc1_w_], bias(fc1_b_), fp8(2),
                                     saved_fp8(a, 2));
    a.fp8_input[2] = Fp8Tensor{};
  }
  Tensor d_residual = allocate_like(env, grad_out.shape);
  norm_backward(env, d_ln2, a.residual, ln2_w_, ln2_b_, a.ln2_mean, a.ln2_rstd, d_residual);
  pre_mlp.reset();
  d.add(s, d_residual, grad_out, d_residual);
  d_ln2 = Tensor{};
  a.ln2_out = a.ln2_mean = a.ln2_rstd = a.residual = Tensor{};
  // Attention half: residual = x + proj(attention(qkv(norm1(x)))).
  Tensor d_proj = dropout_grad(env, d_residual, hidden_dropout_site(index_, false));
  Tensor d_attn;
  {
    const LibraryCall linear(env, te);
    d_attn = row_parallel_backward(env, a.attn_out, d_proj, params_[proj_w_], bias(proj_b_), fp8(1),
                                   saved_fp8(a, 1));
  }
  a.fp8_input[1] = Fp8Tensor{};
  d_proj = Tensor{};
  Tensor dx;
  if (mla_) {
    a.attn_out = Tensor{};  // MLA's own output (a.mla) is what its core's backward reads
    Tensor d_ln1 = mla_->backward(env, d_attn, a.ln1_out, a.mla);
    d_attn = Tensor{};
    a.ln1_out = Tensor{};
    const LibraryCall input_norm(env, te);
    dx = allocate_like(env, grad_out.shape);
    norm_backward(env, d_ln1, a.input, ln1_w_, ln1_b_, a.ln1_mean, a.ln1_rstd, dx);
  } else {
    Tensor d_qkv;
    {
      const LibraryCall dot_product_attention(env, te);
      d_qkv = attention_backward(env, d_attn, a);
    }
    d_attn = Tensor{};
    if (dims_.options.qk_layernorm) qk_norm_backward(env, d_qkv, a);
    const LibraryCall layer_norm_linear(env, te);
    Tensor d_ln1 = column_parallel_backward(env, a.ln1_out, d_qkv, params_[qkv_w_], bias(qkv_b_),
                                            fp8(0), saved_fp8(a, 0), te);
    a.fp8_input[0] = Fp8Tensor{};
    d_qkv = Tensor{};
    a.qkv = a.ln1_out = Tensor{};
    dx = allocate_like(env, grad_out.shape);
    norm_backward(env, d_ln1, a.input, ln1_w_, ln1_b_, a.ln1_mean, a.ln1_rstd, dx);
  }
  d.add(s, dx, d_residual, dx);
  a = LayerActivations{};
  return dx;
}

}  // namespace tandem
