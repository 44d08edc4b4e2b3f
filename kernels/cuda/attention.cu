// Causal attention on the GPU, llm.c's way: cuBLAS batched GEMMs over the heads of one
// batch row at a time (Q·Kᵀ, P·V and their backward products, reading Q, K, V straight out
// of the fused qkv through leading dimensions, no permutation), and warp-per-row softmax
// kernels that apply the causal mask and the 1/sqrt(HD) scale. Element math (exp_approx,
// softmax_input_grad) is kernels/math/, as in the CPU kernel. The GEMMs compute full
// (T, T) score matrices; the masked half is zeroed by the softmax kernels.
// Activations are sequence-first (Megatron's [s, b, h]): qkv (T, B, 3, NH, HD), out
// (T, B, NH, HD). Offsets, C = NH·HD, for batch row b: Q = qkv + b·3C (head h at + h·HD,
// ld B·3C), K = Q + C, V = Q + 2C;  O = out + b·C (ld B·C);  P = probs + b·NH·T·T (head
// stride T·T).
#include <cfloat>
#include <cmath>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/dropout.hpp"
#include "kernels/math/exp.hpp"
#include "kernels/math/softmax.hpp"

namespace tandem::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

// Rows of (B·NH·T, T) scores: row i of its head keeps columns j ≤ i, scaled, softmaxed.
__global__ void softmax_forward_kernel(Floats att, std::int64_t rows, std::int64_t T, float scale) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const std::int64_t i = row % T, base = row * T;
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j <= i; j += 32) m = fmaxf(m, load(att, base + j) * scale);
  m = warp_max(m);
  float sum = 0;
  for (std::int64_t j = threadIdx.x; j <= i; j += 32)
    sum += math::exp_approx(load(att, base + j) * scale - m);
  const float inv = 1.0f / warp_sum(sum);
  for (std::int64_t j = threadIdx.x; j < T; j += 32) {
    const float p = j <= i ? math::exp_approx(load(att, base + j) * scale - m) * inv : 0.0f;
    store(att, base + j, p);
  }
}

// dS = P ⊙ (dP − rowsum(P ⊙ dP))·scale in place over dP; zero above the diagonal.
__global__ void softmax_backward_kernel(ConstFloats probs, Floats dp, std::int64_t rows,
                                        std::int64_t T, float scale) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const std::int64_t i = row % T, base = row * T;
  float dot = 0;
  for (std::int64_t j = threadIdx.x; j <= i; j += 32)
    dot += load(probs, base + j) * load(dp, base + j);
  dot = warp_sum(dot);
  for (std::int64_t j = threadIdx.x; j < T; j += 32) {
    const float ds =
        j <= i ? math::softmax_input_grad(load(probs, base + j), load(dp, base + j), dot) * scale
               : 0.0f;
    store(dp, base + j, ds);
  }
}

// dst = dropout(src) over rows of (B·NH·T, T) (kernels/math/dropout.hpp); in place when
// dst is src. Columns above the diagonal stay as src has them (zero).
__global__ void dropout_kernel(ConstFloats src, Floats dst, std::int64_t rows,
                               cpu::AttentionShape s, cpu::AttentionDropout d) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const std::int64_t T = s.T, i = row % T, bh = row / T;
  const std::uint64_t first =
      math::dropout_element(bh, s.NH, d.head_offset, d.heads_total, T, i, 0);
  for (std::int64_t j = threadIdx.x; j < T; j += 32) {
    const float x = load(src, row * T + j);
    store(dst, row * T + j, j <= i ? math::dropout_apply(x, d.stream, first + j, d.p) : x);
  }
}

void dropout(Context c, ConstFloats src, Floats dst, cpu::AttentionShape s,
             cpu::AttentionDropout d) {
  const std::int64_t rows = s.B * s.NH * s.T;
  dropout_kernel<<<static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                   dim3(32, kRowsPerBlock), 0, c.stream>>>(src, dst, rows, s, d);
  TANDEM_CUDA_CHECK_LAUNCH();
}

std::int64_t bytes_of(Precision p) {
  return p == Precision::fp32 ? 4 : 2;
}

// The buffer `elements` elements into f.
ConstFloats at(ConstFloats f, std::int64_t elements) {
  return {static_cast<const char*>(f.data) + elements * bytes_of(f.precision), f.precision};
}
Floats at(Floats f, std::int64_t elements) {
  return {static_cast<char*>(f.data) + elements * bytes_of(f.precision), f.precision};
}

unsigned int row_blocks(std::int64_t rows) {
  return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

void check_same(Precision a, Precision b) {
  if (a != b)
    throw std::invalid_argument(
        "cuda attention: qkv, output, probs and gradients share one precision");
}

}  // namespace

