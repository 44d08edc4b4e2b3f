// GEMM against a double-precision triple loop: all four transpose combinations, alpha and
// beta, accumulation, leading dimensions, odd sizes, the strided-batched variant.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/threads.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;

struct Reference {
  Doubles c;
  Doubles scale;  // Σ_k |alpha·a·b| + |beta·c|: the size of what was summed, per element
};

// op(A)(i, k) and op(B)(k, j) read from row-major storage with leading dimensions.
Reference reference_gemm(const GemmParams& p, const Floats& a, const Floats& b, const Floats& c,
                         std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  Reference r{Doubles(c.begin(), c.end()), Doubles(c.size(), 0.0)};
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      double sum = 0;
      double size = 0;
      for (std::int64_t k = 0; k < p.k; ++k) {
        const double av = p.transpose_a ? a[k * lda + i] : a[i * lda + k];
        const double bv = p.transpose_b ? b[j * ldb + k] : b[k * ldb + j];
        sum += av * bv;
        size += std::fabs(av * bv);
      }
      const std::size_t idx = static_cast<std::size_t>(i * ldc + j);
      const double old = p.beta == 0.0f ? 0.0 : p.beta * static_cast<double>(c[idx]);
      r.c[idx] = p.alpha * sum + old;
      r.scale[idx] = std::fabs(p.alpha) * size + std::fabs(old);
    }
  }
  return r;
}

void check(GemmParams p, std::uint64_t seed, std::int64_t pad = 0) {
  const std::int64_t a_rows = p.transpose_a ? p.k : p.m, a_cols = p.transpose_a ? p.m : p.k;
  const std::int64_t b_rows = p.transpose_b ? p.n : p.k, b_cols = p.transpose_b ? p.k : p.n;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = p.n + pad;
  if (pad != 0) {
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = ldc;
  }
  const Floats a = random_floats(static_cast<std::size_t>(a_rows * lda), seed);
  const Floats b = random_floats(static_cast<std::size_t>(b_rows * ldb), seed + 1);
  Floats c = random_floats(static_cast<std::size_t>(p.m * ldc), seed + 2);
  const Reference ref = reference_gemm(p, a, b, c, lda, ldb, ldc);
  gemm(p, a.data(), b.data(), c.data());
  EXPECT_TRUE(all_close(c, ref.c, 1e-5, ref.scale))
      << "m " << p.m << " n " << p.n << " k " << p.k << " ta " << p.transpose_a << " tb "
      << p.transpose_b << " alpha " << p.alpha << " beta " << p.beta << " pad " << pad;
}

class GemmShapes : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(GemmShapes, AllTransposesAlphaBetaAgainstDoubleReference) {
  const auto [m, n, k] = GetParam();
  std::uint64_t seed = 1;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.0f, 1.0f},
                                        std::pair{0.5f, -2.0f}, std::pair{-1.5f, 0.25f}}) {
        check({.m = m,
               .n = n,
               .k = k,
               .transpose_a = ta,
               .transpose_b = tb,
               .alpha = alpha,
               .beta = beta},
              seed++);
      }
      check({.m = m, .n = n, .k = k, .transpose_a = ta, .transpose_b = tb, .beta = 1}, seed++, 3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmShapes,
                         ::testing::Values(std::tuple{1, 1, 1}, std::tuple{7, 5, 3},
                                           std::tuple{1, 65, 7}, std::tuple{65, 33, 17},
                                           std::tuple{64, 96, 200}, std::tuple{130, 3, 65}));

TEST(Gemm, BetaZeroIgnoresNaNInC) {
  const Floats a = random_floats(6 * 4, 5), b = random_floats(4 * 3, 6);
  Floats c(6 * 3, std::numeric_limits<float>::quiet_NaN());
  gemm({.m = 6, .n = 3, .k = 4}, a.data(), b.data(), c.data());
  for (const float x : c) EXPECT_TRUE(std::isfinite(x));
}

TEST(Gemm, ZeroInnerDimensionScalesC) {
  Floats c = {1, 2, 3, 4};
  gemm({.m = 2, .n = 2, .k = 0, .beta = 0.5f}, nullptr, nullptr, c.data());
  EXPECT_EQ(c, (Floats{0.5f, 1, 1.5f, 2}));
  gemm({.m = 2, .n = 2, .k = 0}, nullptr, nullptr, c.data());
  EXPECT_EQ(c, (Floats{0, 0, 0, 0}));
}

TEST(Gemm, AccumulatesWeightGradientOverMicrobatches) {
  // dW(N, K) += dYᵀ·X for two microbatches equals one GEMM over both stacked.
  const std::int64_t rows = 9, N = 5, K = 7;
  const Floats dy = random_floats(2 * rows * N, 11), x = random_floats(2 * rows * K, 12);
  Floats dw(N * K, 0.0f);
  for (int mb = 0; mb < 2; ++mb) {
    gemm({.m = N, .n = K, .k = rows, .transpose_a = true, .beta = 1}, dy.data() + mb * rows * N,
         x.data() + mb * rows * K, dw.data());
  }
  const Reference ref = reference_gemm({.m = N, .n = K, .k = 2 * rows, .transpose_a = true}, dy, x,
                                       Floats(N * K, 0.0f), N, K, K);
  EXPECT_TRUE(all_close(dw, ref.c, 1e-5, ref.scale));
}

