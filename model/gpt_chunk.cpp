#include "model/gpt_chunk.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {

GptChunk::GptChunk(ParameterSet& params, const GptDims& dims, const ChunkPlan& plan,
                   Recompute recompute)
    : params_(params), dims_(dims), plan_(plan) {
  const std::int64_t C = dims.hidden;
  const LayerOptions& o = dims.options;
  const bool untie = o.untie_embeddings_and_output_weights;
  if (plan.pre_process || (plan.post_process && !untie))
    // The output layer on the last stage is the word embedding (tied); with pipelining it
    // is a second copy, initialised identically because the seed derives from the name,
    // whose gradient the embedding group all-reduces.
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
  layers_.reserve(static_cast<std::size_t>(plan.num_layers));
  for (int i = 0; i < plan.num_layers; ++i) {
    const auto layer = static_cast<std::size_t>(plan.first_layer + i);
    ld.moe = layer < dims.moe_layers.size() && dims.moe_layers[layer] ? dims.moe : MoeOptions{};
    layers_.emplace_back(params, plan.first_layer + i, ld, recompute);
  }
  if (plan.post_process) {
    final_ln_w_ = params.add(
        {"final_layernorm.weight", Shape{C}, ShardKind::replicated, 0, 1.0f, false, false, sp});
    if (o.normalization == Normalization::layer_norm)
      final_ln_b_ = params.add(
          {"final_layernorm.bias", Shape{C}, ShardKind::replicated, 0, 0.0f, false, false, sp});
    output_ = untie ? params.add({"output_layer.weight", Shape{dims.padded_vocab, C},
                                  ShardKind::rows, 0.02f, 0, true, false})
                    : word_;
  }
}

std::vector<std::int64_t> GptChunk::routed_per_expert() const {
  std::vector<std::int64_t> sum;
  for (const auto& layer : layers_)
    if (layer.moe()) add_counts(sum, layer.moe()->routed());
  return sum;
}

std::vector<MoeLayer*> GptChunk::moe_layers() {
  std::vector<MoeLayer*> out;
  for (auto& layer : layers_)
    if (layer.moe()) out.push_back(layer.moe());
  return out;
}

std::vector<int> GptChunk::present(std::initializer_list<int> indices) const {
  std::vector<int> out;
  for (int i : indices)
    if (i >= 0) out.push_back(i);
  return out;
}

namespace {
std::int64_t vocab_begin(const ParameterSet& p, const Parameter& word) {
  return static_cast<std::int64_t>(p.tp_rank()) * word.local_shape[0];
}

// The positions of this rank's rows: all of them, or its sequence shard (contiguous rows,
// the activations being sequence-first).
Tensor local_positions(const ModelEnv& env, const Tensor& positions) {
  if (!env.sequence_parallel) return positions;
  const std::int64_t shard = positions.numel() / env.tp.size();
  return positions.view(Shape{shard}, env.tp.rank() * shard);
}
}  // namespace

Tensor GptChunk::embed(ModelEnv& env, const MicrobatchTensors& mb) {
  Device& d = env.device;
  const std::int64_t rows = mb.tokens.numel(), C = dims_.hidden;
  Tensor words = allocate_like(env, Shape{rows, C});  // this rank's vocabulary rows only
  d.embedding(env.stream,
              {mb.tokens, params_[word_].compute, words, vocab_begin(params_, params_[word_])});
  if (env.sequence_parallel)  // Megatron: reduce_scatter_to_sequence_parallel_region
    words = reduce_scatter_to_sequence_parallel_region(env, words);
  else
    env.tp.all_reduce(env.stream, words, ReduceOp::sum)->wait();  // Megatron: reduce_from_tp
  if (position_ >= 0) {  // else rotary embeddings act inside attention
    const Tensor positions = local_positions(env, mb.positions);
    Tensor pos = allocate_like(env, words.shape);
    d.embedding(env.stream, {positions, params_[position_].compute, pos, 0});
    d.add(env.stream, words, pos, words);
  }
  // Megatron's embedding dropout (the hidden dropout probability), in place.
  const HiddenDropout drop = hidden_dropout_at(env, hidden_dropout_site(-1, false), words);
  if (drop.p > 0) d.dropout(env.stream, words, words, drop);
  return words;
}

