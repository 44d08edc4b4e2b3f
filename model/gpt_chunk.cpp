#include "model/gpt_chunk.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/embedding.hpp"

namespace tandem {

GptChunk::GptChunk(ParameterSet& params, const GptDims& dims, const ChunkPlan& plan,
                   Recompute recompute)
    : params_(params), dims_(dims), plan_(plan) {
  const std::int64_t C = dims.hidden;
  const LayerOptions& o = dims.options;
  const bool untie = o.untie_embeddings_and_output_weights;
  if (plan.pre_process || (plan.post_process && !untie) || plan.mtp_layers > 0)
    // The output layer on the last stage is the word embedding (tied), and the MTP block
    // embeds with it; with pipelining it is a second copy, initialised identically because
    // the seed derives from the name, whose gradient the embedding group all-reduces.
    word_ = params.add({"embedding.word_embeddings.weight", Shape{dims.padded_vocab, C},
                        ShardKind::rows, 0.02f, 0, true, !plan.pre_process});
  const bool sp = dims.sequence_parallel;
  if (plan.pre_process && o.learned_position_embedding && !o.rope)
    // Under sequence parallelism each rank adds the positions of its shard only.
    position_ = params.add({"embedding.position_embeddings.weight", Shape{dims.max_positions, C},
                            ShardKind::replicated, 0.02f, 0, true, false, sp});
  LayerDims ld{dims.hidden,      dims.heads,      dims.ffn, dims.seq,
               dims.micro_batch, dims.num_layers, sp,       o};
  ld.ep_size = dims.ep_size;
  ld.ep_rank = dims.ep_rank;
  auto moe_of = [&](int layer) {
    const auto l = static_cast<std::size_t>(layer);
    return layer >= 0 && l < dims.moe_layers.size() && dims.moe_layers[l] ? dims.moe : MoeOptions{};
  };
  layers_.reserve(static_cast<std::size_t>(plan.num_layers));
  for (int i = 0; i < plan.num_layers; ++i) {
    ld.moe = moe_of(plan.first_layer + i);
    layers_.emplace_back(params, plan.first_layer + i, ld, recompute);
  }
  // Megatron-Core's has_final_layernorm_in_this_stage.
  final_norm_ = dims.mtp_num_layers > 0
                    ? plan.num_layers > 0 && plan.first_layer + plan.num_layers == dims.num_layers
                    : plan.post_process;
  if (final_norm_) {
    final_ln_w_ = params.add(
        {"final_layernorm.weight", Shape{C}, ShardKind::replicated, 0, 1.0f, false, false, sp});
    if (o.normalization == Normalization::layer_norm)
      final_ln_b_ = params.add(
          {"final_layernorm.bias", Shape{C}, ShardKind::replicated, 0, 0.0f, false, false, sp});
  }
  if (plan.mtp_layers > 0) {
    // The depths' layer is the decoder's last layer's kind (Megatron's MTP block spec).
    ld.moe = moe_of(dims.num_layers - 1);
    mtp_ = std::make_unique<MtpBlock>(params, ld, plan.mtp_layers, word_, recompute);
  }
  if (plan.post_process)
    output_ = untie ? params.add({"output_layer.weight", Shape{dims.padded_vocab, C},
                                  ShardKind::rows, 0.02f, 0, true, false})
                    : word_;
}

std::vector<std::int64_t> GptChunk::routed_per_expert() const {
  std::vector<std::int64_t> sum;
  for (const auto& layer : layers_)
    if (layer.moe()) add_counts(sum, layer.moe()->routed());
  if (mtp_)
    for (const auto& layer : mtp_->layers())
      if (layer.moe()) add_counts(sum, layer.moe()->routed());
  return sum;
}

std::vector<MoeLayer*> GptChunk::moe_layers() {
  std::vector<MoeLayer*> out;
  for (auto& layer : layers_)
    if (layer.moe()) out.push_back(layer.moe());
  if (mtp_)
    for (auto& layer : mtp_->layers())
      if (layer.moe()) out.push_back(layer.moe());
  return out;
}

std::vector<int> GptChunk::present(std::initializer_list<int> indices) const {
  std::vector<int> out;
  for (int i : indices)
    if (i >= 0) out.push_back(i);
  return out;
}

Tensor GptChunk::embed(ModelEnv& env, const MicrobatchTensors& mb) {
  return embedding_forward(env, params_, {word_, position_}, mb.tokens, mb.positions,
                           hidden_dropout_site(-1, false));
}

void GptChunk::embed_backward(ModelEnv& env, Tensor grad, const MicrobatchTensors& mb) {
  embedding_backward(env, params_, {word_, position_}, std::move(grad), mb.tokens, mb.positions,
                     hidden_dropout_site(-1, false));
}

Tensor GptChunk::final_norm_forward(ModelEnv& env, const Tensor& x, Saved& s) {
  Device& d = env.device;
  const std::int64_t rows = x.shape[0];
  s.final_input = x;
  Tensor out = allocate_like(env, x.shape);
  const float eps = dims_.options.norm_epsilon;
  if (final_ln_b_ < 0) {  // RMSNorm
    s.final_rstd = allocate_fp32(d, Shape{rows});
    d.rms_norm(env.stream, {x, params_[final_ln_w_].compute, out, s.final_rstd, eps});
  } else {
    s.final_mean = allocate_fp32(d, Shape{rows});
    s.final_rstd = allocate_fp32(d, Shape{rows});
    d.layer_norm(env.stream, {x, params_[final_ln_w_].compute, params_[final_ln_b_].compute, out,
                              s.final_mean, s.final_rstd, eps});
  }
  return out;
}

Tensor GptChunk::final_norm_backward(ModelEnv& env, const Tensor& grad, Saved& s) {
  Device& d = env.device;
  Tensor dx = allocate_like(env, grad.shape);
  if (final_ln_b_ < 0)
    d.rms_norm_backward(env.stream, {grad, s.final_input, params_[final_ln_w_].compute,
                                     s.final_rstd, dx, params_[final_ln_w_].grad});
  else
    d.layer_norm_backward(
        env.stream, {grad, s.final_input, params_[final_ln_w_].compute, s.final_mean, s.final_rstd,
                     dx, params_[final_ln_w_].grad, params_[final_ln_b_].grad});
  s.final_input = s.final_mean = s.final_rstd = Tensor{};
  return dx;
}

void GptChunk::output_forward(ModelEnv& env, const Tensor& x, const Tensor& labels,
                              HeadActivations& h) {
  Device& d = env.device;
  Stream& st = env.stream;
  h.input = x;
  // (T·B, local vocab): the output layer sees whole sequences also under sequence parallelism.
  h.logits = column_parallel_forward(env, x, params_[output_], nullptr);
  const std::int64_t tokens = h.logits.shape[0];
  const CrossEntropyArgs ce{h.logits, labels, vocab_begin(params_, params_[output_])};
  h.row_max = allocate_fp32(d, Shape{tokens});
  d.cross_entropy_max(st, ce, h.row_max);
  env.tp.all_reduce(st, h.row_max, ReduceOp::max)->wait();
  Tensor target;
  if (env.cross_entropy_loss_fusion) {
    // Megatron-Core's fused loss: the target logits and the sums side by side in one
    // tensor (its torch.cat), all-reduced at once.
    Tensor both = allocate_fp32(d, Shape{2 * tokens});
    target = both.view(Shape{tokens}, 0);
    h.sum_exp = both.view(Shape{tokens}, tokens);
    d.cross_entropy_sums(st, ce, h.row_max, h.sum_exp, target);
    env.tp.all_reduce(st, both, ReduceOp::sum)->wait();
  } else {
    h.sum_exp = allocate_fp32(d, Shape{tokens});
    target = allocate_fp32(d, Shape{tokens});
    d.cross_entropy_sums(st, ce, h.row_max, h.sum_exp, target);
    env.tp.all_reduce(st, h.sum_exp, ReduceOp::sum)->wait();
    env.tp.all_reduce(st, target, ReduceOp::sum)->wait();
  }
  h.losses = allocate_fp32(d, Shape{tokens});
  d.cross_entropy_loss(st, h.row_max, h.sum_exp, target, h.losses);
}

bool GptChunk::defers_output_grad(const ModelEnv& env) const {
  if (!env.defer_embedding_wgrad_compute || !plan_.post_process) return false;
  return env.wgrad_deferral_limit == 0 ||
         deferred_output_.size() < static_cast<std::size_t>(env.wgrad_deferral_limit);
}

Tensor GptChunk::output_backward(ModelEnv& env, HeadActivations& h, const Tensor& labels,
                                 float row_grad, std::int64_t masked_rows, bool deferring) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t rows = h.logits.shape[0];
  Tensor grad_loss = allocate_fp32(d, Shape{rows});
  d.fill(st, grad_loss, row_grad);
  if (masked_rows > 0) {  // Megatron's loss mask, rolled: the last rows have no target
    Tensor tail = grad_loss.view(Shape{masked_rows}, rows - masked_rows);
    d.fill(st, tail, 0.0f);
  }
  const CrossEntropyArgs ce{h.logits, labels, vocab_begin(params_, params_[output_])};
  d.cross_entropy_backward(st, ce, h.row_max, h.sum_exp, grad_loss, h.logits);  // in place
  Tensor dx;
  if (deferring && defers_output_grad(env)) {
    // Megatron keeps the input and the output gradient for the flush (its
    // embedding_activation_buffer and grad_output_buffer).
    dx = column_parallel_input_grad(env, h.input, h.logits, params_[output_]);
    deferred_output_.push_back({h.input, h.logits});
  } else {
    dx = column_parallel_backward(env, h.input, h.logits, params_[output_], nullptr);
  }
  h.logits = h.input = Tensor{};
  return dx;
}

