// kernels/cuda/fp8_lt_plan, gemm_lt_plan and lt_matmul's descriptors, on the host: which
// FP8 GEMMs go to cuBLASLt's FP8 tensor cores and which 16-bit GEMMs take their epilogue
// (bias, bias gradient) from cuBLASLt, and which rule keeps the others off; that the
// column-major call each plan spells computes the row-major product tandem asked for, with
// its bias or bias gradient (checked by evaluating that call by hand, as cuBLASLt defines
// it, against the row-major GEMM); and that the descriptors hold the plan (cuBLASLt's
// descriptor calls need no GPU). Label `cuda`: runs wherever the binding is built.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/cublaslt_library.hpp"
#include "kernels/cuda/fp8_lt_plan.hpp"
#include "kernels/cuda/gemm_lt_plan.hpp"
#include "kernels/cuda/lt_matmul.hpp"

namespace tandem::kernels::cuda {
namespace {

using math::Fp8Format;

Fp8LtProblem linear_forward(std::int64_t m, std::int64_t n, std::int64_t k) {
  return {.m = m, .n = n, .k = k, .transpose_b = true};  // X (M, K) · Wᵀ, W held (N, K)
}

TEST(Fp8LtPlan, TheForwardOfALinearLayerRunsAsItIsHeld) {
  const Fp8LtPlan plan = plan_fp8_lt_gemm(linear_forward(64, 48, 96));
  ASSERT_TRUE(plan.runs()) << plan.unsupported;
  EXPECT_FALSE(plan.transpose_a_first);
  EXPECT_FALSE(plan.transpose_b_first);
  // Column-major D (N × M): rows N, cols M, depth K.
  EXPECT_EQ(plan.rows, 48);
  EXPECT_EQ(plan.cols, 64);
  EXPECT_EQ(plan.depth, 96);
}

TEST(Fp8LtPlan, OperandsHeldTheOtherWayAreTransposedFirst) {
  // dgrad: dY (M, N_out) · W (N_out, K_in), W held untransposed.
  Fp8LtProblem dgrad{.m = 32, .n = 64, .k = 48, .format_a = Fp8Format::e5m2};
  Fp8LtPlan plan = plan_fp8_lt_gemm(dgrad);
  ASSERT_TRUE(plan.runs()) << plan.unsupported;
  EXPECT_FALSE(plan.transpose_a_first);
  EXPECT_TRUE(plan.transpose_b_first);
  // Hybrid: the gradient (A, E5M2) is cuBLASLt's second operand, the weight its first.
  EXPECT_EQ(plan.second_type, CUDA_R_8F_E5M2);
  EXPECT_EQ(plan.first_type, CUDA_R_8F_E4M3);
  // wgrad: dYᵀ · X, dY held (tokens, out).
  Fp8LtProblem wgrad{.m = 64, .n = 32, .k = 128, .transpose_a = true, .out = Precision::fp32};
  plan = plan_fp8_lt_gemm(wgrad);
  ASSERT_TRUE(plan.runs()) << plan.unsupported;
  EXPECT_TRUE(plan.transpose_a_first);
  EXPECT_TRUE(plan.transpose_b_first);
  EXPECT_EQ(plan.out_type, CUDA_R_32F);
}

TEST(Fp8LtPlan, EachRuleNamesWhatKeepsAGemmOffTheTensorCores) {
  auto why = [](Fp8LtProblem p) { return plan_fp8_lt_gemm(p).unsupported; };
  Fp8LtProblem p = linear_forward(64, 64, 64);
  p.compute_capability = 80;
  EXPECT_NE(why(p).find("8.0"), std::string::npos) << why(p);
  p = linear_forward(64, 64, 64);
  p.per_tensor_scales = false;
  EXPECT_NE(why(p).find("block scales"), std::string::npos) << why(p);
  p = linear_forward(64, 64, 64);
  p.format_a = p.format_b = Fp8Format::e5m2;
  EXPECT_NE(why(p).find("E5M2 x E5M2"), std::string::npos) << why(p);
  EXPECT_NE(why(linear_forward(64, 64, 130)).find("K = 130"), std::string::npos);
  EXPECT_NE(why(linear_forward(33, 64, 64)).find("M = 33"), std::string::npos);
  EXPECT_NE(why(linear_forward(64, 8, 64)).find("N = 8"), std::string::npos);
  p = linear_forward(64, 64, 64);
  p.aligned = false;
  EXPECT_NE(why(p).find("16 bytes"), std::string::npos) << why(p);
  p = linear_forward(64, 64, 64);
  p.compute_capability = 89;  // Ada has FP8 tensor cores
  EXPECT_TRUE(plan_fp8_lt_gemm(p).runs());
}

// The row-major (rows, cols) matrix `x`, transposed.
std::vector<float> transposed(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// The plan's column-major call, evaluated as cuBLASLt defines it: first held (first_rows ×
// first_cols) and second likewise, column-major with leading dimensions their row counts,
// each transposed as its op says; D (rows × cols) = op(first) · op(second), plus the bias
// along D's rows (BIAS), or with BGRADB the sums of op(second) over depth, one per column.
struct Evaluated {
  std::vector<double> d, bias_grad;
};
Evaluated column_major(const GemmLtPlan& p, const std::vector<float>& first,
                       const std::vector<float>& second, const std::vector<float>& bias) {
  auto op_first = [&](std::int64_t i, std::int64_t q) {
    return p.op_first == CUBLAS_OP_N ? first[i + q * p.first_rows] : first[q + i * p.first_rows];
  };
  auto op_second = [&](std::int64_t q, std::int64_t j) {
    return p.op_second == CUBLAS_OP_N ? second[q + j * p.second_rows]
                                      : second[j + q * p.second_rows];
  };
  Evaluated e{std::vector<double>(static_cast<std::size_t>(p.rows * p.cols)),
              std::vector<double>(static_cast<std::size_t>(p.cols))};
  for (std::int64_t i = 0; i < p.rows; ++i)
    for (std::int64_t j = 0; j < p.cols; ++j) {
      double sum = p.epilogue == CUBLASLT_EPILOGUE_BIAS ? bias[static_cast<std::size_t>(i)] : 0.0;
      for (std::int64_t q = 0; q < p.depth; ++q) sum += double{op_first(i, q)} * op_second(q, j);
      e.d[static_cast<std::size_t>(i + j * p.rows)] = sum;
    }
  if (p.epilogue == CUBLASLT_EPILOGUE_BGRADB)
    for (std::int64_t j = 0; j < p.cols; ++j)
      for (std::int64_t q = 0; q < p.depth; ++q)
        e.bias_grad[static_cast<std::size_t>(j)] += op_second(q, j);
  return e;
}

// An FP8 plan's "TN" call is that call with the first operand transposed and held (depth ×
// rows), the second as is and held (depth × cols).
std::vector<float> column_major_tn(const Fp8LtPlan& p, const std::vector<float>& first,
                                   const std::vector<float>& second) {
  const GemmLtPlan tn{.rows = p.rows,
                      .cols = p.cols,
                      .depth = p.depth,
                      .op_first = CUBLAS_OP_T,
                      .op_second = CUBLAS_OP_N,
                      .first_rows = p.depth,
                      .first_cols = p.rows,
                      .second_rows = p.depth,
                      .second_cols = p.cols};
  const std::vector<double> d = column_major(tn, first, second, {}).d;
  return {d.begin(), d.end()};
}

TEST(Fp8LtPlan, TheColumnMajorCallComputesTheRowMajorProduct) {
  const std::int64_t M = 32, N = 48, K = 16;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> a(M * K), b(K * N);  // held as the flags say
      for (float& x : a) x = u(rng);
      for (float& x : b) x = u(rng);
      // The row-major product C = op(A) · op(B).
      auto at = [&](std::int64_t i, std::int64_t q) { return ta ? a[q * M + i] : a[i * K + q]; };
      auto bt = [&](std::int64_t q, std::int64_t j) { return tb ? b[j * K + q] : b[q * N + j]; };
      const Fp8LtPlan plan =
          plan_fp8_lt_gemm({.m = M, .n = N, .k = K, .transpose_a = ta, .transpose_b = tb});
      ASSERT_TRUE(plan.runs()) << plan.unsupported;
      // What the binding hands cuBLASLt: B as (N, K) and A as (M, K), row-major.
      const std::vector<float> first = plan.transpose_b_first ? transposed(b, K, N) : b;
      const std::vector<float> second = plan.transpose_a_first ? transposed(a, K, M) : a;
      const std::vector<float> d = column_major_tn(plan, first, second);
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < N; ++j) {
          double c = 0;
          for (std::int64_t q = 0; q < K; ++q) c += static_cast<double>(at(i, q)) * bt(q, j);
          // D (N × M) column-major is C (M, N) row-major: element (i, j) at i · N + j.
          ASSERT_NEAR(d[i * N + j], c, 1e-5)
              << "ta " << ta << " tb " << tb << " at " << i << "," << j;
        }
    }
}

template <typename T>
T matmul_attribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a) {
  T value{};
  std::size_t written = 0;
  EXPECT_EQ(cublaslt().matmul_desc_get_attribute(d, a, &value, sizeof(value), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(value));
  return value;
}

template <typename T>
T layout_attribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a) {
  T value{};
  std::size_t written = 0;
  EXPECT_EQ(cublaslt().matrix_layout_get_attribute(l, a, &value, sizeof(value), &written),
            CUBLAS_STATUS_SUCCESS);
  return value;
}

