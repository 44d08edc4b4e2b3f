// How an FP8 GEMM of the cuda binding runs on the FP8 tensor cores through cuBLASLt, or
// why it cannot — decided on the host, before any launch, so it is tested without a GPU.
//
// tandem's matrices are row-major; cuBLASLt is column-major, where a row-major (R, C) matrix
// is the column-major (C, R) one. So C = op(A)·op(B) (M × N, row-major) runs as the column-
// major D (N × M) = op(B)ᵀ · op(A)ᵀ: cuBLASLt's first operand is tandem's B, its second is
// tandem's A. cuBLASLt's FP8 kernels take only the "TN" form (first operand transposed,
// second not): row-major, A held (M, K) and B held (N, K) — the forward pass of a linear
// layer, X · Wᵀ. An operand held the other way is transposed into scratch first (Transformer
// Engine keeps such a transposed copy for the backward; here it is made per GEMM).
//
// cuBLASLt's rules for FP8 (cublasLtMatmul, "FP8 data types"): compute capability 8.9 or
// later; not both operands E5M2; scale factors applied as A_SCALE/B_SCALE pointers; leading
// dimensions multiples of 16 bytes. tandem asks M, N and K to be multiples of 16 (every
// kernel tile divides them), and per-tensor scales: block scales (Transformer Engine's
// blockwise and MXFP8 recipes) keep the binding's decode-then-GEMM path.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/ops.hpp"
#include "kernels/math/fp8.hpp"

namespace tandem::kernels::cuda {

struct Fp8LtProblem {
  std::int64_t m = 0, n = 0, k = 0;  // C (M, N) = op(A) (M, K) · op(B) (K, N), row-major
  bool transpose_a = false;          // A held (K, M)
  bool transpose_b = false;          // B held (N, K)
  math::Fp8Format format_a = math::Fp8Format::e4m3, format_b = math::Fp8Format::e4m3;
  bool per_tensor_scales = true;  // both operands: one scale each
  Precision out = Precision::bf16;
  int compute_capability = 90;    // major · 10 + minor
  bool aligned = true;            // the codes' and C's addresses are multiples of 16 bytes
  bool split_accumulator = true;  // Fp8GemmArgs::split_accumulator
};

// The column-major call: D (rows × cols) = first (rows × depth, held transposed: depth ×
// rows, leading dimension depth) · second (depth × cols, leading dimension depth); D and C
// share one layout (rows × cols, leading dimension rows).
struct Fp8LtPlan {
  std::string unsupported;                     // empty: cuBLASLt runs it; else the rule it breaks
  bool transpose_a_first = false;              // A is held (K, M): transpose it into (M, K) scratch
  bool transpose_b_first = false;              // B is held (K, N): transpose it into (N, K) scratch
  std::int64_t rows = 0, cols = 0, depth = 0;  // N, M, K
  cudaDataType_t first_type = CUDA_R_8F_E4M3;  // B's format
  cudaDataType_t second_type = CUDA_R_8F_E4M3;  // A's format
  cudaDataType_t out_type = CUDA_R_16BF;
  bool fast_accumulate = false;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM: not split_accumulator

  bool runs() const { return unsupported.empty(); }
};

Fp8LtPlan plan_fp8_lt_gemm(const Fp8LtProblem& p);

cudaDataType_t cuda_data_type(math::Fp8Format f);
cudaDataType_t cuda_data_type(Precision p);

// The rule cuBLASLt's int dimensions put on M, N and K: each positive, a multiple of
// `multiple` and within an int; empty when all hold, else the first that breaks it.
std::string lt_dimension_rule(std::int64_t m, std::int64_t n, std::int64_t k,
                              std::int64_t multiple);

}  // namespace tandem::kernels::cuda