void GptChunk::drain_output_weight_grads(ModelEnv& env) {
  if (deferred_output_.empty()) return;
  Parameter& w = params_[output_];
  std::unique_ptr<Work> gathering;
  auto gathered = [&](const Tensor& x) {
    if (!env.sequence_parallel) return x;
    Tensor total = allocate_like(env, Shape{x.shape[0] * env.tp.size(), x.shape[1]});
    gathering = env.tp.all_gather(env.stream, x, total);
    return total;
  };
  Tensor total = gathered(deferred_output_.front().input);
  for (std::size_t i = 0; i < deferred_output_.size(); ++i) {
    if (gathering) gathering->wait();
    gathering.reset();
    const Tensor input = total;
    if (i + 1 < deferred_output_.size()) total = gathered(deferred_output_[i + 1].input);
    accumulate_weight_grad(env, deferred_output_[i].grad, input, w);
  }
  deferred_output_.clear();
  // The output weight (the word embedding when tied) is final now, as of the step's last
  // backward.
  if (hook_) hook_->on_grads_ready(last_backward_, {output_});
}

namespace {

// Runs `f` with the weight-gradient GEMMs it issues accumulating into the gradient buffer
// also in the step's first backward (gradient_accumulation_fusion off), for a weight that
// an earlier GEMM of this backward already wrote: the shared output layer, which each MTP
// depth's head multiplies again. Queued work (a split backward) is wrapped alike.
template <class F>
void accumulating(ModelEnv& env, F&& f) {
  if (env.gradient_accumulation_fusion) return f();
  WeightGradQueue* outer = env.wgrad_queue;
  if (outer == nullptr) {
    const bool was = env.first_backward;
    env.first_backward = false;
    f();
    env.first_backward = was;
    return;
  }
  WeightGradQueue local;
  env.wgrad_queue = &local;
  f();
  env.wgrad_queue = outer;
  for (auto& w : local.work)
    outer->work.push_back([w = std::move(w)](ModelEnv& e) {
      const bool was = e.first_backward;
      e.first_backward = false;
      w(e);
      e.first_backward = was;
    });
}

}  // namespace