TEST(LtDescriptors, HoldTheFp8Plan) {
  Fp8LtProblem problem = linear_forward(64, 48, 96);
  problem.format_a = Fp8Format::e5m2;
  const Fp8LtPlan plan = plan_fp8_lt_gemm(problem);
  ASSERT_TRUE(plan.runs());
  // Any addresses will do: descriptors only hold them.
  const auto* scale_first = reinterpret_cast<const float*>(std::uintptr_t{0x1000});
  const auto* scale_second = reinterpret_cast<const float*>(std::uintptr_t{0x2000});
  const LtDescriptors d = LtDescriptors::fp8(plan, scale_first, scale_second);
  EXPECT_EQ(matmul_attribute<cublasOperation_t>(d.matmul(), CUBLASLT_MATMUL_DESC_TRANSA),
            CUBLAS_OP_T);
  EXPECT_EQ(matmul_attribute<cublasOperation_t>(d.matmul(), CUBLASLT_MATMUL_DESC_TRANSB),
            CUBLAS_OP_N);
  EXPECT_EQ(matmul_attribute<std::int8_t>(d.matmul(), CUBLASLT_MATMUL_DESC_FAST_ACCUM), 0);
  EXPECT_EQ(matmul_attribute<const void*>(d.matmul(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER),
            scale_first);
  EXPECT_EQ(matmul_attribute<const void*>(d.matmul(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER),
            scale_second);
  struct Expected {
    cublasLtMatrixLayout_t layout;
    cudaDataType_t type;
    std::uint64_t rows, cols;
    std::int64_t ld;
  };
  for (const Expected& e : {Expected{d.first(), CUDA_R_8F_E4M3, 96, 48, 96},
                            Expected{d.second(), CUDA_R_8F_E5M2, 96, 64, 96},
                            Expected{d.out(), CUDA_R_16BF, 48, 64, 48}}) {
    EXPECT_EQ(layout_attribute<std::uint32_t>(e.layout, CUBLASLT_MATRIX_LAYOUT_TYPE),
              static_cast<std::uint32_t>(e.type));
    EXPECT_EQ(layout_attribute<std::uint64_t>(e.layout, CUBLASLT_MATRIX_LAYOUT_ROWS), e.rows);
    EXPECT_EQ(layout_attribute<std::uint64_t>(e.layout, CUBLASLT_MATRIX_LAYOUT_COLS), e.cols);
    EXPECT_EQ(layout_attribute<std::int64_t>(e.layout, CUBLASLT_MATRIX_LAYOUT_LD), e.ld);
  }
}

TEST(LtDescriptors, TheForwardGemmAccumulatesFastAsTransformerEngines) {
  // TE splits the accumulator for dgrad and wgrad, not for fprop (_2X_ACC_FPROP False).
  Fp8LtProblem problem = linear_forward(64, 48, 96);
  const Fp8LtPlan split = plan_fp8_lt_gemm(problem);
  problem.split_accumulator = false;
  const Fp8LtPlan fast = plan_fp8_lt_gemm(problem);
  EXPECT_FALSE(split.fast_accumulate);
  EXPECT_TRUE(fast.fast_accumulate);
  const LtDescriptors d = LtDescriptors::fp8(fast, nullptr, nullptr);
  EXPECT_EQ(matmul_attribute<std::int8_t>(d.matmul(), CUBLASLT_MATMUL_DESC_FAST_ACCUM), 1);
}

TEST(LtDescriptors, RefuseAnFp8PlanThatDoesNotRun) {
  const Fp8LtPlan plan = plan_fp8_lt_gemm(linear_forward(64, 48, 100));
  try {
    const LtDescriptors d = LtDescriptors::fp8(plan, nullptr, nullptr);
    FAIL() << "descriptors built for a plan that does not run";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("K = 100"), std::string::npos) << e.what();
  }
}

TEST(GemmLtPlan, EachRuleNamesWhatKeepsAnEpilogueOffCuBlasLt) {
  auto why = [](GemmLtProblem p) { return plan_gemm_lt(p).unsupported; };
  const GemmLtProblem forward{.m = 64, .n = 48, .k = 32, .transpose_b = true, .bias = true};
  EXPECT_TRUE(plan_gemm_lt(forward).runs()) << why(forward);
  GemmLtProblem p = forward;
  p.operands = Precision::fp32;
  EXPECT_NE(why(p).find("true-fp32"), std::string::npos) << why(p);
  p = forward;
  p.bias_grad = true;
  EXPECT_NE(why(p).find("one epilogue"), std::string::npos) << why(p);
  p = forward;
  p.bias_precision = Precision::fp32;
  EXPECT_NE(why(p).find("C's type"), std::string::npos) << why(p);
  p = {.m = 48, .n = 32, .k = 64, .bias_grad = true};  // A held (M, K)
  EXPECT_NE(why(p).find("transpose_a"), std::string::npos) << why(p);
  p = forward;
  p.aligned = false;
  EXPECT_NE(why(p).find("16-byte"), std::string::npos) << why(p);
  p = forward;
  p.k = 0;
  EXPECT_NE(why(p).find("K = 0"), std::string::npos) << why(p);
}

TEST(GemmLtPlan, TheColumnMajorCallComputesTheRowMajorProductAndItsEpilogue) {
  const std::int64_t M = 5, N = 7, K = 3;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int epilogue = 0; epilogue < 2; ++epilogue) {
        const bool bias = epilogue == 0, bias_grad = epilogue == 1;
        if (bias_grad && !ta) continue;  // the rule: A held (K, M)
        std::vector<float> a(M * K), b(K * N), bv(N);
        for (float& x : a) x = u(rng);
        for (float& x : b) x = u(rng);
        for (float& x : bv) x = u(rng);
        const GemmLtPlan plan = plan_gemm_lt({.m = M,
                                              .n = N,
                                              .k = K,
                                              .transpose_a = ta,
                                              .transpose_b = tb,
                                              .bias = bias,
                                              .bias_grad = bias_grad});
        ASSERT_TRUE(plan.runs()) << plan.unsupported;
        // cuBLASLt reads tandem's row-major buffers as they are: B first, A second.
        const Evaluated e = column_major(plan, b, a, bv);
        auto at = [&](std::int64_t i, std::int64_t q) { return ta ? a[q * M + i] : a[i * K + q]; };
        auto bt = [&](std::int64_t q, std::int64_t j) { return tb ? b[j * K + q] : b[q * N + j]; };
        for (std::int64_t i = 0; i < M; ++i) {
          double grad = 0;
          for (std::int64_t q = 0; q < K; ++q) grad += at(i, q);
          if (bias_grad) {
            EXPECT_NEAR(e.bias_grad[static_cast<std::size_t>(i)], grad, 1e-9);
          }
          for (std::int64_t j = 0; j < N; ++j) {
            double c = bias ? bv[static_cast<std::size_t>(j)] : 0.0;
            for (std::int64_t q = 0; q < K; ++q) c += double{at(i, q)} * bt(q, j);
            ASSERT_NEAR(e.d[static_cast<std::size_t>(i * N + j)], c, 1e-9)
                << "ta " << ta << " tb " << tb << " epilogue " << epilogue;
          }
        }
      }
}

