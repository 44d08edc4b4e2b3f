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

// Dropout on the probabilities P before P·V (kernels/math/dropout.hpp); p = 0: none.
// Element (b, h, i, j) of this rank is element ((b·heads_total + head_offset + h)·T + i)·T + j
// of the stream, so the mask does not depend on how heads are split over tensor-parallel
// ranks.
struct AttentionDropout {
  float p = 0;
  std::uint64_t stream = 0;
  std::int64_t head_offset = 0;  // this rank's first head
  std::int64_t heads_total = 0;  // heads over all ranks; 0: NH
};

// Sequence-first, as Megatron's [s, b, h]: qkv (T, B, 3, NH, HD) → out (T, B, NH, HD);
// att (B, NH, T, T) receives the softmax probabilities, zero above the diagonal, saved for
// backward (before dropout).
void attention_forward(AttentionShape s, const float* qkv, float* out, float* att,
                       AttentionDropout dropout = {});

// dqkv (T, B, 3, NH, HD) written from dout (T, B, NH, HD), the forward's qkv and att, and
// the forward's dropout.
void attention_backward(AttentionShape s, const float* dout, const float* qkv, const float* att,
                        float* dqkv, AttentionDropout dropout = {});

// The stream index of element (i, j) of head bh = b·NH + h (see AttentionDropout).
std::uint64_t dropout_index(AttentionShape s, AttentionDropout d, std::int64_t bh, std::int64_t i,
                            std::int64_t j);

// FLOPs of forward as run (2 per multiply-add, with the causal blocks); backward runs twice as
// many.
double attention_forward_flops(AttentionShape s);

}  // namespace tandem::kernels::cpu
