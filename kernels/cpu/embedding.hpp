// Embeddings of the GPT input. The word embedding is vocab-parallel as in Megatron's
// VocabParallelEmbedding: a tensor-parallel rank holds rows [vocab_begin, vocab_begin +
// local_vocab) of the table and outputs zero for tokens outside its shard, so the
// all-reduce over the tp group that follows sums to the full lookup. The learned
// position embedding is then added on every rank.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct VocabShard {
  std::int64_t begin = 0;  // first global token id held here
  std::int64_t size = 0;   // local_vocab rows held here
};

// out(rows, C) = table(token - begin, :) for tokens in the shard, else 0.
void embedding_forward(const std::int32_t* tokens,  // (rows) global token ids
                       const float* table,          // (local_vocab, C)
                       VocabShard shard, std::int64_t rows, std::int64_t C,
                       float* out);  // (rows, C)

// dtable(token - begin, :) += dout(r, :) for each row r whose token is in the shard.
// Threads split the columns, each visiting rows in order: repeated tokens add up in the
// same order whatever the thread count, with no atomics.
void embedding_backward(const std::int32_t* tokens,  // (rows)
                        const float* dout,           // (rows, C)
                        VocabShard shard, std::int64_t rows, std::int64_t C,
                        float* dtable);  // (local_vocab, C)

// out(B, T, C) += position(T, C) broadcast over the batch.
void position_embedding_forward(const float* position, std::int64_t B, std::int64_t T,
                                std::int64_t C, float* out);

// dposition(T, C) += Σ_b dout(b, :, :).
void position_embedding_backward(const float* dout, std::int64_t B, std::int64_t T, std::int64_t C,
                                 float* dposition);

}  // namespace tandem::kernels::cpu