TEST(LtDescriptors, HoldAnEpiloguePlan) {
  const GemmLtPlan plan = plan_gemm_lt(
      {.m = 64, .n = 48, .k = 32, .transpose_a = true, .out = Precision::fp32, .bias_grad = true});
  ASSERT_TRUE(plan.runs()) << plan.unsupported;
  const void* vector = reinterpret_cast<const void*>(std::uintptr_t{0x3000});
  const LtDescriptors d = LtDescriptors::gemm(plan, vector);
  EXPECT_EQ(matmul_attribute<cublasOperation_t>(d.matmul(), CUBLASLT_MATMUL_DESC_TRANSA),
            CUBLAS_OP_N);  // B held (K, N) row-major: (N × K) column-major, as is
  EXPECT_EQ(matmul_attribute<cublasOperation_t>(d.matmul(), CUBLASLT_MATMUL_DESC_TRANSB),
            CUBLAS_OP_T);  // A held (K, M)
  EXPECT_EQ(matmul_attribute<std::uint32_t>(d.matmul(), CUBLASLT_MATMUL_DESC_EPILOGUE),
            static_cast<std::uint32_t>(CUBLASLT_EPILOGUE_BGRADB));
  EXPECT_EQ(matmul_attribute<const void*>(d.matmul(), CUBLASLT_MATMUL_DESC_BIAS_POINTER), vector);
  EXPECT_EQ(layout_attribute<std::uint64_t>(d.first(), CUBLASLT_MATRIX_LAYOUT_ROWS), 48u);
  EXPECT_EQ(layout_attribute<std::uint64_t>(d.first(), CUBLASLT_MATRIX_LAYOUT_COLS), 32u);
  EXPECT_EQ(layout_attribute<std::uint64_t>(d.second(), CUBLASLT_MATRIX_LAYOUT_ROWS), 64u);
  EXPECT_EQ(layout_attribute<std::uint64_t>(d.second(), CUBLASLT_MATRIX_LAYOUT_COLS), 32u);
  EXPECT_EQ(layout_attribute<std::uint32_t>(d.out(), CUBLASLT_MATRIX_LAYOUT_TYPE),
            static_cast<std::uint32_t>(CUDA_R_32F));
  EXPECT_EQ(layout_attribute<std::int64_t>(d.out(), CUBLASLT_MATRIX_LAYOUT_LD), 48);
}

