// GEMMs through cuBLASLt (cublaslt_library.hpp): FP8 GEMMs planned by fp8_lt_plan.hpp and
// 16-bit GEMMs with an epilogue planned by gemm_lt_plan.hpp.
//
// LtDescriptors holds the matmul and matrix-layout descriptors of one call (compute and
// scale in fp32; C and D one layout). Descriptors are host objects, built and read back
// without a GPU. For FP8: first operand transposed, second not, per-tensor scales as the
// A/B scale pointers (the inverse scales tandem's FP8 tensors hold: a code times its
// scale_inv is the value), split accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM 0: the
// products sum in fp32 as on the cpu binding, the precision Transformer Engine asks for its
// dgrad and wgrad; its fprop takes fast accumulation). For an epilogue: the plan's
// operations, the epilogue and its vector (bias, or bias gradient out).
//
// LtMatmul holds a cuBLASLt handle (creating one needs a GPU) and, per problem, the
// algorithm cuBLASLt's heuristic picked the first time (or that it offered none), so later
// calls ask nothing. A problem includes the alignment of its operands' addresses: the
// heuristic assumes 256-byte alignment unless told less (CUBLASLT_MATMUL_PREF_MIN_
// ALIGNMENT_*_BYTES default 256), and may then pick a kernel that fails on a tensor that
// starts 16 or 128 bytes into a bucket (an FP8 weight's codes in its parameter buffer).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "kernels/cuda/fp8_lt_plan.hpp"
#include "kernels/cuda/gemm_lt_plan.hpp"

namespace tandem::kernels::cuda {

class LtDescriptors {
 public:
  // Scale pointers are device pointers to one fp32 each (nullptr: 1).
  static LtDescriptors fp8(const Fp8LtPlan& plan, const float* scale_first,
                           const float* scale_second);
  // `vector`: the bias (BIAS) or the bias gradient's output (BGRADB), device memory.
  static LtDescriptors gemm(const GemmLtPlan& plan, const void* vector);
  ~LtDescriptors();
  LtDescriptors(LtDescriptors&& o) noexcept;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  LtDescriptors& operator=(LtDescriptors&&) = delete;

  cublasLtMatmulDesc_t matmul() const { return matmul_; }
  cublasLtMatrixLayout_t first() const { return first_; }
  cublasLtMatrixLayout_t second() const { return second_; }
  cublasLtMatrixLayout_t out() const { return out_; }

 private:
  LtDescriptors() = default;
  void release();

  cublasLtMatmulDesc_t matmul_ = nullptr;
  cublasLtMatrixLayout_t first_ = nullptr, second_ = nullptr, out_ = nullptr;
};

// The workspace an LtMatmul call may use: cuBLAS's guidance for Hopper (32 MiB).
inline constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

// The largest power of two up to 256 that divides the address (256 for nullptr): what a
// heuristic may assume of it.
std::uint32_t lt_alignment(const void* p);

// The alignments of a call's operands, as LtMatmul::Operands names them.
struct LtAlignments {
  std::uint32_t first = 256, second = 256, out = 256;
  auto operator<=>(const LtAlignments&) const = default;
};

// A heuristic preference: at most kLtWorkspaceBytes of workspace, and no more alignment
// than `a` of A (cuBLASLt's first operand), B (its second), C and D (the output, in place).
// Host only; the caller destroys it (cublaslt().preference_destroy).
cublasLtMatmulPreference_t lt_preference(const LtAlignments& a);

class LtMatmul {
 public:
  LtMatmul();  // throws CudaError without a GPU
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  struct Operands {
    const void* first = nullptr;   // tandem's B
    const void* second = nullptr;  // tandem's A
    void* out = nullptr;           // C and D, in place
  };
  static LtAlignments alignments(const Operands& x) {
    return {lt_alignment(x.first), lt_alignment(x.second), lt_alignment(x.out)};
  }

  // Whether cuBLASLt's heuristic offers an algorithm for the plan on this GPU, with C
  // accumulated (beta ≠ 0) or not, for operands aligned as `a`; asked once per problem
  // and remembered.
  bool has_algorithm(const Fp8LtPlan& plan, bool accumulate, const LtAlignments& a);
  bool has_algorithm(const GemmLtPlan& plan, bool accumulate, const LtAlignments& a);
  // D = alpha · op(first) · op(second) + beta · C on `stream` with the descriptors of a
  // plan that has an algorithm (else CudaError); `workspace` holds kLtWorkspaceBytes.
  void fp8_gemm(cudaStream_t stream, const Fp8LtPlan& plan, const Operands& x,
                const float* scale_first, const float* scale_second, float alpha, float beta,
                void* workspace);
  void gemm(cudaStream_t stream, const GemmLtPlan& plan, const Operands& x, const void* vector,
            float alpha, float beta, void* workspace);

  // A problem as the algorithm cache knows it: rows, cols, depth, first / second / out
  // types, first / second operations, epilogue, accumulate (beta ≠ 0), fast accumulation,
  // the operands' alignments.
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, int, int, int, int,
                         bool, bool, LtAlignments>;

 private:
  const std::optional<cublasLtMatmulAlgo_t>& algorithm(const Key& key, const LtDescriptors& d);
  void run(cudaStream_t stream, const Key& key, const LtDescriptors& d, const Operands& x,
           float alpha, float beta, void* workspace);

  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos_;
};

}  // namespace tandem::kernels::cuda