// The depths of Megatron's MTP block on h0 (rows, C) and its concatenation of h0 and
// their outputs along the sequence (torch.cat), [h0 | depth 1 | … | depth D].
Tensor GptChunk::mtp_forward(ModelEnv& env, const Tensor& h0, Saved& s) {
  const std::vector<Tensor> outs = mtp_->forward(env, h0, s.batch.mtp_tokens, s.mtp);
  const std::int64_t rows = h0.shape[0], C = h0.shape[1];
  const auto depths = static_cast<std::int64_t>(outs.size());
  Tensor cat = allocate_like(env, Shape{(1 + depths) * rows, C});
  for (std::int64_t k = 0; k <= depths; ++k) {
    Tensor to = cat.view(Shape{rows, C}, k * rows * C);
    env.device.copy(env.stream, k == 0 ? h0 : outs[static_cast<std::size_t>(k - 1)], to);
  }
  return cat;
}

// Megatron's process_mtp_loss on the concatenation: each depth's loss from its block, before
// the main loss from h0's block (returned).
Tensor GptChunk::mtp_heads_forward(ModelEnv& env, const Tensor& cat, Saved& s) {
  const std::int64_t depths = dims_.mtp_num_layers, C = cat.shape[1];
  const std::int64_t rows = cat.shape[0] / (1 + depths);
  s.mtp_heads.assign(static_cast<std::size_t>(depths), HeadActivations{});
  for (std::int64_t k = 1; k <= depths; ++k)
    output_forward(env, cat.view(Shape{rows, C}, k * rows * C),
                   s.batch.mtp_labels.at(static_cast<std::size_t>(k - 1)),
                   s.mtp_heads[static_cast<std::size_t>(k - 1)]);
  return cat.view(Shape{rows, C}, 0);
}

