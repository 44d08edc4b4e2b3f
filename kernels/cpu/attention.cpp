// Causal attention with per-(batch, head) GEMMs; see attention.hpp. Rows are sequence-first
// (row t·B + b, Megatron's [s, b, h]), so the rows of one sequence are B rows apart.
// Pointers into the fused qkv for head h of batch b (C = NH·HD, a row of qkv is 3C floats):
//   Q = qkv + b·3C + h·HD, K = Q + C, V = Q + 2C, each with leading dimension B·3C;
//   O = out + b·C + h·HD with leading dimension B·C; P = att + (b·NH + h)·T·T.
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/math/dropout.hpp"
#include "kernels/math/exp.hpp"
#include "kernels/math/softmax.hpp"

namespace tandem::kernels::cpu {
namespace {

constexpr std::int64_t kQueryBlock = 64;

struct Head {
  const float* q;
  const float* k;
  const float* v;
  std::int64_t ld_qkv;  // B·3C: from one position of the sequence to the next
  std::int64_t ld_out;  // B·C
  std::int64_t offset_out;
  std::int64_t offset_qkv;
  std::int64_t offset_att;
};

Head head(AttentionShape s, std::int64_t bh, const float* qkv) {
  const std::int64_t b = bh / s.NH;
  const std::int64_t h = bh % s.NH;
  const std::int64_t C = s.NH * s.HD;
  const std::int64_t offset_qkv = b * 3 * C + h * s.HD;
  return Head{.q = qkv + offset_qkv,
              .k = qkv + offset_qkv + C,
              .v = qkv + offset_qkv + 2 * C,
              .ld_qkv = s.B * 3 * C,
              .ld_out = s.B * C,
              .offset_out = b * C + h * s.HD,
              .offset_qkv = offset_qkv,
              .offset_att = bh * s.T * s.T};
}

// Rows [i0, i1) of S (already scaled) become probabilities in place; columns above the
// diagonal are zeroed up to T so P is a complete (T, T) matrix.
void softmax_rows(float* att, std::int64_t T, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) {
    float* row = att + i * T;
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (std::int64_t j = 1; j <= i; ++j) max = row[j] > max ? row[j] : max;  // vectorises
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j <= i; ++j) {
      row[j] = math::exp_approx(row[j] - max);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
    std::fill(row + i + 1, row + T, 0.0f);
  }
}

// Rows [i0, i1) of P after dropout into dst (row i0 first, ld T), zero above the diagonal.
void dropout_rows(AttentionShape s, AttentionDropout d, std::int64_t bh, const float* P, float* dst,
                  std::int64_t i0, std::int64_t i1) {
  const std::int64_t T = s.T;
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::uint64_t row = dropout_index(s, d, bh, i, 0);
    for (std::int64_t j = 0; j <= i; ++j)
      dst[(i - i0) * T + j] = math::dropout_apply(P[i * T + j], d.stream, row + j, d.p);
    std::fill(dst + (i - i0) * T + i + 1, dst + (i - i0 + 1) * T, 0.0f);
  }
}

void forward_head(AttentionShape s, AttentionDropout d, std::int64_t bh, const Head& hd, float* out,
                  float* att, float* dropped) {
  const std::int64_t T = s.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  float* P = att + hd.offset_att;
  float* O = out + hd.offset_out;
  for (std::int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
    const std::int64_t i1 = std::min(T, i0 + kQueryBlock);
    // S[i0:i1, 0:i1] = scale · Q[i0:i1] · K[0:i1]ᵀ
    gemm({.m = i1 - i0,
          .n = i1,
          .k = s.HD,
          .transpose_b = true,
          .alpha = scale,
          .lda = hd.ld_qkv,
          .ldb = hd.ld_qkv,
          .ldc = T},
         hd.q + i0 * hd.ld_qkv, hd.k, P + i0 * T);
    softmax_rows(P, T, i0, i1);
    // O[i0:i1] = dropout(P)[i0:i1, 0:i1] · V[0:i1]; the block's dropped rows go to scratch.
    const float* A = P + i0 * T;
    if (d.p > 0) {
      dropout_rows(s, d, bh, P, dropped, i0, i1);
      A = dropped;
    }
    gemm({.m = i1 - i0, .n = s.HD, .k = i1, .lda = T, .ldb = hd.ld_qkv, .ldc = hd.ld_out}, A, hd.v,
         O + i0 * hd.ld_out);
  }
}

// dS = P ⊙ (dP - rowsum(P ⊙ dP)) · scale over rows [i0, i1), in place in dP; the entries
// above the diagonal (up to the block end i1) are zeroed because the dK GEMMs read them.
void softmax_backward_rows(const float* P, float* dP, std::int64_t T, std::int64_t i0,
                           std::int64_t i1, float scale) {
  for (std::int64_t i = i0; i < i1; ++i) {
    const float* p = P + i * T;
    float* d = dP + i * T;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j <= i; ++j) dot += p[j] * d[j];
#pragma omp simd
    for (std::int64_t j = 0; j <= i; ++j) d[j] = math::softmax_input_grad(p[j], d[j], dot) * scale;
    std::fill(d + i + 1, d + i1, 0.0f);
  }
}

