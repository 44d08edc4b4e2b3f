// GEMMs through cuBLAS (cublasGemmStridedBatchedEx, opened by cublas_library) for row-major
// tensors.
// cuBLAS is column-major, and a row-major (R, C) matrix is the column-major (C, R) one, so
// C = op(A)·op(B) row-major is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ column-major: the operands
// swap and so do M and N, while each operand keeps its transpose flag.
// Precision: A, B bf16 (or fp16) → 16-bit tensor cores with fp32 accumulation (C 16-bit, or fp32
// for the weight gradients that accumulate into fp32 main grads with β = 1); A, B fp32 →
// CUBLAS_COMPUTE_32F with the handle in CUBLAS_DEFAULT_MATH: true fp32, no TF32.
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cublas_library.hpp"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::cuda {
namespace {

cudaDataType_t data_type(Precision p) {
  return p == Precision::bf16 ? CUDA_R_16BF : p == Precision::fp16 ? CUDA_R_16F : CUDA_R_32F;
}

// Row-major leading dimensions (0 = packed) of the stored A, B and C.
struct Leading {
  std::int64_t a, b, c;
};

Leading leading(const cpu::GemmParams& p) {
  return {p.lda ? p.lda : (p.transpose_a ? p.m : p.k), p.ldb ? p.ldb : (p.transpose_b ? p.k : p.n),
          p.ldc ? p.ldc : p.n};
}

int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > 0x7fffffff)
    throw std::invalid_argument(std::string("cuda gemm: ") + what + " = " + std::to_string(v) +
                                " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

void check_precisions(ConstFloats a, ConstFloats b, Floats out) {
  if (a.precision != b.precision)
    throw std::invalid_argument("cuda gemm: A and B must share a precision (fp32, bf16 or fp16)");
  if (a.precision == Precision::fp32 && out.precision != Precision::fp32)
    throw std::invalid_argument("cuda gemm: fp32 A and B need an fp32 C");
}

cublasOperation_t op(bool transpose) {
  return transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

}  // namespace

void gemm(Context c, const cpu::GemmParams& p, ConstFloats a, ConstFloats b, Floats out) {
  gemm_strided_batched(c, p, {}, a, b, out);
}

void gemm_strided_batched(Context c, const cpu::GemmParams& p, const cpu::GemmBatch& batch,
                          ConstFloats a, ConstFloats b, Floats out) {
  check_precisions(a, b, out);
  if (p.m == 0 || p.n == 0 || batch.count == 0) return;
  const Leading ld = leading(p);
  TANDEM_CUBLAS_CHECK(cublas().set_stream(c.blas, c.stream));
  const float alpha = p.alpha, beta = p.beta;
  // Column-major: (N × M) = op(B)ᵀ (N × K) · op(A)ᵀ (K × M).
  TANDEM_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(
      c.blas, op(p.transpose_b), op(p.transpose_a), as_int(p.n, "N"), as_int(p.m, "M"),
      as_int(p.k, "K"), &alpha, b.data, data_type(b.precision), as_int(ld.b, "ldb"), batch.stride_b,
      a.data, data_type(a.precision), as_int(ld.a, "lda"), batch.stride_a, &beta, out.data,
      data_type(out.precision), as_int(ld.c, "ldc"), batch.stride_c,
      as_int(batch.count, "batch count"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tandem::kernels::cuda
