#include "model/multi_token_prediction.hpp"

#include <stdexcept>
#include <string>

#include "model/embedding.hpp"
#include "model/library_call.hpp"

namespace tandem {
namespace {

// Megatron's gather_from_tensor_model_parallel_region: each rank's (rows, C / tp) columns
// all-gathered into (rows, C), rank r's block at columns r·C / tp (all_gather_into_tensor
// stacks the blocks along the rows; one copy per block puts them side by side).
Tensor gather_along_hidden(ModelEnv& env, const Tensor& y) {
  const std::int64_t tp = env.tp.size();
  if (tp == 1) return y;
  const std::int64_t rows = y.shape[0], width = y.shape[1];
  Tensor stacked = allocate_like(env, Shape{tp * rows, width});
  env.tp.all_gather(env.stream, y, stacked)->wait();
  Tensor out = allocate_like(env, Shape{rows, tp * width});
  for (std::int64_t r = 0; r < tp; ++r)
    env.device.copy_columns(env.stream, {.from = stacked.view(Shape{rows, width}, r * rows * width),
                                         .to = out,
                                         .to_column = r * width,
                                         .width = width});
  return out;
}

// Its backward (Megatron's _split_along_last_dim): this rank's columns of dy.
Tensor split_along_hidden(ModelEnv& env, const Tensor& dy) {
  const std::int64_t tp = env.tp.size();
  if (tp == 1) return dy;
  const std::int64_t rows = dy.shape[0], width = dy.shape[1] / tp;
  Tensor mine = allocate_like(env, Shape{rows, width});
  env.device.copy_columns(
      env.stream, {.from = dy, .to = mine, .from_column = env.tp.rank() * width, .width = width});
  return mine;
}

}  // namespace

std::int64_t mtp_masked_rows(const ModelEnv& env, std::int64_t local_seq, std::int64_t micro_batch,
                             int k) {
  const std::int64_t whole = env.cp != nullptr ? local_seq * env.cp->size() : local_seq;
  std::int64_t masked = 0;
  for (std::int64_t t = 0; t < local_seq; ++t) {
    const bool past = sequence_position(env, t, local_seq) + k >= whole;
    if (past)
      ++masked;
    else if (masked > 0)
      throw std::logic_error("mtp_masked_rows: the masked positions are not a tail of the rows");
  }
  return masked * micro_batch;
}

MtpBlock::MtpBlock(ParameterSet& params, const LayerDims& layer, int depths, int word,
                   Recompute recompute)
    : params_(params), dims_(layer), word_(word), full_recompute_(recompute == Recompute::full) {
  if (depths < 1) throw std::invalid_argument("MtpBlock: depths must be positive");
  if (word < 0) throw std::invalid_argument("MtpBlock: the chunk holds no word embedding");
  if (layer.options.learned_position_embedding && !layer.options.rope)
    throw std::invalid_argument(
        "multi-token prediction runs with RoPE or no position embedding (Megatron's rule)");
  const std::int64_t C = layer.hidden;
  const bool sp = layer.sequence_parallel;
  const bool rms = layer.options.normalization == Normalization::rms_norm;
  // Each depth's layer recomputes its attention core under selective recomputation; under
  // full the depth as a whole is recomputed, its layer then running as without.
  const Recompute inner = recompute == Recompute::selective ? recompute : Recompute::none;
  depth_.resize(static_cast<std::size_t>(depths));
  layers_.reserve(static_cast<std::size_t>(depths));
  for (int k = 0; k < depths; ++k) {
    const std::string p = "mtp.layers." + std::to_string(k) + ".";
    auto norm = [&](const std::string& n, int& w, int& b) {
      w = params.add(
          {p + n + ".weight", Shape{C}, ShardKind::replicated, 0.0f, 1.0f, false, false, sp});
      if (!rms)
        b = params.add(
            {p + n + ".bias", Shape{C}, ShardKind::replicated, 0.0f, 0.0f, false, false, sp});
    };
    Depth& d = depth_[static_cast<std::size_t>(k)];
    norm("enorm", d.enorm_w, d.enorm_b);
    norm("hnorm", d.hnorm_w, d.hnorm_b);
    // Column-parallel 2h → h, no bias, Megatron's init_method (normal, std 0.02).
    d.eh_proj = params.add(
        {p + "eh_proj.weight", Shape{C, 2 * C}, ShardKind::rows, 0.02f, 0.0f, true, false});
    // The layer numbers after the decoder's name its dropout streams.
    layers_.emplace_back(params, layer.num_layers + k, layer, inner, p + "transformer_layer.");
    norm("final_layernorm", d.final_w, d.final_b);
  }
}

std::vector<int> MtpBlock::parameter_indices() const {
  std::vector<int> out;
  for (std::size_t k = 0; k < depth_.size(); ++k) {
    const Depth& d = depth_[k];
    for (int i : {d.enorm_w, d.enorm_b, d.hnorm_w, d.hnorm_b, d.eh_proj})
      if (i >= 0) out.push_back(i);
    for (int i : layers_[k].parameter_indices()) out.push_back(i);
    for (int i : {d.final_w, d.final_b})
      if (i >= 0) out.push_back(i);
  }
  return out;
}

void MtpBlock::norm_forward(ModelEnv& env, const Tensor& x, int w, int b, Tensor& out, Tensor& mean,
                            Tensor& rstd) {
  const std::int64_t rows = x.shape[0];
  const float eps = dims_.options.norm_epsilon;
  if (b < 0) {  // RMSNorm
    rstd = allocate_fp32(env.device, Shape{rows});
    env.device.rms_norm(env.stream, {x, params_[w].compute, out, rstd, eps});
    return;
  }
  mean = allocate_fp32(env.device, Shape{rows});
  rstd = allocate_fp32(env.device, Shape{rows});
  env.device.layer_norm(env.stream,
                        {x, params_[w].compute, params_[b].compute, out, mean, rstd, eps});
}

void MtpBlock::norm_backward(ModelEnv& env, const Tensor& dy, const Tensor& x, int w, int b,
                             const Tensor& mean, const Tensor& rstd, Tensor& dx) {
  if (b < 0) {
    env.device.rms_norm_backward(env.stream,
                                 {dy, x, params_[w].compute, rstd, dx, params_[w].grad});
    return;
  }
  env.device.layer_norm_backward(
      env.stream, {dy, x, params_[w].compute, mean, rstd, dx, params_[w].grad, params_[b].grad});
}

// Megatron's _concat_embeddings, the transformer layer and _postprocess (the final norm).
Tensor MtpBlock::depth_forward(ModelEnv& env, int k, MtpDepthActivations& a) {
  Device& dev = env.device;
  const Depth& d = depth_[static_cast<std::size_t>(k)];
  const bool te = env.transformer_engine;  // the norms and eh_proj: one TE module each
  const std::int64_t rows = a.hidden.shape[0], C = dims_.hidden;
  Tensor e_norm = allocate_like(env, a.embedded.shape);
  {
    const LibraryCall enorm(env, te);
    norm_forward(env, a.embedded, d.enorm_w, d.enorm_b, e_norm, a.e_mean, a.e_rstd);
  }
  Tensor h_norm = allocate_like(env, a.hidden.shape);
  {
    const LibraryCall hnorm(env, te);
    norm_forward(env, a.hidden, d.hnorm_w, d.hnorm_b, h_norm, a.h_mean, a.h_rstd);
  }
  // torch.cat((decoder_input, hidden_states), -1): the embedding first.
  a.cat = allocate_like(env, Shape{rows, 2 * C});
  dev.copy_columns(env.stream, {.from = e_norm, .to = a.cat, .width = C});
  dev.copy_columns(env.stream, {.from = h_norm, .to = a.cat, .to_column = C, .width = C});
  e_norm = h_norm = Tensor{};
  Tensor projected;
  {
    const LibraryCall eh_proj(env, te);
    projected = column_parallel_forward(env, a.cat, params_[d.eh_proj], nullptr);
  }
  // (rows of whole sequences, C / tp) → (…, C), then back to this rank's sequence shard
  // (scatter_to_sequence_parallel_region: a view, the gathered tensor kept alive by it).
  projected = gather_along_hidden(env, projected);
  Tensor x = projected;
  if (env.sequence_parallel) {
    const std::int64_t shard = projected.shape[0] / env.tp.size();
    x = projected.view(Shape{shard, C}, env.tp.rank() * shard * C);
  }
  projected = Tensor{};
  a.layer_out = layers_[static_cast<std::size_t>(k)].forward(env, x, a.layer);
  Tensor out = allocate_like(env, a.layer_out.shape);
  {
    const LibraryCall final_layernorm(env, te);
    norm_forward(env, a.layer_out, d.final_w, d.final_b, out, a.f_mean, a.f_rstd);
  }
  return out;
}

std::vector<Tensor> MtpBlock::forward(ModelEnv& env, const Tensor& h0,
                                      const std::vector<Tensor>& tokens,
                                      std::vector<MtpDepthActivations>& saved) {
  if (static_cast<int>(tokens.size()) != depths())
    throw std::logic_error("MtpBlock::forward: " + std::to_string(tokens.size()) +
                           " token rolls for " + std::to_string(depths()) + " depths");
  saved.assign(static_cast<std::size_t>(depths()), MtpDepthActivations{});
  std::vector<Tensor> outs;
  Tensor h = h0;
  for (int k = 0; k < depths(); ++k) {
    MtpDepthActivations& a = saved[static_cast<std::size_t>(k)];
    a.tokens = tokens[static_cast<std::size_t>(k)];
    a.hidden = h;
    a.embedded =
        embedding_forward(env, params_, {word_, -1}, a.tokens, Tensor{}, embedding_site(k));
    h = depth_forward(env, k, a);
    // Full recomputation: the depth's two inputs are its checkpoint.
    if (full_recompute_) a = {.tokens = a.tokens, .hidden = a.hidden, .embedded = a.embedded};
    outs.push_back(h);
  }
  return outs;
}

Tensor MtpBlock::backward(ModelEnv& env, std::vector<Tensor> grads,
                          std::vector<MtpDepthActivations>& saved, float loss_scale) {
  Device& dev = env.device;
  const bool te = env.transformer_engine;
  const std::int64_t C = dims_.hidden;
  Tensor d_hidden;
  for (int k = depths(); k-- > 0;) {
    MtpDepthActivations& a = saved[static_cast<std::size_t>(k)];
    const Depth& d = depth_[static_cast<std::size_t>(k)];
    if (full_recompute_) depth_forward(env, k, a);
    Tensor g = grads[static_cast<std::size_t>(k)];
    grads[static_cast<std::size_t>(k)] = Tensor{};
    Tensor d_layer = allocate_like(env, g.shape);
    {
      const LibraryCall final_layernorm(env, te);
      norm_backward(env, g, a.layer_out, d.final_w, d.final_b, a.f_mean, a.f_rstd, d_layer);
    }
    g = a.layer_out = a.f_mean = a.f_rstd = Tensor{};
    Tensor d_x = layers_[static_cast<std::size_t>(k)].backward(env, d_layer, a.layer, loss_scale);
    d_layer = Tensor{};
    // The conjugates of the scatter to the sequence shard and of the gather over tp.
    Tensor d_projected =
        env.sequence_parallel ? gather_from_sequence_parallel_region(env, d_x) : d_x;
    d_x = Tensor{};
    d_projected = split_along_hidden(env, d_projected);
    Tensor d_cat;
    {
      const LibraryCall eh_proj(env, te);
      d_cat = column_parallel_backward(env, a.cat, d_projected, params_[d.eh_proj], nullptr);
    }
    d_projected = a.cat = Tensor{};
    const std::int64_t rows = d_cat.shape[0];
    Tensor d_e_norm = allocate_like(env, Shape{rows, C}),
           d_h_norm = allocate_like(env, Shape{rows, C});
    dev.copy_columns(env.stream, {.from = d_cat, .to = d_e_norm, .width = C});
    dev.copy_columns(env.stream, {.from = d_cat, .to = d_h_norm, .from_column = C, .width = C});
    d_cat = Tensor{};
    Tensor d_embedded = allocate_like(env, Shape{rows, C});
    {
      const LibraryCall enorm(env, te);
      norm_backward(env, d_e_norm, a.embedded, d.enorm_w, d.enorm_b, a.e_mean, a.e_rstd,
                    d_embedded);
    }
    d_hidden = allocate_like(env, Shape{rows, C});
    {
      const LibraryCall hnorm(env, te);
      norm_backward(env, d_h_norm, a.hidden, d.hnorm_w, d.hnorm_b, a.h_mean, a.h_rstd, d_hidden);
    }
    // The shared embedding's gradient is weight-gradient work (W in a split backward), with
    // this microbatch's dropout mask.
    weight_grad_work(env, [this, d_embedded, tokens = a.tokens, site = embedding_site(k),
                           mb = env.dropout_microbatch](ModelEnv& e) {
      const auto was = e.dropout_microbatch;
      e.dropout_microbatch = mb;
      embedding_backward(e, params_, {word_, -1}, d_embedded, tokens, Tensor{}, site);
      e.dropout_microbatch = was;
    });
    a = MtpDepthActivations{};
    // Depth k's hidden input is depth k − 1's output: its gradient joins that depth's own.
    if (k > 0) {
      Tensor& prev = grads[static_cast<std::size_t>(k - 1)];
      dev.add(env.stream, prev, d_hidden, prev);
      d_hidden = Tensor{};
    }
  }
  return d_hidden;
}

}  // namespace tandem
