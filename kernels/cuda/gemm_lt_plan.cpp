// plan_gemm_lt: the rules of gemm_lt_plan.hpp, and the layouts of the column-major call.
#include "kernels/cuda/gemm_lt_plan.hpp"

#include <utility>

#include "kernels/cuda/fp8_lt_plan.hpp"

namespace tandem::kernels::cuda {

GemmLtPlan plan_gemm_lt(const GemmLtProblem& p) {
  GemmLtPlan plan;
  plan.rows = p.n;
  plan.cols = p.m;
  plan.depth = p.k;
  // tandem's B held (K, N) row-major is column-major (N × K), used as is; held (N, K) it is
  // (K × N), used transposed. Likewise A: (M, K) row-major is (K × M), as is; (K, M) is
  // (M × K), transposed.
  plan.op_first = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  plan.first_rows = p.transpose_b ? p.k : p.n;
  plan.first_cols = p.transpose_b ? p.n : p.k;
  plan.op_second = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  plan.second_rows = p.transpose_a ? p.m : p.k;
  plan.second_cols = p.transpose_a ? p.k : p.m;
  plan.operand_type = cuda_data_type(p.operands);
  plan.out_type = cuda_data_type(p.out);
  plan.epilogue = p.bias        ? CUBLASLT_EPILOGUE_BIAS
                  : p.bias_grad ? CUBLASLT_EPILOGUE_BGRADB
                                : CUBLASLT_EPILOGUE_DEFAULT;
  auto refuse = [&](std::string why) {
    plan.unsupported = std::move(why);
    return plan;
  };
  if (p.operands == Precision::fp32)
    return refuse("fp32 operands run cuBLAS's true-fp32 GEMM and the separate bias kernels");
  if (p.bias && p.bias_grad) return refuse("one epilogue per GEMM: a bias or a bias gradient");
  if (p.bias && p.bias_precision != p.out)
    return refuse("cuBLASLt's bias vector is in C's type; this bias is not");
  if (p.bias_grad && !p.transpose_a)
    return refuse("the bias gradient is read off A held (K, M) (transpose_a)");
  if (!p.aligned) return refuse("an operand's, C's or the bias's address is not 16-byte aligned");
  if (std::string why = lt_dimension_rule(p.m, p.n, p.k, 1); !why.empty()) return refuse(why);
  return plan;
}

}  // namespace tandem::kernels::cuda
