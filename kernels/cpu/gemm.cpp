// GEMM through OpenBLAS's cblas_sgemm (TANDEM_KERNELS_CBLAS) or Eigen. OpenBLAS is the
// default because its Zen kernels run the GPT shapes ~1.5× faster than Eigen 3.4 here
// (kernels/README.md has the table); Eigen is the fallback when OpenBLAS is absent.
#include "kernels/cpu/gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>

#if defined(TANDEM_KERNELS_CBLAS)
#include <cblas.h>
#else
#include <Eigen/Core>
#endif

namespace tandem::kernels::cpu {
namespace {

struct Resolved {
  std::int64_t lda, ldb, ldc;
};

// Packed leading dimensions where 0 was given; checks the ones given.
Resolved resolve(const GemmParams& p) {
  if (p.m < 0 || p.n < 0 || p.k < 0) throw std::invalid_argument("gemm: negative size");
  const std::int64_t a_cols = p.transpose_a ? p.m : p.k;
  const std::int64_t b_cols = p.transpose_b ? p.k : p.n;
  const Resolved r{.lda = p.lda != 0 ? p.lda : std::max<std::int64_t>(1, a_cols),
                   .ldb = p.ldb != 0 ? p.ldb : std::max<std::int64_t>(1, b_cols),
                   .ldc = p.ldc != 0 ? p.ldc : std::max<std::int64_t>(1, p.n)};
  if (r.lda < a_cols || r.ldb < b_cols || r.ldc < p.n)
    throw std::invalid_argument("gemm: leading dimension smaller than the row length");
  return r;
}

// C = beta·C, the whole product when K = 0 (BLAS leaves this corner to the caller).
void scale_c(const GemmParams& p, const Resolved& r, float* c) {
  for (std::int64_t i = 0; i < p.m; ++i) {
    float* row = c + i * r.ldc;
    if (p.beta == 0.0f) {
      std::fill(row, row + p.n, 0.0f);
    } else {
      for (std::int64_t j = 0; j < p.n; ++j) row[j] *= p.beta;
    }
  }
}

#if defined(TANDEM_KERNELS_CBLAS)

int to_int(std::int64_t v) {
  if (v > 0x7fffffff) throw std::invalid_argument("gemm: size exceeds the BLAS integer range");
  return static_cast<int>(v);
}

void run(const GemmParams& p, const Resolved& r, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, p.transpose_a ? CblasTrans : CblasNoTrans,
              p.transpose_b ? CblasTrans : CblasNoTrans, to_int(p.m), to_int(p.n), to_int(p.k),
              p.alpha, a, to_int(r.lda), b, to_int(r.ldb), p.beta, c, to_int(r.ldc));
}

#else

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstView = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<> >;
using View = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<> >;

void run(const GemmParams& p, const Resolved& r, const float* a, const float* b, float* c) {
  const ConstView A(a, p.transpose_a ? p.k : p.m, p.transpose_a ? p.m : p.k,
                    Eigen::OuterStride<>(r.lda));
  const ConstView B(b, p.transpose_b ? p.n : p.k, p.transpose_b ? p.k : p.n,
                    Eigen::OuterStride<>(r.ldb));
  View C(c, p.m, p.n, Eigen::OuterStride<>(r.ldc));
  if (p.beta == 0.0f) {
    C.setZero();  // not C *= 0: NaN in an uninitialised C must not survive
  } else if (p.beta != 1.0f) {
    C *= p.beta;
  }
  if (!p.transpose_a && !p.transpose_b) {
    C.noalias() += p.alpha * A * B;
  } else if (!p.transpose_a) {
    C.noalias() += p.alpha * A * B.transpose();
  } else if (!p.transpose_b) {
    C.noalias() += p.alpha * A.transpose() * B;
  } else {
    C.noalias() += p.alpha * A.transpose() * B.transpose();
  }
}

#endif

void gemm_resolved(const GemmParams& p, const Resolved& r, const float* a, const float* b,
                   float* c) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0 || p.alpha == 0.0f) {
    scale_c(p, r, c);
    return;
  }
  run(p, r, a, b, c);
}

}  // namespace

void gemm(const GemmParams& p, const float* a, const float* b, float* c) {
  gemm_resolved(p, resolve(p), a, b, c);
}

void gemm_strided_batched(const GemmParams& p, const GemmBatch& batch, const float* a,
                          const float* b, float* c) {
  const Resolved r = resolve(p);
  // Enough GEMMs to keep every thread busy: one GEMM per thread at a time (each then
  // single-threaded, as BLAS is inside a parallel region). Otherwise one after the other,
  // each using all threads.
  if (batch.count >= omp_get_max_threads() && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < batch.count; ++i)
      gemm_resolved(p, r, a + i * batch.stride_a, b + i * batch.stride_b, c + i * batch.stride_c);
  } else {
    for (std::int64_t i = 0; i < batch.count; ++i)
      gemm_resolved(p, r, a + i * batch.stride_a, b + i * batch.stride_b, c + i * batch.stride_c);
  }
}

}  // namespace tandem::kernels::cpu
