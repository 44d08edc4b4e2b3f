// LtDescriptors and LtMatmul: the column-major calls of fp8_lt_plan and gemm_lt_plan spelled
// in cuBLASLt's descriptors, and run.
#include "kernels/cuda/lt_matmul.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cublaslt_library.hpp"

namespace tandem::kernels::cuda {
namespace {

template <typename T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  TANDEM_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(d, attribute, &value, sizeof(value)));
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols) {
  cublasLtMatrixLayout_t l = nullptr;
  TANDEM_CUBLAS_CHECK(cublaslt().matrix_layout_create(&l, type, static_cast<std::uint64_t>(rows),
                                                      static_cast<std::uint64_t>(cols), rows));
  return l;
}

}  // namespace

LtDescriptors LtDescriptors::fp8(const Fp8LtPlan& plan, const float* scale_first,
                                 const float* scale_second) {
  if (!plan.runs())
    throw std::invalid_argument("cuBLASLt FP8 GEMM: the plan does not run: " + plan.unsupported);
  LtDescriptors d;
  TANDEM_CUBLAS_CHECK(cublaslt().matmul_desc_create(&d.matmul_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(d.matmul_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(d.matmul_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(d.matmul_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(plan.fast_accumulate));
  if (scale_first) set(d.matmul_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_first);
  if (scale_second) set(d.matmul_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_second);
  // op(first) = firstᵀ: held (depth × rows), column-major.
  d.first_ = layout(plan.first_type, plan.depth, plan.rows);
  d.second_ = layout(plan.second_type, plan.depth, plan.cols);
  d.out_ = layout(plan.out_type, plan.rows, plan.cols);
  return d;
}

LtDescriptors LtDescriptors::gemm(const GemmLtPlan& plan, const void* vector) {
  if (!plan.runs())
    throw std::invalid_argument("cuBLASLt GEMM: the plan does not run: " + plan.unsupported);
  LtDescriptors d;
  TANDEM_CUBLAS_CHECK(cublaslt().matmul_desc_create(&d.matmul_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(d.matmul_, CUBLASLT_MATMUL_DESC_TRANSA, plan.op_first);
  set(d.matmul_, CUBLASLT_MATMUL_DESC_TRANSB, plan.op_second);
  set(d.matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(plan.epilogue));
  if (plan.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    set(d.matmul_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector);
  d.first_ = layout(plan.operand_type, plan.first_rows, plan.first_cols);
  d.second_ = layout(plan.operand_type, plan.second_rows, plan.second_cols);
  d.out_ = layout(plan.out_type, plan.rows, plan.cols);
  return d;
}

LtDescriptors::LtDescriptors(LtDescriptors&& o) noexcept
    : matmul_(std::exchange(o.matmul_, nullptr)),
      first_(std::exchange(o.first_, nullptr)),
      second_(std::exchange(o.second_, nullptr)),
      out_(std::exchange(o.out_, nullptr)) {}

LtDescriptors::~LtDescriptors() {
  release();
}

void LtDescriptors::release() {
  if (!matmul_ && !first_ && !second_ && !out_) return;
  const auto& lt = cublaslt();
  if (out_) lt.matrix_layout_destroy(out_);
  if (second_) lt.matrix_layout_destroy(second_);
  if (first_) lt.matrix_layout_destroy(first_);
  if (matmul_) lt.matmul_desc_destroy(matmul_);
  out_ = second_ = first_ = nullptr;
  matmul_ = nullptr;
}

std::uint32_t lt_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

cublasLtMatmulPreference_t lt_preference(const LtAlignments& a) {
  cublasLtMatmulPreference_t preference = nullptr;
  TANDEM_CUBLAS_CHECK(cublaslt().preference_create(&preference));
  auto set_preference = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    const cublasStatus_t status =
        cublaslt().preference_set_attribute(preference, attribute, &value, sizeof(value));
    if (status != CUBLAS_STATUS_SUCCESS) cublaslt().preference_destroy(preference);
    TANDEM_CUBLAS_CHECK(status);
  };
  set_preference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{kLtWorkspaceBytes});
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a.first);
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, a.second);
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, a.out);
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, a.out);
  return preference;
}

LtMatmul::LtMatmul() {
  TANDEM_CUBLAS_CHECK(cublaslt().create(&handle_));
}

LtMatmul::~LtMatmul() {
  if (handle_) cublaslt().destroy(handle_);
}

const std::optional<cublasLtMatmulAlgo_t>& LtMatmul::algorithm(const Key& key,
                                                               const LtDescriptors& d) {
  auto found = algos_.find(key);
  if (found != algos_.end()) return found->second;
  cublasLtMatmulPreference_t preference = lt_preference(std::get<LtAlignments>(key));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status =
      cublaslt().algo_get_heuristic(handle_, d.matmul(), d.first(), d.second(), d.out(), d.out(),
                                    preference, 1, &result, &returned);
  cublaslt().preference_destroy(preference);
  // NOT_SUPPORTED: no kernel for this combination here; the caller runs it another way.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) TANDEM_CUBLAS_CHECK(status);
  const bool offered = status == CUBLAS_STATUS_SUCCESS && returned > 0;
  return algos_.emplace(key, offered ? std::optional(result.algo) : std::nullopt).first->second;
}

namespace {

LtMatmul::Key fp8_key(const Fp8LtPlan& p, bool accumulate, const LtAlignments& a) {
  return {p.rows,
          p.cols,
          p.depth,
          p.first_type,
          p.second_type,
          p.out_type,
          CUBLAS_OP_T,
          CUBLAS_OP_N,
          CUBLASLT_EPILOGUE_DEFAULT,
          accumulate,
          p.fast_accumulate,
          a};
}

LtMatmul::Key gemm_key(const GemmLtPlan& p, bool accumulate, const LtAlignments& a) {
  return {p.rows,     p.cols,      p.depth,    p.operand_type, p.operand_type, p.out_type,
          p.op_first, p.op_second, p.epilogue, accumulate,     false,          a};
}

// Heuristics depend on whether a pointer is given and on its alignment, not on its value.
const auto* const kAligned = reinterpret_cast<const float*>(std::uintptr_t{256});

}  // namespace

bool LtMatmul::has_algorithm(const Fp8LtPlan& plan, bool accumulate, const LtAlignments& a) {
  return algorithm(fp8_key(plan, accumulate, a), LtDescriptors::fp8(plan, kAligned, kAligned))
      .has_value();
}

bool LtMatmul::has_algorithm(const GemmLtPlan& plan, bool accumulate, const LtAlignments& a) {
  return algorithm(gemm_key(plan, accumulate, a), LtDescriptors::gemm(plan, kAligned)).has_value();
}

void LtMatmul::run(cudaStream_t stream, const Key& key, const LtDescriptors& d, const Operands& x,
                   float alpha, float beta, void* workspace) {
  const auto& algo = algorithm(key, d);
  if (!algo)
    throw CudaError("cuBLASLt offers no algorithm for rows " + std::to_string(std::get<0>(key)) +
                    ", cols " + std::to_string(std::get<1>(key)) + ", depth " +
                    std::to_string(std::get<2>(key)) + " on this GPU (ask has_algorithm first)");
  TANDEM_CUBLAS_CHECK(cublaslt().matmul(handle_, d.matmul(), &alpha, x.first, d.first(), x.second,
                                        d.second(), &beta, x.out, d.out(), x.out, d.out(), &*algo,
                                        workspace, kLtWorkspaceBytes, stream));
}

void LtMatmul::fp8_gemm(cudaStream_t stream, const Fp8LtPlan& plan, const Operands& x,
                        const float* scale_first, const float* scale_second, float alpha,
                        float beta, void* workspace) {
  run(stream, fp8_key(plan, beta != 0, alignments(x)),
      LtDescriptors::fp8(plan, scale_first, scale_second), x, alpha, beta, workspace);
}

void LtMatmul::gemm(cudaStream_t stream, const GemmLtPlan& plan, const Operands& x,
                    const void* vector, float alpha, float beta, void* workspace) {
  run(stream, gemm_key(plan, beta != 0, alignments(x)), LtDescriptors::gemm(plan, vector), x, alpha,
      beta, workspace);
}

}  // namespace tandem::kernels::cuda
