// LtFp8Descriptors and LtMatmul: fp8_lt_plan's column-major call spelled in cuBLASLt's
// descriptors, and run.
#include "kernels/cuda/lt_matmul.hpp"

#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cublaslt_library.hpp"

namespace tandem::kernels::cuda {
namespace {

template <typename T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  TANDEM_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(d, attribute, &value, sizeof(value)));
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                              std::int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  TANDEM_CUBLAS_CHECK(cublaslt().matrix_layout_create(&l, type, static_cast<std::uint64_t>(rows),
                                                      static_cast<std::uint64_t>(cols), ld));
  return l;
}

}  // namespace

LtFp8Descriptors::LtFp8Descriptors(const Fp8LtPlan& plan, const float* scale_first,
                                   const float* scale_second) {
  if (!plan.runs())
    throw std::invalid_argument("cuBLASLt FP8 GEMM: the plan does not run: " + plan.unsupported);
  try {
    TANDEM_CUBLAS_CHECK(cublaslt().matmul_desc_create(&matmul_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(matmul_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(matmul_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    set(matmul_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, std::int8_t{0});
    if (scale_first) set(matmul_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_first);
    if (scale_second) set(matmul_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_second);
    // The first operand is op(first) = firstᵀ: held (depth × rows), column-major.
    first_ = layout(plan.first_type, plan.depth, plan.rows, plan.depth);
    second_ = layout(plan.second_type, plan.depth, plan.cols, plan.depth);
    out_ = layout(plan.out_type, plan.rows, plan.cols, plan.rows);
  } catch (...) {
    release();
    throw;
  }
}

LtFp8Descriptors::~LtFp8Descriptors() {
  release();
}

void LtFp8Descriptors::release() {
  const auto& lt = cublaslt();
  if (out_) lt.matrix_layout_destroy(out_);
  if (second_) lt.matrix_layout_destroy(second_);
  if (first_) lt.matrix_layout_destroy(first_);
  if (matmul_) lt.matmul_desc_destroy(matmul_);
  out_ = second_ = first_ = nullptr;
  matmul_ = nullptr;
}

LtMatmul::LtMatmul() {
  TANDEM_CUBLAS_CHECK(cublaslt().create(&handle_));
}

LtMatmul::~LtMatmul() {
  if (handle_) cublaslt().destroy(handle_);
}

const std::optional<cublasLtMatmulAlgo_t>& LtMatmul::algorithm(const Fp8LtPlan& plan,
                                                               bool accumulate,
                                                               const LtFp8Descriptors& d) {
  const Key key{plan.rows,        plan.cols,     plan.depth, plan.first_type,
                plan.second_type, plan.out_type, accumulate};
  auto found = algos_.find(key);
  if (found != algos_.end()) return found->second;
  cublasLtMatmulPreference_t preference = nullptr;
  TANDEM_CUBLAS_CHECK(cublaslt().preference_create(&preference));
  const std::uint64_t bytes = kLtWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t status = cublaslt().preference_set_attribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublaslt().algo_get_heuristic(handle_, d.matmul(), d.first(), d.second(), d.out(),
                                           d.out(), preference, 1, &result, &returned);
  cublaslt().preference_destroy(preference);
  // NOT_SUPPORTED: no kernel for this combination here; the caller decodes instead.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) TANDEM_CUBLAS_CHECK(status);
  const bool offered = status == CUBLAS_STATUS_SUCCESS && returned > 0;
  return algos_.emplace(key, offered ? std::optional(result.algo) : std::nullopt).first->second;
}

bool LtMatmul::has_algorithm(const Fp8LtPlan& plan, bool accumulate) {
  // The heuristic sees whether scales are given, not where they are.
  const auto* any = reinterpret_cast<const float*>(std::uintptr_t{256});
  const LtFp8Descriptors d(plan, any, any);
  return algorithm(plan, accumulate, d).has_value();
}

void LtMatmul::fp8_gemm(cudaStream_t stream, const Fp8LtPlan& plan, const Fp8Operands& x,
                        float alpha, float beta, void* workspace) {
  const LtFp8Descriptors d(plan, x.scale_first, x.scale_second);
  const auto& algo = algorithm(plan, beta != 0, d);
  if (!algo)
    throw CudaError("cuBLASLt offers no FP8 GEMM for rows " + std::to_string(plan.rows) +
                    ", cols " + std::to_string(plan.cols) + ", depth " +
                    std::to_string(plan.depth) + " on this GPU (ask has_algorithm first)");
  TANDEM_CUBLAS_CHECK(cublaslt().matmul(handle_, d.matmul(), &alpha, x.first, d.first(), x.second,
                                        d.second(), &beta, x.out, d.out(), x.out, d.out(), &*algo,
                                        workspace, kLtWorkspaceBytes, stream));
}

}  // namespace tandem::kernels::cuda
