// How a 16-bit GEMM with an epilogue (GemmArgs::bias, ::bias_grad: what Transformer Engine's
// Linear asks of cuBLASLt) runs as one cuBLASLt call, or why it cannot — decided on the
// host, so it is tested without a GPU (as fp8_lt_plan.hpp, whose column-major mapping it
// shares: cuBLASLt's first operand is tandem's B, its second tandem's A, D (N × M)).
//
//   bias       CUBLASLT_EPILOGUE_BIAS: D's rows (N, tandem's columns) each get their bias
//              value; the vector is in D's type, so the bias must be C's dtype
//   bias_grad  CUBLASLT_EPILOGUE_BGRADB: the sums of cuBLASLt's second operand (tandem's A,
//              held (K, M)) over K, M values written in D's type (the binding adds them
//              into the fp32 bias gradient)
//
// Only bf16 or fp16 A and B take this path (fp32 GEMMs stay cuBLAS's true-fp32 ones, with
// the separate bias kernels); one epilogue per GEMM; M, N, K positive and within an int
// (fp8_lt_plan.hpp lt_dimension_rule);
// addresses 16-byte aligned.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::cuda {

struct GemmLtProblem {
  std::int64_t m = 0, n = 0, k = 0;  // C (M, N) = op(A) (M, K) · op(B) (K, N), row-major
  bool transpose_a = false;          // A held (K, M)
  bool transpose_b = false;          // B held (N, K)
  Precision operands = Precision::bf16;
  Precision out = Precision::bf16;  // C and D
  bool bias = false;
  Precision bias_precision = Precision::bf16;
  bool bias_grad = false;
  bool aligned = true;
};

// The column-major call D (rows × cols) = op(first) · op(second): first held (first_rows ×
// first_cols, leading dimension first_rows), second likewise; D (rows × cols, leading
// dimension rows).
struct GemmLtPlan {
  std::string unsupported;                     // empty: cuBLASLt runs it; else the rule it breaks
  std::int64_t rows = 0, cols = 0, depth = 0;  // N, M, K
  cublasOperation_t op_first = CUBLAS_OP_N, op_second = CUBLAS_OP_N;
  std::int64_t first_rows = 0, first_cols = 0, second_rows = 0, second_cols = 0;
  cudaDataType_t operand_type = CUDA_R_16BF;
  cudaDataType_t out_type = CUDA_R_16BF;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;

  bool runs() const { return unsupported.empty(); }
};

GemmLtPlan plan_gemm_lt(const GemmLtProblem& p);

}  // namespace tandem::kernels::cuda
