// FP8 GEMMs through cuBLASLt (cublaslt_library.hpp), for a plan of fp8_lt_plan.hpp.
//
// LtFp8Descriptors builds the matmul and matrix-layout descriptors of one plan: compute in
// fp32, first operand transposed, per-tensor scales as the A/B scale pointers (the inverse
// scales tandem's FP8 tensors hold: a code times its scale_inv is the value), C and D one
// layout. Descriptors are host objects, so they are built and read back without a GPU.
// Split accumulation stays on (CUBLASLT_MATMUL_DESC_FAST_ACCUM 0): the products sum in
// fp32 as on the cpu binding, the precision Transformer Engine asks for its dgrad and wgrad
// (its fprop takes fast accumulation).
//
// LtMatmul holds a cuBLASLt handle (creating one needs a GPU) and, per problem shape and
// type, the algorithm cuBLASLt's heuristic picked the first time, so later calls ask nothing.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "kernels/cuda/fp8_lt_plan.hpp"

namespace tandem::kernels::cuda {

class LtFp8Descriptors {
 public:
  // Scale pointers are device pointers to one fp32 each (nullptr: 1).
  LtFp8Descriptors(const Fp8LtPlan& plan, const float* scale_first, const float* scale_second);
  ~LtFp8Descriptors();
  LtFp8Descriptors(const LtFp8Descriptors&) = delete;
  LtFp8Descriptors& operator=(const LtFp8Descriptors&) = delete;

  cublasLtMatmulDesc_t matmul() const { return matmul_; }
  cublasLtMatrixLayout_t first() const { return first_; }
  cublasLtMatrixLayout_t second() const { return second_; }
  cublasLtMatrixLayout_t out() const { return out_; }

 private:
  void release();

  cublasLtMatmulDesc_t matmul_ = nullptr;
  cublasLtMatrixLayout_t first_ = nullptr, second_ = nullptr, out_ = nullptr;
};

// The workspace an LtMatmul call may use: cuBLAS's guidance for Hopper (32 MiB).
inline constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

class LtMatmul {
 public:
  LtMatmul();  // throws CudaError without a GPU
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  struct Fp8Operands {
    const void* first = nullptr;  // codes, (rows × depth) held transposed
    const float* scale_first = nullptr;
    const void* second = nullptr;  // codes, (depth × cols)
    const float* scale_second = nullptr;
    void* out = nullptr;  // C and D, (rows × cols), in place
  };
  // Whether cuBLASLt's heuristic offers an algorithm for the plan on this GPU, with C
  // accumulated (beta ≠ 0) or not; asked once per problem and remembered.
  bool has_algorithm(const Fp8LtPlan& plan, bool accumulate);
  // D = alpha · scale_first · scale_second · first · second + beta · C on `stream`;
  // `workspace` holds kLtWorkspaceBytes. The plan must run and have an algorithm.
  void fp8_gemm(cudaStream_t stream, const Fp8LtPlan& plan, const Fp8Operands& x, float alpha,
                float beta, void* workspace);

  // How many distinct problems have asked the heuristic so far (one query each).
  std::size_t heuristic_queries() const { return algos_.size(); }

 private:
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, int, bool>;
  const std::optional<cublasLtMatmulAlgo_t>& algorithm(const Fp8LtPlan& plan, bool accumulate,
                                                       const LtFp8Descriptors& d);
  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos_;
};

}  // namespace tandem::kernels::cuda