void GptChunk::head_forward(ModelEnv& env, const Tensor& x, Saved& s) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t rows = x.shape[0];
  s.final_input = x;
  s.final_ln_out = allocate_like(env, x.shape);
  const float eps = dims_.options.norm_epsilon;
  if (final_ln_b_ < 0) {  // RMSNorm
    s.final_rstd = allocate_fp32(d, Shape{rows});
    d.rms_norm(st, {x, params_[final_ln_w_].compute, s.final_ln_out, s.final_rstd, eps});
  } else {
    s.final_mean = allocate_fp32(d, Shape{rows});
    s.final_rstd = allocate_fp32(d, Shape{rows});
    d.layer_norm(st, {x, params_[final_ln_w_].compute, params_[final_ln_b_].compute, s.final_ln_out,
                      s.final_mean, s.final_rstd, eps});
  }
  // (T·B, local vocab): the output layer sees whole sequences also under sequence parallelism.
  s.logits = column_parallel_forward(env, s.final_ln_out, params_[output_], nullptr);
  const std::int64_t tokens = s.logits.shape[0];
  const CrossEntropyArgs ce{s.logits, s.batch.labels, vocab_begin(params_, params_[output_])};
  s.row_max = allocate_fp32(d, Shape{tokens});
  d.cross_entropy_max(st, ce, s.row_max);
  env.tp.all_reduce(st, s.row_max, ReduceOp::max)->wait();
  s.sum_exp = allocate_fp32(d, Shape{tokens});
  Tensor target = allocate_fp32(d, Shape{tokens});
  d.cross_entropy_sums(st, ce, s.row_max, s.sum_exp, target);
  env.tp.all_reduce(st, s.sum_exp, ReduceOp::sum)->wait();
  env.tp.all_reduce(st, target, ReduceOp::sum)->wait();
  s.losses = allocate_fp32(d, Shape{tokens});
  d.cross_entropy_loss(st, s.row_max, s.sum_exp, target, s.losses);
}

Tensor GptChunk::head_backward(ModelEnv& env, Saved& s, float loss_scale) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t rows = s.logits.shape[0];
  Tensor grad_loss = allocate_fp32(d, Shape{rows});
  d.fill(st, grad_loss, loss_scale / static_cast<float>(rows));  // mean over tokens
  const CrossEntropyArgs ce{s.logits, s.batch.labels, vocab_begin(params_, params_[output_])};
  d.cross_entropy_backward(st, ce, s.row_max, s.sum_exp, grad_loss, s.logits);  // in place
  Tensor d_ln = column_parallel_backward(env, s.final_ln_out, s.logits, params_[output_], nullptr);
  s.logits = s.final_ln_out = Tensor{};
  Tensor dx = allocate_like(env, d_ln.shape);
  if (final_ln_b_ < 0)
    d.rms_norm_backward(st, {d_ln, s.final_input, params_[final_ln_w_].compute, s.final_rstd, dx,
                             params_[final_ln_w_].grad});
  else
    d.layer_norm_backward(
        st, {d_ln, s.final_input, params_[final_ln_w_].compute, s.final_mean, s.final_rstd, dx,
             params_[final_ln_w_].grad, params_[final_ln_b_].grad});
  return dx;
}

void GptChunk::embed_backward(ModelEnv& env, Tensor grad, const MicrobatchTensors& mb) {
  Parameter& word = params_[word_];
  const HiddenDropout drop = hidden_dropout_at(env, hidden_dropout_site(-1, false), grad);
  if (drop.p > 0) env.device.dropout_backward(env.stream, grad, grad, drop);  // in place
  // The conjugate of the reduce-scatter: every token's gradient, for this rank's vocabulary.
  const Tensor all_rows =
      env.sequence_parallel ? gather_from_sequence_parallel_region(env, grad) : grad;
  env.device.embedding_backward(env.stream,
                                {mb.tokens, all_rows, word.grad, vocab_begin(params_, word)});
  if (position_ >= 0)
    env.device.embedding_backward(
        env.stream, {local_positions(env, mb.positions), grad, params_[position_].grad, 0});
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
  if (!plan_.post_process) return x;
  if (env.observer) env.observer->around_output_layer(env.stream);
  needed(present({final_ln_w_, final_ln_b_, output_}));
  head_forward(env, x, s);
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
  Tensor g = plan_.post_process ? head_backward(env, s, loss_scale) : grad_output;
  if (plan_.post_process && env.observer) env.observer->around_output_layer(env.stream);
  if (plan_.post_process) {
    // The tied word embedding is final only after the embedding's backward, when this
    // chunk holds both.
    // (An untied output layer is final at once.)
    ready(plan_.pre_process && output_ == word_ ? present({final_ln_w_, final_ln_b_})
                                                : present({final_ln_w_, final_ln_b_, output_}));
  }
  s.final_input = Tensor{};
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
