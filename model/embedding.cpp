#include "model/embedding.hpp"

namespace tandem {
namespace {

// The positions of this rank's rows: all of them, or its sequence shard (contiguous rows,
// the activations being sequence-first).
Tensor local_positions(const ModelEnv& env, const Tensor& positions) {
  if (!env.sequence_parallel) return positions;
  const std::int64_t shard = positions.numel() / env.tp.size();
  return positions.view(Shape{shard}, env.tp.rank() * shard);
}

}  // namespace

std::int64_t vocab_begin(const ParameterSet& params, const Parameter& table) {
  return static_cast<std::int64_t>(params.tp_rank()) * table.local_shape[0];
}

Tensor embedding_forward(ModelEnv& env, const ParameterSet& params, EmbeddingParams e,
                         const Tensor& tokens, const Tensor& positions,
                         std::uint64_t dropout_site) {
  Device& d = env.device;
  const Parameter& word = params[e.word];
  const std::int64_t rows = tokens.numel(), C = word.local_shape[1];
  Tensor words = allocate_like(env, Shape{rows, C});  // this rank's vocabulary rows only
  d.embedding(env.stream, {tokens, word.compute, words, vocab_begin(params, word)});
  if (env.sequence_parallel)  // Megatron: reduce_scatter_to_sequence_parallel_region
    words = reduce_scatter_to_sequence_parallel_region(env, words);
  else
    env.tp.all_reduce(env.stream, words, ReduceOp::sum)->wait();  // Megatron: reduce_from_tp
  if (e.position >= 0) {  // else rotary embeddings act inside attention
    const Tensor local = local_positions(env, positions);
    Tensor pos = allocate_like(env, words.shape);
    d.embedding(env.stream, {local, params[e.position].compute, pos, 0});
    d.add(env.stream, words, pos, words);
  }
  // Megatron's embedding dropout (the hidden dropout probability), in place.
  const HiddenDropout drop = hidden_dropout_at(env, dropout_site, words);
  if (drop.p > 0) d.dropout(env.stream, words, words, drop);
  return words;
}

void embedding_backward(ModelEnv& env, ParameterSet& params, EmbeddingParams e, Tensor grad,
                        const Tensor& tokens, const Tensor& positions, std::uint64_t dropout_site) {
  Parameter& word = params[e.word];
  const HiddenDropout drop = hidden_dropout_at(env, dropout_site, grad);
  if (drop.p > 0) env.device.dropout_backward(env.stream, grad, grad, drop);  // in place
  // The conjugate of the reduce-scatter: every token's gradient, for this rank's vocabulary.
  const Tensor all_rows =
      env.sequence_parallel ? gather_from_sequence_parallel_region(env, grad) : grad;
  env.device.embedding_backward(env.stream,
                                {tokens, all_rows, word.grad, vocab_begin(params, word)});
  if (e.position >= 0)
    env.device.embedding_backward(
        env.stream, {local_positions(env, positions), grad, params[e.position].grad, 0});
}

}  // namespace tandem
