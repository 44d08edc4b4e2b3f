// Single-precision GEMM on row-major matrices, the bulk of a GPT step's FLOPs:
//   C(M, N) = alpha · op(A) · op(B) + beta · C,
// op(X) = X or Xᵀ. With beta = 1 the product accumulates into C, which is how weight
// gradients accumulate over microbatches (dW += Xᵀ·dY). A strided-batched variant runs
// many independent GEMMs (attention's per-head products) one per thread.
// Backed by OpenBLAS (cblas_sgemm) when the build found it, else by Eigen; see README.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// Sizes and options of one GEMM. Leading dimensions are in elements (the distance
// between consecutive rows as stored); 0 means packed (the stored row length).
//   A is (M, K), or stored (K, M) when transpose_a;  B is (K, N), or stored (N, K) when
//   transpose_b;  C is (M, N).
// Example, a linear layer with weight W (N, K) as Megatron and llm.c store it:
//   forward  Y = X·Wᵀ:   {.m = rows, .n = N, .k = K, .transpose_b = true}, X, W, Y
//   backward dX = dY·W:  {.m = rows, .n = K, .k = N}, dY, W, dX
//   backward dW += dYᵀ·X: {.m = N, .n = K, .k = rows, .transpose_a = true, .beta = 1}, dY, X, dW
struct GemmParams {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1;
  float beta = 0;  // 0: C is overwritten and need not be initialised (NaN in C is ignored)
  std::int64_t lda = 0;
  std::int64_t ldb = 0;
  std::int64_t ldc = 0;
};

// Uses all kernel threads (num_threads()); runs on one thread inside an OpenMP
// parallel region, so it can be called per task from a parallel loop.
void gemm(const GemmParams& p, const float* a, const float* b, float* c);

// `count` GEMMs of the same shape; GEMM i reads a + i·stride_a, b + i·stride_b and writes
// c + i·stride_c (strides in elements). Spread over threads when count allows it.
struct GemmBatch {
  std::int64_t count = 1;
  std::int64_t stride_a = 0;
  std::int64_t stride_b = 0;
  std::int64_t stride_c = 0;
};
void gemm_strided_batched(const GemmParams& p, const GemmBatch& batch, const float* a,
                          const float* b, float* c);

// 2·M·N·K, the FLOPs of one GEMM (for benchmarks and the cost model).
inline double gemm_flops(const GemmParams& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

}  // namespace tandem::kernels::cpu