TEST(Gemm, StridedBatchedMatchesReferencePerBatch) {
  for (const std::int64_t count : {1, 3, 8}) {
    const GemmParams p{.m = 9, .n = 6, .k = 5, .transpose_b = true, .alpha = 0.5f};
    const GemmBatch batch{
        .count = count, .stride_a = 9 * 5 + 2, .stride_b = 6 * 5, .stride_c = 9 * 6 + 1};
    const Floats a = random_floats(static_cast<std::size_t>(count * batch.stride_a), 21);
    const Floats b = random_floats(static_cast<std::size_t>(count * batch.stride_b), 22);
    Floats c(static_cast<std::size_t>(count * batch.stride_c), 7.0f);
    gemm_strided_batched(p, batch, a.data(), b.data(), c.data());
    for (std::int64_t i = 0; i < count; ++i) {
      const Floats ai(a.begin() + i * batch.stride_a, a.begin() + i * batch.stride_a + 9 * 5);
      const Floats bi(b.begin() + i * batch.stride_b, b.begin() + (i + 1) * batch.stride_b);
      const Floats ci(c.begin() + i * batch.stride_c, c.begin() + i * batch.stride_c + 9 * 6);
      const Reference ref = reference_gemm(p, ai, bi, Floats(9 * 6, 0.0f), 5, 5, 6);
      EXPECT_TRUE(all_close(ci, ref.c, 1e-5, ref.scale)) << "batch " << i << " of " << count;
      if (i + 1 < count) {  // the gap between outputs is untouched
        EXPECT_EQ(c[static_cast<std::size_t>(i * batch.stride_c + 9 * 6)], 7.0f);
      }
    }
  }
}

TEST(Gemm, RepeatedRunsAreBitwiseEqual) {
  const std::int64_t M = 96, N = 80, K = 300;
  const Floats a = random_floats(M * K, 31), b = random_floats(N * K, 32);
  Floats c1(M * N), c2(M * N);
  gemm({.m = M, .n = N, .k = K, .transpose_b = true}, a.data(), b.data(), c1.data());
  gemm({.m = M, .n = N, .k = K, .transpose_b = true}, a.data(), b.data(), c2.data());
  EXPECT_TRUE(testing::bitwise_equal(c1, c2));
}

TEST(Gemm, RejectsLeadingDimensionShorterThanRow) {
  Floats a(4), b(4), c(4);
  EXPECT_THROW(gemm({.m = 2, .n = 2, .k = 2, .lda = 1}, a.data(), b.data(), c.data()),
               std::invalid_argument);
}

TEST(Gemm, ReportsBackendAndThreads) {
  EXPECT_TRUE(gemm_backend() == "openblas" || gemm_backend() == "eigen");
  EXPECT_GE(num_threads(), 1);
  EXPECT_EQ(blas_core() == "eigen", gemm_backend() == "eigen") << blas_core();
}

// OpenBLAS's fallback on a CPU newer than the library (Prescott: SSE3) asks for the widest
// kernels the CPU runs; a core that already uses them, or a narrower CPU, asks for nothing.
TEST(BlasCore, AsksForTheWidestKernelsTheCpuRuns) {
  const CpuVectors avx512{.avx2_fma = true, .avx512 = true};
  const CpuVectors avx2{.avx2_fma = true, .avx512 = false};
  const CpuVectors sse{};
  EXPECT_EQ(wider_blas_core("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(wider_blas_core("Haswell", avx512), "SkylakeX");
  EXPECT_EQ(wider_blas_core("Zen", avx512), "SkylakeX");  // Zen 4 has AVX-512
  EXPECT_EQ(wider_blas_core("Prescott", avx2), "Haswell");
  EXPECT_EQ(wider_blas_core("Sandybridge", avx2), "Haswell");
  EXPECT_EQ(wider_blas_core("SkylakeX", avx512), "");
  EXPECT_EQ(wider_blas_core("SapphireRapids", avx512), "");
  EXPECT_EQ(wider_blas_core("Cooperlake", avx512), "");
  EXPECT_EQ(wider_blas_core("Haswell", avx2), "");
  EXPECT_EQ(wider_blas_core("Zen", avx2), "");
  EXPECT_EQ(wider_blas_core("Prescott", sse), "");
  EXPECT_EQ(wider_blas_core("eigen", avx512), "");
  // The name as OpenBLAS spells it or in any case.
  EXPECT_EQ(wider_blas_core("PRESCOTT", avx512), "SkylakeX");
  EXPECT_EQ(wider_blas_core("skylakex", avx512), "");
}

// An AVX-512 CPU has AVX2 and FMA too, as every x86-64 CPU with F/BW/DQ/VL does.
TEST(BlasCore, CpuVectorsAreConsistent) {
  const CpuVectors v = cpu_vectors();
  EXPECT_TRUE(!v.avx512 || v.avx2_fma);
}

}  // namespace
}  // namespace tandem::kernels::cpu
