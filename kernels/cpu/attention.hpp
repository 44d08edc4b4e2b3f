// Causal self-attention core of a GPT layer on the heads of one tensor-parallel rank,
// from the fused QKV projection to the per-head context, forward and backward:
//   S = Q·Kᵀ / sqrt(HD), P = softmax(S with keys j > query i masked), O = P·V.
// One (batch, head) pair is a task; tasks run in parallel, each with single-threaded
// GEMMs. The causal mask is exploited by blocks of 64 query rows: a block only multiplies
// against the keys up to its last row, which saves ~3/8 of the FLOPs at T = 256.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct AttentionShape {
  std::int64_t B = 0;   // batch (micro batch size)
  std::int64_t T = 0;   // sequence length
  std::int64_t NH = 0;  // heads on this rank
  std::int64_t HD = 0;  // head dimension; C = NH·HD
};

// Sequence-first, as Megatron's [s, b, h]: qkv (T, B, 3, NH, HD) → out (T, B, NH, HD);
// att (B, NH, T, T) receives the softmax probabilities, zero above the diagonal, saved for
// backward.
void attention_forward(AttentionShape s, const float* qkv, float* out, float* att);

// dqkv (T, B, 3, NH, HD) written from dout (T, B, NH, HD), the forward's qkv and att.
void attention_backward(AttentionShape s, const float* dout, const float* qkv, const float* att,
                        float* dqkv);

// FLOPs of forward as run (2 per multiply-add, with the causal blocks); backward runs twice as
// many.
double attention_forward_flops(AttentionShape s);

}  // namespace tandem::kernels::cpu