// MTPLossAutoScaler: depth k's loss is mtp_loss_scaling_factor / D × the mean of its
// unmasked rows' losses, its gradient scaled as the main loss's (loss_scale: 1 / the
// microbatches, and here 1 / dp, the gradients being summed over dp). The gradients of the
// depths' outputs, depth k at [k − 1].
std::vector<Tensor> GptChunk::mtp_heads_backward(ModelEnv& env, Saved& s, float loss_scale) {
  const int depths = dims_.mtp_num_layers;
  std::vector<Tensor> grads(static_cast<std::size_t>(depths));
  for (int k = depths; k >= 1; --k) {
    HeadActivations& h = s.mtp_heads[static_cast<std::size_t>(k - 1)];
    const std::int64_t rows = h.logits.shape[0];
    const std::int64_t masked = mtp_masked_rows(env, dims_.seq, dims_.micro_batch, k);
    // Megatron divides by this rank's unmasked tokens (with context parallelism too).
    const std::int64_t tokens = std::max<std::int64_t>(1, rows - masked);
    const auto row_grad =
        static_cast<float>(static_cast<double>(loss_scale) * dims_.mtp_loss_scaling_factor /
                           depths / static_cast<double>(tokens));
    accumulating(env, [&] {
      grads[static_cast<std::size_t>(k - 1)] =
          output_backward(env, h, s.batch.mtp_labels.at(static_cast<std::size_t>(k - 1)), row_grad,
                          std::min(rows, masked));
    });
  }
  return grads;
}

Tensor GptChunk::forward(ModelEnv& env, int microbatch, const Tensor& input,
                         const MicrobatchTensors& mb) {
  Saved& s = saved_[microbatch];
  s = Saved{};
  s.batch = mb;
  s.layers.resize(layers_.size());
  auto needed = [&](const std::vector<int>& indices) {
    if (needed_hook_) needed_hook_->on_params_needed(indices);
  };
  if (plan_.pre_process) needed(present({word_, position_}));
  Tensor x = plan_.pre_process ? embed(env, mb) : input;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    needed(layers_[i].parameter_indices());
    x = layers_[i].forward(env, x, s.layers[i]);
  }
  const bool head = plan_.post_process;
  if (head && env.observer) env.observer->around_output_layer(env.stream);
  if (final_norm_ || head) needed(present({final_ln_w_, final_ln_b_, head ? output_ : -1}));
  if (final_norm_) x = final_norm_forward(env, x, s);
  // Multi-token prediction: the block here turns x into [h0 | depth 1 | … | depth D], which
  // the loss's chunk (this one, or one after: Megatron's mtp_standalone) splits.
  const bool mtp_losses = head && dims_.mtp_num_layers > 0;
  const bool region = (mtp_ || mtp_losses) && env.observer;
  if (region) env.observer->begin_region(env.stream, "mtp");
  if (mtp_) {
    std::vector<int> indices = mtp_->parameter_indices();
    if (!plan_.pre_process) indices.push_back(word_);
    needed(indices);
    x = mtp_forward(env, x, s);
  }
  if (mtp_losses) x = mtp_heads_forward(env, x, s);
  if (region) env.observer->end_region(env.stream, "mtp");
  if (!head) return x;
  output_forward(env, x, s.batch.labels, s.head);
  return Tensor{};
}

