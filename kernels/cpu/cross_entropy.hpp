// Vocab-parallel cross entropy (Megatron's _VocabParallelCrossEntropy) in the phases
// between which the step program all-reduces over the tensor-parallel group:
//   (a) cross_entropy_max: per-row max of the local logits      → all-reduce MAX
//   (b) cross_entropy_sums: per-row Σ exp(logit - global max) and the target's logit
//       when the target is in this shard (else 0)               → all-reduce SUM (both)
//   loss(row) = log(sum) + max - target_logit                    (cross_entropy_loss)
//   (c) cross_entropy_backward: dlogits = (softmax - onehot) · dloss(row), local columns.
// With tp = 1 the same calls, without the all-reduces, give the plain cross entropy.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct CrossEntropyShape {
  std::int64_t rows = 0;         // B·T tokens
  std::int64_t local_vocab = 0;  // columns of the local logits (the padded vocab / tp)
  std::int64_t vocab_begin = 0;  // global id of the first local column
};

// row_max(rows) = max over the local logits (rows, local_vocab) of each row.
void cross_entropy_max(CrossEntropyShape s, const float* logits, float* row_max);

// sum_exp(rows) = Σ_local exp(logit - row_max); target_logit(rows) = logits(r, target - begin)
// when the target is local, else 0. row_max is the global (all-reduced) max.
void cross_entropy_sums(CrossEntropyShape s, const float* logits,  // (rows, local_vocab)
                        const std::int32_t* targets,               // (rows) global ids
                        const float* row_max,                      // (rows)
                        float* sum_exp,                            // (rows)
                        float* target_logit);                      // (rows)

// loss(rows) = log(sum_exp) + row_max - target_logit, from the all-reduced phases.
void cross_entropy_loss(std::int64_t rows, const float* row_max, const float* sum_exp,
                        const float* target_logit, float* loss);

// dlogits(r, j) = (exp(logit - row_max) / sum_exp - [j is the target]) · dloss(r), with the
// global row_max and sum_exp. dlogits may be logits (in place, as llm.c does, which
// saves the (rows, vocab) gradient buffer).
void cross_entropy_backward(CrossEntropyShape s, const float* logits,  // (rows, local_vocab)
                            const std::int32_t* targets,               // (rows)
                            const float* row_max,                      // (rows)
                            const float* sum_exp,                      // (rows)
                            const float* dloss,                        // (rows)
                            float* dlogits);                           // (rows, local_vocab)

}  // namespace tandem::kernels::cpu
