// One GEMM on one GPU through the cuda binding's Device ops, bf16 against FP8 (issue 32: at
// 8192³ the FP8 GEMM should run at ≥ 1.6× the bf16 one). bf16: gemm with bf16 A, B and C
// (cuBLAS, fp32 accumulation). FP8: fp8_gemm of E4M3 operands with per-tensor scales into
// bf16, in the layout of a linear layer's forward (A (M, K), B (N, K) transposed), which
// cuBLASLt takes as it is held (kernels/cuda/fp8_lt_plan.hpp); the quantization is done
// once, outside the timing. Registered bf16, FP8, bf16, FP8 (A B A B) so the ratio is read
// from neighbours. Arguments: M = N = K; for FP8, split accumulation (1, as TE's dgrad and
// wgrad) or fast (0, as TE's forward GEMM). Counters: TFLOP/s (2·M·N·K a GEMM) and, for
// FP8, whether it ran on the tensor cores. Without a GPU it prints SKIPPED and exits 0.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>

#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_info.hpp"

namespace tandem {
namespace {

constexpr int kGemmsPerIteration = 20;

void fill_random(CudaDevice& d, Tensor& t) {
  d.upload(d.default_stream(), t, Device::ProduceFloats([](std::span<float> out) {
             std::uint32_t x = 12345;
             for (float& v : out) {
               x = x * 1664525u + 1013904223u;  // an LCG: values in [-1, 1)
               v = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
             }
           }));
}

// One n × n × n problem on GPU 0: bf16 A, B (random) and C; `gemm` issues one GEMM. Times
// kGemmsPerIteration of them per iteration after one warm-up, with TFLOP/s.
struct SquareGemm {
  explicit SquareGemm(std::int64_t size)
      : n(size),
        a(d.allocate({n, n}, DType::bf16)),
        b(d.allocate({n, n}, DType::bf16)),
        c(d.allocate({n, n}, DType::bf16)) {
    fill_random(d, a);
    fill_random(d, b);
  }
  template <typename Gemm>
  void time(benchmark::State& state, Gemm gemm) {
    Stream& s = d.default_stream();
    gemm(s);  // warm-up (cuBLASLt's heuristic too)
    s.synchronize();
    for (auto _ : state) {
      for (int i = 0; i < kGemmsPerIteration; ++i) gemm(s);
      s.synchronize();
    }
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) *
                         static_cast<double>(n) * kGemmsPerIteration;
    state.counters["TFLOP/s"] =
        benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  }

  CudaDevice d{0};
  std::int64_t n;
  Tensor a, b, c;
};

void BM_GemmBf16(benchmark::State& state) {
  SquareGemm g(state.range(0));
  g.time(state,
         [&](Stream& s) { g.d.gemm(s, {.a = g.a, .b = g.b, .c = g.c, .transpose_b = true}); });
}

void BM_GemmFp8(benchmark::State& state) {
  SquareGemm g(state.range(0));
  Stream& s = g.d.default_stream();
  Fp8Tensor qa = allocate_fp8(g.d, g.n, g.n, {}), qb = allocate_fp8(g.d, g.n, g.n, {});
  g.d.fp8_quantize(s, {.input = g.a, .output = qa});
  g.d.fp8_quantize(s, {.input = g.b, .output = qb});
  const std::int64_t before = g.d.fp8_tensor_core_gemms();
  const bool split = state.range(1) != 0;
  g.time(state, [&](Stream& on) {
    g.d.fp8_gemm(on, {.a = qa, .b = qb, .c = g.c, .transpose_b = true, .split_accumulator = split});
  });
  const auto gemms = static_cast<std::int64_t>(state.iterations()) * kGemmsPerIteration + 1;
  state.counters["on_tensor_cores"] = g.d.fp8_tensor_core_gemms() - before == gemms;
  state.counters["compute_capability"] = g.d.compute_capability();
}

BENCHMARK(BM_GemmBf16)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmFp8)
    ->Args({8192, 0})
    ->Args({8192, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GemmBf16)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmFp8)
    ->Args({8192, 0})
    ->Args({8192, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  const auto a = tandem::cuda_availability();
  if (a.devices == 0) {
    std::printf("bench_cuda_gemm: SKIPPED: needs a CUDA GPU: %s\n", a.reason.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