void backward_head(AttentionShape s, AttentionDropout d, std::int64_t bh, const Head& hd,
                   const float* dout, const float* att, float* dqkv, float* dS, float* dropped) {
  const std::int64_t T = s.T;
  const std::int64_t C = s.NH * s.HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const float* P = att + hd.offset_att;
  const float* dO = dout + hd.offset_out;
  float* dQ = dqkv + hd.offset_qkv;
  float* dK = dQ + C;
  float* dV = dQ + 2 * C;
  // dV reads dropout(P), regenerated whole from the stream.
  if (d.p > 0) dropout_rows(s, d, bh, P, dropped, 0, T);
  const float* P_used = d.p > 0 ? dropped : P;
  for (std::int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
    const std::int64_t i1 = std::min(T, i0 + kQueryBlock);
    // dP[i0:i1, 0:i1] = dO[i0:i1] · V[0:i1]ᵀ
    gemm({.m = i1 - i0,
          .n = i1,
          .k = s.HD,
          .transpose_b = true,
          .lda = hd.ld_out,
          .ldb = hd.ld_qkv,
          .ldc = T},
         dO + i0 * hd.ld_out, hd.v, dS + i0 * T);
    // Through dropout: the dropped entries get no gradient, the kept ones are scaled.
    if (d.p > 0)
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::uint64_t row = dropout_index(s, d, bh, i, 0);
        for (std::int64_t j = 0; j <= i; ++j)
          dS[i * T + j] = math::dropout_apply(dS[i * T + j], d.stream, row + j, d.p);
      }
    softmax_backward_rows(P, dS, T, i0, i1, scale);
    // dQ[i0:i1] = dS[i0:i1, 0:i1] · K[0:i1]
    gemm({.m = i1 - i0, .n = s.HD, .k = i1, .lda = T, .ldb = hd.ld_qkv, .ldc = hd.ld_qkv},
         dS + i0 * T, hd.k, dQ + i0 * hd.ld_qkv);
  }
  for (std::int64_t j0 = 0; j0 < T; j0 += kQueryBlock) {
    const std::int64_t j1 = std::min(T, j0 + kQueryBlock);
    // Only queries i ≥ j0 see keys [j0, j1).
    // dK[j0:j1] = dS[j0:T, j0:j1]ᵀ · Q[j0:T]
    gemm({.m = j1 - j0,
          .n = s.HD,
          .k = T - j0,
          .transpose_a = true,
          .lda = T,
          .ldb = hd.ld_qkv,
          .ldc = hd.ld_qkv},
         dS + j0 * T + j0, hd.q + j0 * hd.ld_qkv, dK + j0 * hd.ld_qkv);
    // dV[j0:j1] = dropout(P)[j0:T, j0:j1]ᵀ · dO[j0:T]
    gemm({.m = j1 - j0,
          .n = s.HD,
          .k = T - j0,
          .transpose_a = true,
          .lda = T,
          .ldb = hd.ld_out,
          .ldc = hd.ld_qkv},
         P_used + j0 * T + j0, dO + j0 * hd.ld_out, dV + j0 * hd.ld_qkv);
  }
}

}  // namespace

std::uint64_t dropout_index(AttentionShape s, AttentionDropout d, std::int64_t bh, std::int64_t i,
                            std::int64_t j) {
  return math::dropout_element(bh, s.NH, d.head_offset, d.heads_total, s.T, i, j);
}

void attention_forward(AttentionShape s, const float* qkv, float* out, float* att,
                       AttentionDropout dropout) {
  const std::int64_t heads = s.B * s.NH;
#pragma omp parallel
  {
    // One query block of dropped probabilities per thread (only with dropout).
    std::vector<float> dropped(dropout.p > 0 ? static_cast<std::size_t>(kQueryBlock * s.T) : 0);
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < heads; ++bh)
      forward_head(s, dropout, bh, head(s, bh, qkv), out, att, dropped.data());
  }
}

void attention_backward(AttentionShape s, const float* dout, const float* qkv, const float* att,
                        float* dqkv, AttentionDropout dropout) {
  const std::int64_t heads = s.B * s.NH;
#pragma omp parallel
  {
    // One (T, T) scratch per thread for dP, turned into dS in place; one more for the
    // dropped probabilities (only with dropout).
    std::vector<float> dS(static_cast<std::size_t>(s.T * s.T));
    std::vector<float> dropped(dropout.p > 0 ? static_cast<std::size_t>(s.T * s.T) : 0);
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < heads; ++bh)
      backward_head(s, dropout, bh, head(s, bh, qkv), dout, att, dqkv, dS.data(), dropped.data());
  }
}

double attention_forward_flops(AttentionShape s) {
  double per_head = 0;
  for (std::int64_t i0 = 0; i0 < s.T; i0 += kQueryBlock) {
    const std::int64_t i1 = std::min(s.T, i0 + kQueryBlock);
    per_head += 2.0 * 2.0 * static_cast<double>((i1 - i0) * i1 * s.HD);
  }
  return per_head * static_cast<double>(s.B * s.NH);
}

}  // namespace tandem::kernels::cpu
