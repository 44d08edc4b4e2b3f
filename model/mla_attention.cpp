// Multi-latent attention; see mla_attention.hpp.
#include "model/mla_attention.hpp"

#include <stdexcept>
#include <string>

#include "model/library_call.hpp"

namespace tandem {
namespace {

// Columns of every row of `from` into `to`: `count` blocks of `width`, block k at
// from_column + k·from_stride and to_column + k·to_stride (ColumnCopyArgs).
struct Blocks {
  std::int64_t from_column = 0, to_column = 0, width = 0;
  std::int64_t count = 1, from_stride = 0, to_stride = 0;
};

void copy_blocks(ModelEnv& env, const Tensor& from, Tensor& to, const Blocks& b) {
  env.device.copy_columns(env.stream, {.from = from,
                                       .to = to,
                                       .from_column = b.from_column,
                                       .to_column = b.to_column,
                                       .width = b.width,
                                       .count = b.count,
                                       .from_stride = b.from_stride,
                                       .to_stride = b.to_stride});
}

}  // namespace

MlaAttention::MlaAttention(ParameterSet& params, const std::string& prefix,
                           const MlaOptions& options, const MlaNorm& norm, int hidden, int heads,
                           int seq, int micro_batch, bool sequence_parallel, float rotary_base)
    : params_(params),
      o_(options),
      norm_(norm),
      seq_(seq),
      micro_batch_(micro_batch),
      local_heads_(heads / params.tp_size()),
      rotary_base_(rotary_base) {
  if (heads % params.tp_size() != 0)
    throw std::invalid_argument("num_attention_heads " + std::to_string(heads) +
                                " is not divisible by tensor_model_parallel_size " +
                                std::to_string(params.tp_size()));
  if (o_.kv_lora_rank < 1 || o_.qk_head_dim < 1 || o_.qk_pos_emb_head_dim < 1 ||
      o_.v_head_dim < 1 || o_.rotary_dim < 2 || o_.rotary_dim % 2 != 0 ||
      o_.rotary_dim > o_.qk_pos_emb_head_dim)
    throw std::invalid_argument(
        "multi-latent attention: kv_lora_rank, qk_head_dim, "
        "qk_pos_emb_head_dim and v_head_dim must be positive and the "
        "rotated features an even count within qk_pos_emb_head_dim");
  const std::int64_t C = hidden, H = heads;
  const std::int64_t qk = o_.qk_head_dim, pe = o_.qk_pos_emb_head_dim, v = o_.v_head_dim;
  q_head_ = qk + pe;
  kv_head_ = qk + v;
  row_head_ = 2 * q_head_ + v;
  const float std_dev = 0.02f;  // Megatron's init_method for every MLA projection
  const bool sp = sequence_parallel;
  // Column-parallel: each tp rank holds its heads' rows.
  auto column = [&](const std::string& n, Shape shape) {
    return params.add({prefix + n, std::move(shape), ShardKind::rows, std_dev, 0, true, false});
  };
  // Duplicated (TE's parallel_mode "duplicated"): every rank holds all of it; with sequence
  // parallelism its gradient saw this rank's rows only (Megatron marks it sequence_parallel).
  auto duplicated = [&](const std::string& n, Shape shape) {
    return params.add(
        {prefix + n, std::move(shape), ShardKind::replicated, std_dev, 0, true, false, sp});
  };
  auto latent_norm = [&](const std::string& n, std::int64_t width, float value) {
    return params.add(
        {prefix + n, Shape{width}, ShardKind::replicated, 0.0f, value, false, false, sp});
  };
  if (o_.q_lora_rank > 0) {
    q_down_ = duplicated("linear_q_down_proj.weight", Shape{o_.q_lora_rank, C});
    if (norm_.qk_layernorm) {
      q_norm_w_ = latent_norm("q_layernorm.weight", o_.q_lora_rank, 1.0f);
      if (!norm_.rms) q_norm_b_ = latent_norm("q_layernorm.bias", o_.q_lora_rank, 0.0f);
    }
    q_up_ = column("linear_q_up_proj.weight", Shape{H * q_head_, o_.q_lora_rank});
  } else {
    q_proj_ = column("linear_q_proj.weight", Shape{H * q_head_, C});
  }
  kv_down_ = duplicated("linear_kv_down_proj.weight", Shape{o_.kv_lora_rank + pe, C});
  if (norm_.qk_layernorm) {
    kv_norm_w_ = latent_norm("kv_layernorm.weight", o_.kv_lora_rank, 1.0f);
    if (!norm_.rms) kv_norm_b_ = latent_norm("kv_layernorm.bias", o_.kv_lora_rank, 0.0f);
  }
  kv_up_ = column("linear_kv_up_proj.weight", Shape{H * kv_head_, o_.kv_lora_rank});
}

std::vector<int> MlaAttention::parameter_indices() const {
  std::vector<int> out;
  for (int i :
       {q_proj_, q_down_, q_norm_w_, q_norm_b_, q_up_, kv_down_, kv_norm_w_, kv_norm_b_, kv_up_})
    if (i >= 0) out.push_back(i);
  return out;
}

void MlaAttention::norm_forward(ModelEnv& env, const Tensor& x, int w, int b, Tensor& out,
                                Tensor& mean, Tensor& rstd) {
  Device& d = env.device;
  const Shape rows{x.shape[0]};
  out = allocate_like(env, x.shape);
  rstd = allocate_fp32(d, rows);
  if (norm_.rms) {
    d.rms_norm(env.stream, {x, params_[w].compute, out, rstd, norm_.epsilon});
    return;
  }
  mean = allocate_fp32(d, rows);
  d.layer_norm(env.stream,
               {x, params_[w].compute, params_[b].compute, out, mean, rstd, norm_.epsilon});
}

void MlaAttention::norm_backward(ModelEnv& env, const Tensor& dy, const Tensor& x, int w, int b,
                                 const Tensor& mean, const Tensor& rstd, Tensor& dx) {
  dx = allocate_like(env, x.shape);
  if (norm_.rms) {
    env.device.rms_norm_backward(env.stream,
                                 {dy, x, params_[w].compute, rstd, dx, params_[w].grad});
    return;
  }
  env.device.layer_norm_backward(
      env.stream, {dy, x, params_[w].compute, mean, rstd, dx, params_[w].grad, params_[b].grad});
}

void MlaAttention::rotate(ModelEnv& env, const Tensor& x, std::int64_t heads, std::int64_t width,
                          std::int64_t first, bool inverse) {
  Tensor heads_view = x.view(Shape{seq_, micro_batch_, heads, 1, width});
  env.device.rope(env.stream, {.x = heads_view,
                               .rotate_per_group = 1,
                               .rotary_dim = o_.rotary_dim,
                               .base = rotary_base_,
                               .inverse = inverse,
                               .first_feature = first,
                               .interleaved = true});
}

void MlaAttention::attention(ModelEnv& env, MlaActivations& a, Tensor& lse) {
  const std::int64_t T = seq_, B = micro_batch_, H = local_heads_;
  const Tensor rows = a.rows.view(Shape{T, B, H, row_head_});
  a.output = allocate_like(env, Shape{T * B, H * o_.v_head_dim});  // whole sequences
  lse = allocate_fp32(env.device, Shape{B, H, T});
  env.device.flash_attention(env.stream, {.q_source = rows,
                                          .kv_source = rows,
                                          .output = a.output,
                                          .lse = lse,
                                          .v_head_dim = o_.v_head_dim});
}

Tensor MlaAttention::forward(ModelEnv& env, const Tensor& x, MlaActivations& a, bool keep_lse) {
  const bool te = env.transformer_engine;  // each projection one TE module call
  const std::int64_t rows_s = x.shape[0], rows = seq_ * micro_batch_, H = local_heads_;
  const std::int64_t qk = o_.qk_head_dim, pe = o_.qk_pos_emb_head_dim, v = o_.v_head_dim;
  const std::int64_t r = o_.kv_lora_rank, W = row_head_;
  // The down projections, duplicated over tp: each rank on its own rows.
  if (o_.q_lora_rank > 0) {
    const LibraryCall linear(env, te);
    a.q_latent = linear_forward(env, x, params_[q_down_], nullptr);
  }
  Tensor kv_combined;  // (rows_s, kv_lora_rank + pe)
  {
    const LibraryCall linear(env, te);
    kv_combined = linear_forward(env, x, params_[kv_down_], nullptr);
  }
  a.kv_latent = allocate_like(env, Shape{rows_s, r});
  Tensor k_pe = allocate_like(env, Shape{rows_s, pe});
  copy_blocks(env, kv_combined, a.kv_latent, {.width = r});
  copy_blocks(env, kv_combined, k_pe, {.from_column = r, .width = pe});
  kv_combined = Tensor{};
  if (env.sequence_parallel) k_pe = gather_from_sequence_parallel_region(env, k_pe);
  // The up projections (TE's LayerNormColumnParallelLinear with the latent norm inside).
  Tensor q, kv;
  {
    const LibraryCall linear(env, te);
    if (o_.q_lora_rank > 0) {
      if (norm_.qk_layernorm)
        norm_forward(env, a.q_latent, q_norm_w_, q_norm_b_, a.q_normed, a.q_mean, a.q_rstd);
      else
        a.q_normed = a.q_latent;
      q = column_parallel_forward(env, a.q_normed, params_[q_up_], nullptr);
    } else {
      q = column_parallel_forward(env, x, params_[q_proj_], nullptr);
    }
  }
  {
    const LibraryCall linear(env, te);
    if (norm_.qk_layernorm)
      norm_forward(env, a.kv_latent, kv_norm_w_, kv_norm_b_, a.kv_normed, a.kv_mean, a.kv_rstd);
    else
      a.kv_normed = a.kv_latent;
    kv = column_parallel_forward(env, a.kv_normed, params_[kv_up_], nullptr);
  }
  // Decoupled RoPE, then each head's row [q | k_nope k_pe | v].
  rotate(env, q, H, q_head_, qk, false);
  rotate(env, k_pe, 1, pe, 0, false);
  a.rows = allocate_like(env, Shape{rows, H * W});
  copy_blocks(env, q, a.rows,
              {.width = q_head_, .count = H, .from_stride = q_head_, .to_stride = W});
  copy_blocks(
      env, kv, a.rows,
      {.to_column = q_head_, .width = qk, .count = H, .from_stride = kv_head_, .to_stride = W});
  copy_blocks(
      env, k_pe, a.rows,
      {.to_column = q_head_ + qk, .width = pe, .count = H, .from_stride = 0, .to_stride = W});
  copy_blocks(env, kv, a.rows,
              {.from_column = qk,
               .to_column = 2 * q_head_,
               .width = v,
               .count = H,
               .from_stride = kv_head_,
               .to_stride = W});
  q = kv = k_pe = Tensor{};
  Tensor lse;
  {
    const LibraryCall dot_product_attention(env, te);
    attention(env, a, lse);
  }
  // Selective recomputation drops what Megatron's checkpointed core attention drops.
  if (keep_lse) a.lse = lse;
  return a.output;
}

Tensor MlaAttention::backward(ModelEnv& env, const Tensor& d_out, const Tensor& x,
                              MlaActivations& a) {
  Device& d = env.device;
  Stream& s = env.stream;
  const bool te = env.transformer_engine;
  const std::int64_t T = seq_, B = micro_batch_, rows = T * B, H = local_heads_;
  const std::int64_t qk = o_.qk_head_dim, pe = o_.qk_pos_emb_head_dim, v = o_.v_head_dim;
  const std::int64_t r = o_.kv_lora_rank, W = row_head_, rows_s = x.shape[0];
  Tensor d_rows = allocate_like(env, a.rows.shape);
  {
    const LibraryCall dot_product_attention(env, te);
    const Tensor heads = a.rows.view(Shape{T, B, H, W});
    if (a.lse.shape.dims().empty()) {  // selective: the core again for its lse
      a.lse = allocate_fp32(d, Shape{B, H, T});
      Tensor scratch = allocate_like(env, a.output.shape);
      d.flash_attention(s, {.q_source = heads,
                            .kv_source = heads,
                            .output = scratch,
                            .lse = a.lse,
                            .v_head_dim = v});
    }
    Tensor d_heads = d_rows.view(Shape{T, B, H, W});
    d.flash_attention_backward(s, {.grad_output = d_out,
                                   .q_source = heads,
                                   .kv_source = heads,
                                   .output = a.output,
                                   .lse = a.lse,
                                   .grad_q_source = d_heads,
                                   .grad_kv_source = d_heads,
                                   .v_head_dim = v});
  }
  a.rows = a.output = a.lse = Tensor{};
  // The rows taken apart: queries, k_nope and v per head, k_pe summed over the heads.
  Tensor d_q = allocate_like(env, Shape{rows, H * q_head_});
  Tensor d_kv = allocate_like(env, Shape{rows, H * kv_head_});
  Tensor d_kpe = allocate_like(env, Shape{rows, pe});
  copy_blocks(env, d_rows, d_q,
              {.width = q_head_, .count = H, .from_stride = W, .to_stride = q_head_});
  copy_blocks(
      env, d_rows, d_kv,
      {.from_column = q_head_, .width = qk, .count = H, .from_stride = W, .to_stride = kv_head_});
  copy_blocks(env, d_rows, d_kv,
              {.from_column = 2 * q_head_,
               .to_column = qk,
               .width = v,
               .count = H,
               .from_stride = W,
               .to_stride = kv_head_});
  copy_blocks(
      env, d_rows, d_kpe,
      {.from_column = q_head_ + qk, .width = pe, .count = H, .from_stride = W, .to_stride = 0});
  d_rows = Tensor{};
  rotate(env, d_q, H, q_head_, qk, true);
  rotate(env, d_kpe, 1, pe, 0, true);
  // k_pe's gradient from every rank's heads: reduce-scattered back to the sequence shards
  // (the gather's conjugate), or summed over tp (Megatron-LM PR #6839's fix).
  if (env.sequence_parallel)
    d_kpe = reduce_scatter_to_sequence_parallel_region(env, d_kpe);
  else if (env.tp.size() > 1)
    env.tp.all_reduce(s, d_kpe, ReduceOp::sum)->wait();
  // Keys and values: the up projection, the latent norm, the down projection.
  Tensor d_kv_latent;
  {
    const LibraryCall linear(env, te);
    Tensor d_normed = column_parallel_backward(env, a.kv_normed, d_kv, params_[kv_up_], nullptr);
    if (norm_.qk_layernorm)
      norm_backward(env, d_normed, a.kv_latent, kv_norm_w_, kv_norm_b_, a.kv_mean, a.kv_rstd,
                    d_kv_latent);
    else
      d_kv_latent = d_normed;
  }
  d_kv = Tensor{};
  Tensor d_kv_combined = allocate_like(env, Shape{rows_s, r + pe});
  copy_blocks(env, d_kv_latent, d_kv_combined, {.width = r});
  copy_blocks(env, d_kpe, d_kv_combined, {.to_column = r, .width = pe});
  d_kv_latent = d_kpe = Tensor{};
  Tensor dx;
  {
    const LibraryCall linear(env, te);
    dx = linear_input_grad(env, d_kv_combined, params_[kv_down_]);
    linear_weight_grad(env, x, d_kv_combined, params_[kv_down_], nullptr);
  }
  d_kv_combined = Tensor{};
  // Queries.
  if (o_.q_lora_rank > 0) {
    Tensor d_latent;
    {
      const LibraryCall linear(env, te);
      Tensor d_normed = column_parallel_backward(env, a.q_normed, d_q, params_[q_up_], nullptr);
      if (norm_.qk_layernorm)
        norm_backward(env, d_normed, a.q_latent, q_norm_w_, q_norm_b_, a.q_mean, a.q_rstd,
                      d_latent);
      else
        d_latent = d_normed;
    }
    d_q = Tensor{};
    const LibraryCall linear(env, te);
    Tensor dx_q = linear_input_grad(env, d_latent, params_[q_down_]);
    linear_weight_grad(env, x, d_latent, params_[q_down_], nullptr);
    d.add(s, dx, dx_q, dx);
  } else {
    const LibraryCall linear(env, te);
    Tensor dx_q = column_parallel_backward(env, x, d_q, params_[q_proj_], nullptr);
    d.add(s, dx, dx_q, dx);
  }
  a = MlaActivations{};
  return dx;
}

}  // namespace tandem
