// Layer-norm forward variants, llm.c dev/cuda style: each variant is validated against the
// CPU kernel (kernels/cpu/layer_norm.hpp) on seeded inputs, then timed with CUDA events and
// reported in GB/s of compulsory traffic (read x, γ, β; write y, mean, rstd).
//   0: the promoted kernel (kernels/cuda/layer_norm.cu): one warp per row, three passes
//   1: one block (256 threads) per row, the row cached in shared memory: one global read
//   layer_norm_lab [--rows 4096] [--channels 768] [--repeats 50]
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/layer_norm.hpp"

namespace tandem::kernels::dev {
namespace {

using cuda::ConstFloats;
using cuda::Floats;

constexpr int kBlock = 256;

// Variant 1: block per row, row in shared memory (C floats of dynamic shared memory).
__global__ void block_row_kernel(cpu::LayerNormShape s, ConstFloats in, ConstFloats gamma,
                                 ConstFloats beta, Floats out, float* mean, float* rstd,
                                 float epsilon) {
  extern __shared__ float row[];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * s.C;
  float sum = 0;
  for (std::int64_t c = threadIdx.x; c < s.C; c += blockDim.x) {
    row[c] = cuda::load(in, base + c);
    sum += row[c];
  }
  const float m = cuda::block_sum(sum) / static_cast<float>(s.C);
  float squares = 0;
  for (std::int64_t c = threadIdx.x; c < s.C; c += blockDim.x)
    squares += (row[c] - m) * (row[c] - m);
  const math::RowStats stats{.mean = m,
                             .rstd = math::layer_norm_rstd(cuda::block_sum(squares), s.C, epsilon)};
  for (std::int64_t c = threadIdx.x; c < s.C; c += blockDim.x)
    cuda::store(
        out, base + c,
        math::layer_norm_normalize(row[c], stats) * cuda::load(gamma, c) + cuda::load(beta, c));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = stats.mean;
    rstd[blockIdx.x] = stats.rstd;
  }
}

void run_variant(int variant, cpu::LayerNormShape s, const float* in, const float* gamma,
                 const float* beta, float* out, float* mean, float* rstd) {
  const cuda::Context ctx{};
  if (variant == 0) {
    cuda::layer_norm_forward(ctx, s, {in, cuda::Precision::fp32}, {gamma, cuda::Precision::fp32},
                             {beta, cuda::Precision::fp32}, {out, cuda::Precision::fp32}, mean,
                             rstd, 1e-5f);
    return;
  }
  block_row_kernel<<<static_cast<unsigned int>(s.rows), kBlock, s.C * sizeof(float)>>>(
      s, {in, cuda::Precision::fp32}, {gamma, cuda::Precision::fp32}, {beta, cuda::Precision::fp32},
      {out, cuda::Precision::fp32}, mean, rstd, 1e-5f);
  TANDEM_CUDA_CHECK_LAUNCH();
}

std::int64_t flag(int argc, char** argv, const std::string& name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return std::atoll(argv[i + 1]);
  return fallback;
}

int lab(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("layer_norm_lab: SKIPPED: needs a CUDA GPU\n");
    return 0;
  }
  const cpu::LayerNormShape s{flag(argc, argv, "--rows", 4096),
                              flag(argc, argv, "--channels", 768)};
  const int repeats = static_cast<int>(flag(argc, argv, "--repeats", 50));
  const auto n = static_cast<std::size_t>(s.rows * s.C);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-2.0f, 3.0f);
  std::vector<float> x(n), g(static_cast<std::size_t>(s.C)), b(g.size());
  for (float& v : x) v = dist(rng);
  for (float& v : g) v = dist(rng);
  for (float& v : b) v = dist(rng);
  std::vector<float> y(n), mean(static_cast<std::size_t>(s.rows)), rstd(mean.size());
  cpu::layer_norm_forward(s, x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data());

  float *dx, *dg, *db, *dy, *dmean, *drstd;
  TANDEM_CUDA_CHECK(cudaMalloc(&dx, n * 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&dy, n * 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&dg, g.size() * 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&db, b.size() * 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&dmean, mean.size() * 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&drstd, rstd.size() * 4));
  TANDEM_CUDA_CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  TANDEM_CUDA_CHECK(cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
  TANDEM_CUDA_CHECK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  int failures = 0;
  std::printf("layer norm forward, rows %lld, C %lld\n", static_cast<long long>(s.rows),
              static_cast<long long>(s.C));
  for (int variant = 0; variant < 2; ++variant) {
    TANDEM_CUDA_CHECK(cudaMemset(dy, 0xff, n * 4));  // NaN poison
    run_variant(variant, s, dx, dg, db, dy, dmean, drstd);
    std::vector<float> got(n);
    TANDEM_CUDA_CHECK(cudaMemcpy(got.data(), dy, n * 4, cudaMemcpyDeviceToHost));
    double worst = 0, ref = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ref = std::max(ref, std::fabs(static_cast<double>(y[i])));
      const double e = std::fabs(static_cast<double>(got[i]) - y[i]);
      worst = std::isfinite(got[i]) ? std::max(worst, e) : INFINITY;
    }
    const bool ok = worst <= 1e-5 * ref;
    failures += ok ? 0 : 1;
    TANDEM_CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < repeats; ++r) run_variant(variant, s, dx, dg, db, dy, dmean, drstd);
    TANDEM_CUDA_CHECK(cudaEventRecord(stop));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double us = 1e3 * ms / repeats;
    const double bytes = 4.0 * (2.0 * static_cast<double>(n) + 2.0 * static_cast<double>(s.C) +
                                2.0 * static_cast<double>(s.rows));
    std::printf("  variant %d: %s (max error %.2e of %.2e), %8.2f us, %7.1f GB/s\n", variant,
                ok ? "valid" : "WRONG", worst, ref, us, bytes / (us * 1e-6) / 1e9);
  }
  for (float* p : {dx, dy, dg, db, dmean, drstd}) TANDEM_CUDA_CHECK(cudaFree(p));
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem::kernels::dev

int main(int argc, char** argv) {
  try {
    return tandem::kernels::dev::lab(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layer_norm_lab: %s\n", e.what());
    return 1;
  }
}
