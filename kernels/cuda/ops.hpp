// The CUDA kernels of every Device op, as host functions that launch them on a stream.
// Same contracts as the CPU kernels in kernels/cpu/ (same shape structs, same
// accumulate-or-write rules, same element math from kernels/math/), with two differences:
// pointers are device pointers, and a float buffer is a `Floats` that says whether its
// elements are stored as fp32 or bf16. Kernels load either, compute in fp32 (sums of
// parameter gradients in double, as on the CPU) and store in the output's precision, so
// one compiled kernel serves every mix (bf16 activations with fp32 main gradients, …).
// Statistics saved for backward (mean, rstd, row max, sums, losses) are always fp32.
// Every launcher checks its launch (TANDEM_CUDA_CHECK_LAUNCH) and returns at once: the
// work runs in stream order. No kernel uses float atomics, so results repeat bitwise.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/fp8.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/router.hpp"
#include "kernels/math/adam.hpp"
#include "kernels/math/copy_columns.hpp"
#include "kernels/math/dropout.hpp"
#include "kernels/math/host_device.hpp"

namespace tandem::kernels::cuda {

enum class Precision : std::uint8_t { fp32, bf16, fp16 };

// A device buffer of float values stored as fp32, bf16 or fp16 (the raw 16-bit pattern).
struct Floats {
  void* data = nullptr;
  Precision precision = Precision::fp32;
};
struct ConstFloats {
  const void* data = nullptr;
  Precision precision = Precision::fp32;
  ConstFloats() = default;
  TANDEM_HOST_DEVICE ConstFloats(const void* d, Precision p) : data(d), precision(p) {}
  TANDEM_HOST_DEVICE ConstFloats(Floats f)  // NOLINT: implicit, read-only access is safe
      : data(f.data), precision(f.precision) {}
};

// Where kernels run: the stream, and the cuBLAS handle GEMMs use (bound to that stream by
// the launcher).
struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

// ---- elementwise (elementwise.cu) --------------------------------------------------------
void add(Context c, ConstFloats a, ConstFloats b, Floats out, std::int64_t n);  // out may be a or b
void scale(Context c, Floats x, std::int64_t n, float factor);
void fill(Context c, Floats x, std::int64_t n, float value);
void fill_int32(Context c, std::int32_t* x, std::int64_t n, std::int32_t value);
void convert(Context c, ConstFloats from, Floats to, std::int64_t n);
// Columns of every row from one matrix into another, or added (math::ColumnCopy).
void copy_columns(Context c, math::ColumnCopy copy, ConstFloats from,
                  Floats to);                                              // fp32 ↔ bf16 copy
void gelu_forward(Context c, ConstFloats in, Floats out, std::int64_t n);  // out may be in
// din = dout · gelu'(in), written; din may be dout.
void gelu_backward(Context c, ConstFloats dout, ConstFloats in, Floats din, std::int64_t n);
// out(rows, C) += bias(C)
void bias_add(Context c, Floats out, ConstFloats bias, std::int64_t rows, std::int64_t C);
// Megatron's fused bias-GeLU: out(rows, C) = gelu(in + bias(C)); out may be in.
void bias_gelu_forward(Context c, ConstFloats in, ConstFloats bias, Floats out, std::int64_t rows,
                       std::int64_t C);
// din = dout · gelu'(in + bias), written; din may be dout.
void bias_gelu_backward(Context c, ConstFloats dout, ConstFloats in, ConstFloats bias, Floats din,
                        std::int64_t rows, std::int64_t C);
// Megatron's hidden dropout (kernels/math/dropout.hpp): out = dropout(in); out may be in.
// Backward is the same call on the gradient.
void dropout(Context c, ConstFloats in, Floats out, std::int64_t n, math::HiddenDropoutMask m);
// Megatron's bias-dropout-add: out(rows, C) = residual + dropout(in + bias(C)); bias may be
// null (its data pointer); out may be in or residual.
void bias_dropout_add(Context c, ConstFloats in, ConstFloats bias, ConstFloats residual, Floats out,
                      std::int64_t rows, std::int64_t C, math::HiddenDropoutMask m);

// ---- column sums (column_sums.cu): parameter gradients, summed in double, rows in order --
// dbias(C) += Σ_rows dout(rows, C)
void bias_backward(Context c, Floats dbias, ConstFloats dout, std::int64_t rows, std::int64_t C);
// dtable(token - begin, :) += dout(r, :) for every row r whose token is in the shard.
void embedding_backward(Context c, const std::int32_t* tokens,  // (rows)
                        ConstFloats dout,                       // (rows, C)
                        cpu::VocabShard shard, std::int64_t rows, std::int64_t C,
                        Floats dtable);  // (local_vocab, C)
// out(rows, C) = table(token - begin, :) for tokens in the shard, else 0.
void embedding_forward(Context c, const std::int32_t* tokens, ConstFloats table,
                       cpu::VocabShard shard, std::int64_t rows, std::int64_t C, Floats out);

// ---- layer norm (layer_norm.cu) ---------------------------------------------------------
void layer_norm_forward(Context c, cpu::LayerNormShape s, ConstFloats in,  // (rows, C)
                        ConstFloats gamma, ConstFloats beta,               // (C)
                        Floats out,                                        // (rows, C)
                        float* mean, float* rstd,                          // (rows)
                        float epsilon);
// din written (must not alias dout or in); dgamma, dbeta accumulated.
void layer_norm_backward(Context c, cpu::LayerNormShape s, ConstFloats dout, ConstFloats in,
                         ConstFloats gamma, const float* mean, const float* rstd, Floats din,
                         Floats dgamma, Floats dbeta);

// ---- cross entropy (cross_entropy.cu), the vocab-parallel phases of cpu/cross_entropy.hpp --
void cross_entropy_max(Context c, cpu::CrossEntropyShape s, ConstFloats logits, float* row_max);
void cross_entropy_sums(Context c, cpu::CrossEntropyShape s, ConstFloats logits,
                        const std::int32_t* targets, const float* row_max, float* sum_exp,
                        float* target_logit);
void cross_entropy_loss(Context c, std::int64_t rows, const float* row_max, const float* sum_exp,
                        const float* target_logit, float* loss);
// dlogits may be logits (in place).
void cross_entropy_backward(Context c, cpu::CrossEntropyShape s, ConstFloats logits,
                            const std::int32_t* targets, const float* row_max, const float* sum_exp,
                            const float* dloss, Floats dlogits);

// ---- optimizer (adam.cu) ----------------------------------------------------------------
// Blocks of the first pass of sum_squares: its scratch holds this many doubles.
inline constexpr int kSumSquaresBlocks = 256;
// out(0) += Σ x², in double over a fixed split (the same result every run).
void sum_squares(Context c, ConstFloats x, std::int64_t n, float* out, double* scratch);
// x (fp32, n) *= inv_scale; *found = 1 where an element was an inf or a NaN.
void check_finite_and_unscale(Context c, float* x, std::int64_t n, float inv_scale, float* found);
void adamw(Context c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
           std::int64_t n, const math::AdamStep& step);

// ---- FP8 (fp8.cu), the contracts of cpu/fp8.hpp ---------------------------------------------
struct Fp8Quantize {
  ConstFloats input;  // (rows, cols)
  std::int64_t rows = 0, cols = 0;
  math::Fp8Format format = math::Fp8Format::e4m3;
  cpu::Fp8Blocks blocks{};
  math::Fp8ScaleRule rule = math::Fp8ScaleRule::current;
  const float* scale = nullptr;  // (1) device, the given scale of Fp8ScaleRule::given
};
// codes (rows·cols) and scale_inv (cpu::fp8_scale_grid) written; amax (device, nullable) the
// tensor's; scratch holds one float per scale block.
void fp8_quantize(Context c, const Fp8Quantize& q, std::uint8_t* codes, float* scale_inv,
                  float* amax, float* scratch);
// out (rows, cols) = decode(codes) · their block's scale_inv.
void fp8_dequantize(Context c, const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                    std::int64_t cols, math::Fp8Format format, cpu::Fp8Blocks blocks, Floats out);
// out (cols, rows) = the transpose of codes (rows, cols), byte for byte: the operand layout
// cuBLASLt's FP8 GEMM takes (fp8_lt_plan.hpp), made from a per-tensor-scaled tensor.
void fp8_transpose(Context c, const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                   std::uint8_t* out);
// Delayed scaling of n ≤ 64 tensors: each amax into its column of the (length, stride)
// history (row 0 the newest; `history` points at the first tensor's column, so a caller
// updates more than 64 tensors 64 columns at a time) and zeroed, each scale from its
// column; bit t of e5m2_mask set: tensor t is E5M2 (else E4M3).
void fp8_update_scale(Context c, float* history, std::int64_t length, std::int64_t stride,
                      std::int64_t n, float* scale, float* amax, std::uint64_t e5m2_mask,
                      bool use_max, int margin);

// amax (device, 1) raised to max |x| over n elements (a NaN kept); scratch holds
// fp8_amax_scratch(n) floats (one per chunk of kAmaxChunk elements).
constexpr std::int64_t kAmaxChunk = 1 << 16;
std::int64_t fp8_amax_scratch(std::int64_t n);
void fp8_amax(Context c, ConstFloats x, std::int64_t n, float* amax, float* scratch);
// n ≤ 64 tensors: with amax, each scale from its amax (current scaling); each scale_inv = 1 /
// scale. Bit t of e5m2_mask set: tensor t is E5M2.
void fp8_compute_scale(Context c, const float* amax, float* scale, float* scale_inv, std::int64_t n,
                       std::uint64_t e5m2_mask);

// ---- GEMM (gemm.cpp, cuBLAS) -------------------------------------------------------------
// C = α·op(A)·op(B) + β·C, row-major, as cpu::gemm. A and B share a precision; C is fp32 or
// that precision. Accumulation is fp32 either way (bf16 tensor cores for bf16; plain fp32,
// no TF32, for fp32).
void gemm(Context c, const cpu::GemmParams& p, ConstFloats a, ConstFloats b, Floats out);
void gemm_strided_batched(Context c, const cpu::GemmParams& p, const cpu::GemmBatch& batch,
                          ConstFloats a, ConstFloats b, Floats out);

// ---- attention (attention.cu): cuBLAS batched GEMMs per batch row + softmax kernels -------
// Sequence-first as cpu/attention.hpp: qkv (T, B, 3, NH, HD) → out (T, B, NH, HD); probs
// (B, NH, T, T), zero above the diagonal.
// All share one precision. With dropout (p > 0), `dropped` holds B·NH·T·T elements for
// the dropped probabilities (probs keeps them before dropout, for backward).
void attention_forward(Context c, cpu::AttentionShape s, ConstFloats qkv, Floats out, Floats probs,
                       cpu::AttentionDropout dropout = {}, Floats dropped = {});
// dqkv written. scratch holds B·NH·T·T elements of the probs' precision (dP, then dS);
// `dropped` as many again with dropout.
void attention_backward(Context c, cpu::AttentionShape s, ConstFloats dout, ConstFloats qkv,
                        ConstFloats probs, Floats dqkv, Floats scratch,
                        cpu::AttentionDropout dropout = {}, Floats dropped = {});

// ---- Llama-style ops (llama.cu), the contracts of cpu/{rms_norm,swiglu,rope,flash_attention}.hpp
void rms_norm_forward(Context c, cpu::RmsNormShape s, ConstFloats in, ConstFloats gamma, Floats out,
                      float* rstd, float epsilon);
// din written; dgamma accumulated.
void rms_norm_backward(Context c, cpu::RmsNormShape s, ConstFloats dout, ConstFloats in,
                       ConstFloats gamma, const float* rstd, Floats din, Floats dgamma);
void swiglu_forward(Context c, ConstFloats in, Floats out, std::int64_t rows, std::int64_t F);
void swiglu_backward(Context c, ConstFloats dout, ConstFloats in, Floats din, std::int64_t rows,
                     std::int64_t F);
void rope_apply(Context c, cpu::RopeShape s, Floats x, bool inverse);  // in place
// head_dim ≤ 256. lse is fp32.
void flash_attention_forward(Context c, cpu::FlashShape s, ConstFloats q_source,
                             ConstFloats kv_source, Floats out, float* lse);
void flash_attention_backward(Context c, cpu::FlashShape s, ConstFloats dout, ConstFloats q_source,
                              ConstFloats kv_source, ConstFloats out, const float* lse,
                              Floats grad_q_source, Floats grad_kv_source);

// ---- mixture of experts (moe.cu), the contracts of cpu/{router,moe}.hpp --------------------
// The most experts one token goes to on the GPU (the router keeps the k gate logits of a
// token in registers).
inline constexpr std::int64_t kRouterMaxTopK = 16;
// The most expert groups of group-limited routing on the GPU (their scores in registers).
inline constexpr std::int64_t kRouterMaxGroups = 64;
// probs (T, E), top (T, k) and gates (T, k) written, one thread per token; counts (E, device
// int64) written: the routed copies per expert; expert_bias (E, device) or null. With
// aux_top (T, k, device scratch) not null, aux_counts (E, device) get the plain top-k's
// copies per expert (the aux loss's). Throws std::invalid_argument unless tokens ≥ 0,
// 1 ≤ top_k ≤ min(experts, kRouterMaxTopK) and num_groups ≤ kRouterMaxGroups.
void router_top_k(Context c, cpu::RouterShape s, ConstFloats logits, float* probs,
                  std::int32_t* top, float* gates, std::int64_t* counts,
                  const float* expert_bias = nullptr, std::int32_t* aux_top = nullptr,
                  std::int64_t* aux_counts = nullptr);
// Token dropping (cpu::moe_drop_tokens' contract): dispatch_top / dispatch_gates
// (T, s.width()) and counts (E, device int64) written; scratch: E int64 (the padding's
// filler bounds). A copy's fate is math::moe_copy_kept, one thread per copy (O((T·k)²)
// work in all).
void moe_drop_tokens(Context c, cpu::TokenDropShape s, const std::int32_t* top, const float* gates,
                     std::int32_t* dispatch_top, float* dispatch_gates, std::int64_t* counts,
                     std::int64_t* scratch);
// dlogits (T, E) written; aux_grad (E, device memory) or null.
void router_backward(Context c, cpu::RouterShape s, const float* probs, const std::int32_t* top,
                     const float* gates, const float* grad_gates, const float* aux_grad,
                     Floats dlogits);
// device[0, n) = host[0, n), in stream order, through kernel parameters (captured at
// launch): `host` may be freed when this returns, and the host does not wait. For a few
// hundred values (the router's aux_grad); n/256 launches.
void upload_by_launch(Context c, const float* host, std::int64_t n, float* device);
// Scratch of moe_permute, in int64 values: counts (E), offsets (E + 1), next (E).
inline std::int64_t moe_permute_scratch(std::int64_t experts) {
  return 3 * experts + 1;
}
// permuted (R, H), source_of_row (R) and row_of_copy (T·k) written (R = permuted_rows(s);
// −1 top entries are dropped slots); a top entry outside [−1, experts) traps the kernel
// (the stream's next sync fails).
void moe_permute(Context c, cpu::MoeShape s, ConstFloats x, const std::int32_t* top,
                 Floats permuted, std::int64_t* source_of_row, std::int64_t* row_of_copy,
                 std::int64_t* scratch);
// dx (T, H) written. Row maps outside [0, T·k) trap, as in the ops below.
void moe_permute_backward(Context c, cpu::MoeShape s, ConstFloats dpermuted,
                          const std::int64_t* row_of_copy, Floats dx);
// out (T, H) written; gates (T, k) fp32.
void moe_unpermute(Context c, cpu::MoeShape s, ConstFloats y, const float* gates,
                   const std::int64_t* row_of_copy, Floats out);
// dy (T·k, H) and dgates (T, k, fp32) written.
void moe_unpermute_backward(Context c, cpu::MoeShape s, ConstFloats dout, ConstFloats y,
                            const float* gates, const std::int64_t* source_of_row,
                            const std::int64_t* row_of_copy, Floats dy, float* dgates);

}  // namespace tandem::kernels::cuda
