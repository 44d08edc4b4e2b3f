// The cpu binding's software FP8 against its fp32 GEMM, at the linear layers' shapes of
// GPT-2 124M (C 768) for M = B·T = 1024 rows: `fp32` is the GEMM the step runs without FP8
// (Y = X·Wᵀ); `fp8` is what CpuDevice::fp8_gemm does for the same product (decode both
// operands, then that GEMM); `fp8+quantize` adds the input's quantization (current
// scaling: an amax pass and the cast), which the step issues once per GEMM input. Compare
// the rows of one shape: run A B A B with --benchmark_filter and --benchmark_repetitions.
//   bench_fp8 --benchmark_filter='Fp8Gemm' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/fp8.hpp"
#include "kernels/cpu/gemm.hpp"

namespace {

using namespace tandem::kernels;

std::vector<float> normal(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Args: M rows, K in-features, N out-features, variant (0 fp32, 1 fp8, 2 fp8+quantize).
void BM_Fp8Gemm(benchmark::State& state) {
  const std::int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const auto variant = state.range(3);
  const auto x = normal(M * K, 1), w = normal(N * K, 2);
  std::vector<float> y(static_cast<std::size_t>(M * N));
  const cpu::GemmParams p{.m = M, .n = N, .k = K, .transpose_b = true};
  // Codes and scales as the step holds them: the weight quantized once, the input per GEMM.
  std::vector<std::uint8_t> xq(x.size()), wq(w.size());
  float x_scale_inv = 0, w_scale_inv = 0;
  const auto e4m3 = math::Fp8Format::e4m3;
  cpu::fp8_quantize({.input = w.data(), .rows = N, .cols = K, .format = e4m3}, wq.data(),
                    &w_scale_inv, nullptr);
  cpu::fp8_quantize({.input = x.data(), .rows = M, .cols = K, .format = e4m3}, xq.data(),
                    &x_scale_inv, nullptr);
  std::vector<float> xd(x.size()), wd(w.size());
  for (auto _ : state) {
    if (variant == 0) {
      cpu::gemm(p, x.data(), w.data(), y.data());
    } else {
      if (variant == 2)
        cpu::fp8_quantize({.input = x.data(), .rows = M, .cols = K, .format = e4m3}, xq.data(),
                          &x_scale_inv, nullptr);
      cpu::fp8_dequantize(xq.data(), &x_scale_inv, M, K, e4m3, {}, xd.data());
      cpu::fp8_dequantize(wq.data(), &w_scale_inv, N, K, e4m3, {}, wd.data());
      cpu::gemm(p, xd.data(), wd.data(), y.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(variant == 0 ? "fp32" : variant == 1 ? "fp8" : "fp8+quantize");
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (const auto& s :
       {std::pair<std::int64_t, std::int64_t>{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}})
    for (const std::int64_t variant : {0, 1, 2}) b->Args({1024, s.first, s.second, variant});
  b->ArgNames({"M", "K", "N", "variant"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_Fp8Gemm)->Apply(shapes);

}  // namespace
