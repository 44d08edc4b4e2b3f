#include "model/transformer_layer.hpp"

#include <cmath>
#include <stdexcept>

namespace tandem {

Recompute parse_recompute(const std::string& g) {
  if (g == "none" || g.empty()) return Recompute::none;
  if (g == "selective") return Recompute::selective;
  if (g == "full") return Recompute::full;
  throw std::invalid_argument("recompute_granularity must be none, selective or full, not " + g);
}

TransformerLayer::TransformerLayer(ParameterSet& params, int index, const LayerDims& dims,
                                   Recompute recompute)
    : params_(params), dims_(dims), recompute_(recompute) {
  const std::int64_t C = dims.hidden, F = dims.ffn;
  const std::string p = "layers." + std::to_string(index) + ".";
  const float std_dev = 0.02f;
  // Megatron scales the init of the layers that write into the residual stream.
  const float out_std = std_dev / std::sqrt(2.0f * static_cast<float>(dims.num_layers));
  const bool sp = dims.sequence_parallel;
  auto norm = [&](const std::string& n, float v) {
    return params.add({p + n, Shape{C}, ShardKind::replicated, 0.0f, v, false, false, sp});
  };
  ln1_w_ = norm("input_layernorm.weight", 1.0f);
  ln1_b_ = norm("input_layernorm.bias", 0.0f);
  qkv_w_ = params.add(
      {p + "attention.qkv.weight", Shape{3 * C, C}, ShardKind::qkv_rows, std_dev, 0, true, false});
  qkv_b_ =
      params.add({p + "attention.qkv.bias", Shape{3 * C}, ShardKind::qkv_rows, 0, 0, false, false});
  proj_w_ = params.add(
      {p + "attention.dense.weight", Shape{C, C}, ShardKind::columns, out_std, 0, true, false});
  proj_b_ = params.add(
      {p + "attention.dense.bias", Shape{C}, ShardKind::replicated, 0, 0, false, false, sp});
  ln2_w_ = norm("post_attention_layernorm.weight", 1.0f);
  ln2_b_ = norm("post_attention_layernorm.bias", 0.0f);
  fc1_w_ =
      params.add({p + "mlp.fc1.weight", Shape{F, C}, ShardKind::rows, std_dev, 0, true, false});
  fc1_b_ = params.add({p + "mlp.fc1.bias", Shape{F}, ShardKind::rows, 0, 0, false, false});
  fc2_w_ =
      params.add({p + "mlp.fc2.weight", Shape{C, F}, ShardKind::columns, out_std, 0, true, false});
  fc2_b_ =
      params.add({p + "mlp.fc2.bias", Shape{C}, ShardKind::replicated, 0, 0, false, false, sp});
}

Tensor TransformerLayer::forward_all(ModelEnv& env, const Tensor& x, LayerActivations& a,
                                     bool keep_probs) {
  Device& d = env.device;
  Stream& s = env.stream;
  const std::int64_t rows = x.shape[0], C = dims_.hidden;
  const std::int64_t local_heads = params_[qkv_w_].local_shape[0] / 3 / (C / dims_.heads);
  const std::int64_t hd = C / dims_.heads, T = dims_.seq, B = dims_.micro_batch;
  a.input = x;
  a.ln1_out = allocate_like(env, x.shape);
  a.ln1_mean = allocate_fp32(d, Shape{rows});
  a.ln1_rstd = allocate_fp32(d, Shape{rows});
  d.layer_norm(
      s, {x, params_[ln1_w_].compute, params_[ln1_b_].compute, a.ln1_out, a.ln1_mean, a.ln1_rstd});
  a.qkv = column_parallel_forward(env, a.ln1_out, params_[qkv_w_], &params_[qkv_b_]);
  a.attn_out = allocate_like(env, Shape{T * B, local_heads * hd});  // whole sequences
  Tensor probs = allocate_like(env, Shape{B, local_heads, T, T});
  d.attention(s, {a.qkv.view(Shape{T, B, 3, local_heads, hd}), a.attn_out, probs});
  if (keep_probs) a.probs = probs;
  probs = Tensor{};
  Tensor proj = row_parallel_forward(env, a.attn_out, params_[proj_w_], &params_[proj_b_]);
  a.residual = allocate_like(env, x.shape);
  d.add(s, x, proj, a.residual);
  proj = Tensor{};
  a.ln2_out = allocate_like(env, x.shape);
  a.ln2_mean = allocate_fp32(d, Shape{rows});
  a.ln2_rstd = allocate_fp32(d, Shape{rows});
  d.layer_norm(s, {a.residual, params_[ln2_w_].compute, params_[ln2_b_].compute, a.ln2_out,
                   a.ln2_mean, a.ln2_rstd});
  a.fc1_out = column_parallel_forward(env, a.ln2_out, params_[fc1_w_], &params_[fc1_b_]);
  a.gelu_out = allocate_like(env, a.fc1_out.shape);
  d.gelu(s, a.fc1_out, a.gelu_out);
  Tensor fc2 = row_parallel_forward(env, a.gelu_out, params_[fc2_w_], &params_[fc2_b_]);
  Tensor out = allocate_like(env, x.shape);
  d.add(s, a.residual, fc2, out);
  return out;
}

Tensor TransformerLayer::forward(ModelEnv& env, const Tensor& x, LayerActivations& saved) {
  Tensor out = forward_all(env, x, saved, recompute_ == Recompute::none);
  if (recompute_ == Recompute::full) saved = LayerActivations{.input = x};
  return out;
}

Tensor TransformerLayer::backward(ModelEnv& env, const Tensor& grad_out, LayerActivations& a) {
  Device& d = env.device;
  Stream& s = env.stream;
  if (recompute_ == Recompute::full) forward_all(env, a.input, a, true);
  const std::int64_t C = dims_.hidden, hd = C / dims_.heads, T = dims_.seq, B = dims_.micro_batch;
  const std::int64_t local_heads = params_[qkv_w_].local_shape[0] / 3 / hd;
  if (a.probs.shape.dims().empty()) {  // selective: recompute the attention core
    a.probs = allocate_like(env, Shape{B, local_heads, T, T});
    Tensor scratch = allocate_like(env, a.attn_out.shape);
    d.attention(s, {a.qkv.view(Shape{T, B, 3, local_heads, hd}), scratch, a.probs});
  }
  // MLP half: out = residual + fc2(gelu(fc1(ln2(residual)))).
  Tensor d_gelu =
      row_parallel_backward(env, a.gelu_out, grad_out, params_[fc2_w_], &params_[fc2_b_]);
  a.gelu_out = Tensor{};
  Tensor d_fc1 = allocate_like(env, a.fc1_out.shape);
  d.gelu_backward(s, d_gelu, a.fc1_out, d_fc1);
  d_gelu = Tensor{};
  a.fc1_out = Tensor{};
  Tensor d_ln2 = column_parallel_backward(env, a.ln2_out, d_fc1, params_[fc1_w_], &params_[fc1_b_]);
  d_fc1 = Tensor{};
  Tensor d_residual = allocate_like(env, grad_out.shape);
  d.layer_norm_backward(s, {d_ln2, a.residual, params_[ln2_w_].compute, a.ln2_mean, a.ln2_rstd,
                            d_residual, params_[ln2_w_].grad, params_[ln2_b_].grad});
  d.add(s, d_residual, grad_out, d_residual);
  d_ln2 = Tensor{};
  a.ln2_out = a.ln2_mean = a.ln2_rstd = a.residual = Tensor{};
  // Attention half: residual = x + proj(attention(qkv(ln1(x)))).
  Tensor d_attn =
      row_parallel_backward(env, a.attn_out, d_residual, params_[proj_w_], &params_[proj_b_]);
  a.attn_out = Tensor{};
  Tensor d_qkv = allocate_like(env, a.qkv.shape);
  d.attention_backward(s, {d_attn, a.qkv.view(Shape{T, B, 3, local_heads, hd}), a.probs, d_qkv});
  d_attn = Tensor{};
  a.probs = a.attn_out = Tensor{};
  Tensor d_ln1 = column_parallel_backward(env, a.ln1_out, d_qkv, params_[qkv_w_], &params_[qkv_b_]);
  d_qkv = Tensor{};
  a.qkv = a.ln1_out = Tensor{};
  Tensor dx = allocate_like(env, grad_out.shape);
  d.layer_norm_backward(s, {d_ln1, a.input, params_[ln1_w_].compute, a.ln1_mean, a.ln1_rstd, dx,
                            params_[ln1_w_].grad, params_[ln1_b_].grad});
  d.add(s, dx, d_residual, dx);
  a = LayerActivations{};
  return dx;
}

}  // namespace tandem