void attention_forward(Context c, cpu::AttentionShape s, ConstFloats qkv, Floats out, Floats probs,
                       cpu::AttentionDropout drop, Floats dropped) {
  check_same(qkv.precision, out.precision);
  check_same(qkv.precision, probs.precision);
  if (drop.p > 0) check_same(qkv.precision, dropped.precision);
  const std::int64_t C = s.NH * s.HD, T = s.T;
  const std::int64_t ld_qkv = s.B * 3 * C, ld_out = s.B * C;  // between consecutive positions
  if (s.B * T * C == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const cpu::GemmBatch heads_qk{
      .count = s.NH, .stride_a = s.HD, .stride_b = s.HD, .stride_c = T * T};
  const cpu::GemmBatch heads_pv{
      .count = s.NH, .stride_a = T * T, .stride_b = s.HD, .stride_c = s.HD};
  for (std::int64_t b = 0; b < s.B; ++b) {
    const ConstFloats q = at(qkv, b * 3 * C);
    const Floats p = at(probs, b * s.NH * T * T);
    // S = Q·Kᵀ (unscaled; the softmax applies the scale)
    gemm_strided_batched(
        c, {.m = T, .n = T, .k = s.HD, .transpose_b = true, .lda = ld_qkv, .ldb = ld_qkv, .ldc = T},
        heads_qk, q, at(q, C), p);
  }
  const std::int64_t rows = s.B * s.NH * T;
  softmax_forward_kernel<<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, c.stream>>>(probs, rows, T,
                                                                                     scale);
  TANDEM_CUDA_CHECK_LAUNCH();
  // O = dropout(P)·V; probs keeps P for backward.
  ConstFloats p_used = probs;
  if (drop.p > 0) {
    dropout(c, probs, dropped, s, drop);
    p_used = dropped;
  }
  for (std::int64_t b = 0; b < s.B; ++b) {
    gemm_strided_batched(c, {.m = T, .n = s.HD, .k = T, .lda = T, .ldb = ld_qkv, .ldc = ld_out},
                         heads_pv, at(p_used, b * s.NH * T * T), at(qkv, b * 3 * C + 2 * C),
                         at(out, b * C));
  }
}

void attention_backward(Context c, cpu::AttentionShape s, ConstFloats dout, ConstFloats qkv,
                        ConstFloats probs, Floats dqkv, Floats scratch, cpu::AttentionDropout drop,
                        Floats dropped) {
  check_same(qkv.precision, dout.precision);
  check_same(qkv.precision, probs.precision);
  check_same(qkv.precision, dqkv.precision);
  check_same(qkv.precision, scratch.precision);
  const std::int64_t C = s.NH * s.HD, T = s.T;
  const std::int64_t ld_qkv = s.B * 3 * C, ld_out = s.B * C;  // between consecutive positions
  if (s.B * T * C == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  // dP = dO·Vᵀ
  for (std::int64_t b = 0; b < s.B; ++b) {
    gemm_strided_batched(
        c, {.m = T, .n = T, .k = s.HD, .transpose_b = true, .lda = ld_out, .ldb = ld_qkv, .ldc = T},
        {.count = s.NH, .stride_a = s.HD, .stride_b = s.HD, .stride_c = T * T}, at(dout, b * C),
        at(qkv, b * 3 * C + 2 * C), at(scratch, b * s.NH * T * T));
  }
  const std::int64_t rows = s.B * s.NH * T;
  // Through dropout: dP of the dropped entries is zero, of the kept ones scaled; dV reads
  // the dropped probabilities, regenerated from the stream.
  ConstFloats p_for_dv = probs;
  if (drop.p > 0) {
    check_same(qkv.precision, dropped.precision);
    dropout(c, scratch, scratch, s, drop);
    dropout(c, probs, dropped, s, drop);
    p_for_dv = dropped;
  }
  softmax_backward_kernel<<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, c.stream>>>(
      probs, scratch, rows, T, scale);
  TANDEM_CUDA_CHECK_LAUNCH();
  const cpu::GemmBatch from_tt{
      .count = s.NH, .stride_a = T * T, .stride_b = s.HD, .stride_c = s.HD};
  for (std::int64_t b = 0; b < s.B; ++b) {
    const ConstFloats ds = at(ConstFloats(scratch), b * s.NH * T * T);
    const ConstFloats p = at(p_for_dv, b * s.NH * T * T);
    const ConstFloats q = at(qkv, b * 3 * C);
    const Floats dq = at(dqkv, b * 3 * C);
    // dQ = dS·K
    gemm_strided_batched(c, {.m = T, .n = s.HD, .k = T, .lda = T, .ldb = ld_qkv, .ldc = ld_qkv},
                         from_tt, ds, at(q, C), dq);
    // dK = dSᵀ·Q
    gemm_strided_batched(
        c, {.m = T, .n = s.HD, .k = T, .transpose_a = true, .lda = T, .ldb = ld_qkv, .ldc = ld_qkv},
        from_tt, ds, q, at(dq, C));
    // dV = dropout(P)ᵀ·dO
    gemm_strided_batched(
        c, {.m = T, .n = s.HD, .k = T, .transpose_a = true, .lda = T, .ldb = ld_out, .ldc = ld_qkv},
        from_tt, p, at(dout, b * C), at(dq, 2 * C));
  }
}

}  // namespace tandem::kernels::cuda