Tensor GptChunk::backward(ModelEnv& env, int microbatch, const Tensor& grad_output,
                          float loss_scale) {
  auto it = saved_.find(microbatch);
  if (it == saved_.end())
    throw std::logic_error("GptChunk::backward: microbatch " + std::to_string(microbatch) +
                           " was not run forward");
  Saved s = std::move(it->second);
  saved_.erase(it);
  // In a split backward the gradients are final only after their queued weight work.
  auto ready = [&](std::vector<int> indices) {
    if (!hook_) return;
    weight_grad_work(env, [hook = hook_, microbatch, indices = std::move(indices)](ModelEnv&) {
      hook->on_grads_ready(microbatch, indices);
    });
  };
  const bool head = plan_.post_process;
  const bool mtp_losses = head && dims_.mtp_num_layers > 0;
  const bool region = (mtp_ || mtp_losses) && env.observer;
  Tensor g = grad_output;
  // With deferral on, the output weight is final only after the drain, whichever
  // microbatches it kept (Megatron's hook never sees a deferred weight gradient).
  const bool deferred = head && env.defer_embedding_wgrad_compute;
  if (head) last_backward_ = microbatch;
  if (head)
    g = output_backward(env, s.head, s.batch.labels,
                        loss_scale / static_cast<float>(s.head.logits.shape[0]), 0, true);
  if (region) env.observer->begin_region(env.stream, "mtp");
  std::vector<Tensor> depth_grads;  // of the depths' outputs
  if (mtp_losses) {
    depth_grads = mtp_heads_backward(env, s, loss_scale);
  } else if (mtp_) {
    // An MTP chunk apart from the loss's: the concatenation's gradient came back, h0's block
    // first.
    const std::int64_t rows = g.shape[0] / (1 + dims_.mtp_num_layers), C = g.shape[1];
    for (int k = 1; k <= dims_.mtp_num_layers; ++k)
      depth_grads.push_back(g.view(Shape{rows, C}, k * rows * C));
    g = g.view(Shape{rows, C}, 0);
  }
  if (mtp_) {
    const Tensor from_mtp = mtp_->backward(env, std::move(depth_grads), s.mtp, loss_scale);
    if (region) env.observer->end_region(env.stream, "mtp");
    env.device.add(env.stream, g, from_mtp, g);
  } else if (mtp_losses) {
    // The loss's chunk apart from the MTP chunk: the concatenation's gradient goes back.
    if (region) env.observer->end_region(env.stream, "mtp");
    const std::int64_t rows = g.shape[0], C = g.shape[1];
    Tensor cat = allocate_like(env, Shape{(1 + dims_.mtp_num_layers) * rows, C});
    for (int k = 0; k <= dims_.mtp_num_layers; ++k) {
      Tensor to = cat.view(Shape{rows, C}, k * rows * C);
      env.device.copy(env.stream, k == 0 ? g : depth_grads[static_cast<std::size_t>(k - 1)], to);
    }
    g = cat;
  }
  if (final_norm_) g = final_norm_backward(env, g, s);
  if (head && env.observer) env.observer->around_output_layer(env.stream);
  if (final_norm_ || head || mtp_) {
    // An untied output layer is final at once; the word embedding (tied, or the MTP block's)
    // once this chunk is done with it, unless the chunk's embedding still needs it below.
    std::vector<int> done = present({final_ln_w_, final_ln_b_});
    if (mtp_)
      for (int i : mtp_->parameter_indices()) done.push_back(i);
    // A deferred output weight is final once drain_output_weight_grads has run.
    if (head && output_ != word_ && !deferred) done.push_back(output_);
    if (!plan_.pre_process && word_ >= 0 && !(deferred && word_ == output_)) done.push_back(word_);
    ready(done);
  }
  for (std::size_t i = layers_.size(); i-- > 0;) {
    g = layers_[i].backward(env, g, s.layers[i], loss_scale);
    ready(layers_[i].parameter_indices());
  }
  if (!plan_.pre_process) return g;
  // The embeddings' gradients are weight gradients only: in a split backward they are W
  // work too, after the output layer's when the chunk holds both (a tied word embedding's
  // first unfused GEMM writes the buffer, as in the whole backward). Their dropout mask is
  // this microbatch's.
  weight_grad_work(env, [this, g, batch = s.batch, mb = env.dropout_microbatch](ModelEnv& e) {
    const auto was = e.dropout_microbatch;
    e.dropout_microbatch = mb;
    embed_backward(e, g, batch);
    e.dropout_microbatch = was;
  });
  ready(present({word_, position_}));
  return Tensor{};
}

}  // namespace tandem

namespace tandem {

Tensor GptChunk::backward_input(ModelEnv& env, int microbatch, const Tensor& grad_output,
                                float loss_scale) {
  if (deferred_.count(microbatch))
    throw std::logic_error("GptChunk::backward_input: microbatch " + std::to_string(microbatch) +
                           " still has weight gradients to run");
  WeightGradQueue& queue = deferred_[microbatch];
  // The queue takes the weight work for the length of this backward only.
  struct Divert {
    ModelEnv& env;
    WeightGradQueue* before;
    ~Divert() { env.wgrad_queue = before; }
  } divert{env, env.wgrad_queue};
  env.wgrad_queue = &queue;
  return backward(env, microbatch, grad_output, loss_scale);
}

void GptChunk::backward_weights(ModelEnv& env, int microbatch) {
  auto it = deferred_.find(microbatch);
  if (it == deferred_.end())
    throw std::logic_error("GptChunk::backward_weights: microbatch " + std::to_string(microbatch) +
                           " was not run backward_input");
  WeightGradQueue queue = std::move(it->second);
  deferred_.erase(it);
  queue.run(env);
}

}  // namespace tandem
