// Megatron's LanguageModelEmbedding on one rank, shared by the first stage's embedding and
// the multi-token prediction block's: the vocab-parallel word embedding of whole sequences
// (each rank its vocabulary rows), summed over tp by an all-reduce or, with sequence
// parallelism, a reduce-scatter to this rank's sequence shard; the learned positions added
// (of this rank's rows); the embedding dropout (the hidden dropout probability) in place.
#pragma once

#include <cstdint>

#include "model/tensor_parallel.hpp"

namespace tandem {

struct EmbeddingParams {
  int word = -1;      // (padded vocab, C), split by vocabulary rows over tp
  int position = -1;  // (max positions, C), or -1: no learned positions (RoPE, none)
};

// tokens, positions: (T·B) int32, sequence-first (positions unused without learned ones).
// Returns (T·B, C), or this rank's (T·B / tp, C) shard with sequence parallelism.
Tensor embedding_forward(ModelEnv& env, const ParameterSet& params, EmbeddingParams e,
                         const Tensor& tokens, const Tensor& positions, std::uint64_t dropout_site);
// Accumulates the gradients of the tables from `grad` (the forward output's shape; its
// dropout is undone in place).
void embedding_backward(ModelEnv& env, ParameterSet& params, EmbeddingParams e, Tensor grad,
                        const Tensor& tokens, const Tensor& positions, std::uint64_t dropout_site);
// The first vocabulary row of this rank's shard of a vocab-parallel table.
std::int64_t vocab_begin(const ParameterSet& params, const Parameter& table);

}  // namespace tandem