TEST(LtAlignment, IsTheLargestPowerOfTwoUpTo256ThatDividesTheAddress) {
  auto at = [](std::uintptr_t address) {
    return lt_alignment(reinterpret_cast<const void*>(address));
  };
  EXPECT_EQ(at(0x10000), 256u);
  EXPECT_EQ(at(0x10100), 256u);
  EXPECT_EQ(at(0x10080), 128u);  // an FP8 weight 384 bytes into its bucket
  EXPECT_EQ(at(0x10010), 16u);
  EXPECT_EQ(at(0x10002), 2u);
  EXPECT_EQ(at(0x10001), 1u);
  EXPECT_EQ(lt_alignment(nullptr), 256u);
}

TEST(LtAlignment, ThePreferenceTellsTheHeuristicEachOperandsAlignment) {
  // Left at cuBLASLt's default (256) the heuristic may pick a kernel that needs it.
  const cublasLtMatmulPreference_t p = lt_preference({.first = 128, .second = 16, .out = 64});
  auto read = [&](cublasLtMatmulPreferenceAttributes_t attribute) {
    std::uint32_t value = 0;
    std::size_t written = 0;
    EXPECT_EQ(cublaslt().preference_get_attribute(p, attribute, &value, sizeof(value), &written),
              CUBLAS_STATUS_SUCCESS);
    return value;
  };
  EXPECT_EQ(read(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES), 128u);
  EXPECT_EQ(read(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES), 16u);
  EXPECT_EQ(read(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES), 64u);
  EXPECT_EQ(read(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES), 64u);
  std::uint64_t workspace = 0;
  std::size_t written = 0;
  EXPECT_EQ(cublaslt().preference_get_attribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace, sizeof(workspace), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(workspace, kLtWorkspaceBytes);
  cublaslt().preference_destroy(p);
}

TEST(LtAlignment, OperandsAlignedDifferentlyAreDifferentProblems) {
  const LtMatmul::Operands aligned{.first = reinterpret_cast<const void*>(std::uintptr_t{0x1000}),
                                   .second = reinterpret_cast<const void*>(std::uintptr_t{0x2000}),
                                   .out = reinterpret_cast<void*>(std::uintptr_t{0x3000})};
  LtMatmul::Operands offset = aligned;
  offset.first = reinterpret_cast<const void*>(std::uintptr_t{0x1080});
  EXPECT_EQ(LtMatmul::alignments(aligned), (LtAlignments{256, 256, 256}));
  EXPECT_EQ(LtMatmul::alignments(offset), (LtAlignments{128, 256, 256}));
  EXPECT_NE(LtMatmul::alignments(aligned), LtMatmul::alignments(offset));
}

}  // namespace
}  // namespace tandem::kernels::cuda
