// CPU kernel benchmarks at GPT-2 124M shapes (C 768, 12 heads, vocab 50304): the GEMMs of
// each linear layer (forward Y = X·Wᵀ, backward dX = dY·W and dW += dYᵀ·X) at M = B·T =
// 256 and 1024 rows, attention forward+backward at B 4, T 64 and 256, AdamW over 124M
// parameters, and the row-wise kernels at T 256. Counters: GFLOP/s, GB/s.
//   bench_kernels --benchmark_filter=Gemm --benchmark_format=json
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/adam.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cpu/threads.hpp"

namespace {

using namespace tandem::kernels::cpu;

std::vector<float> filled(std::int64_t n, float value = 0.01f) {
  return std::vector<float>(static_cast<std::size_t>(n), value);
}

benchmark::Counter per_second(double amount) {
  return benchmark::Counter(amount, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: M rows, K in-features, N out-features, which GEMM (0 forward, 1 dX, 2 dW).
void BM_Gemm(benchmark::State& state) {
  const std::int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const auto x = filled(M * K), w = filled(N * K), dy = filled(M * N);
  auto out = filled(std::max({M * N, M * K, N * K}));
  GemmParams p;
  const float *a = nullptr, *b = nullptr;
  switch (state.range(3)) {
    case 0:  // Y(M, N) = X(M, K) · W(N, K)ᵀ
      p = {.m = M, .n = N, .k = K, .transpose_b = true};
      a = x.data(), b = w.data();
      state.SetLabel("fwd Y=X.Wt");
      break;
    case 1:  // dX(M, K) = dY(M, N) · W(N, K)
      p = {.m = M, .n = K, .k = N};
      a = dy.data(), b = w.data();
      state.SetLabel("bwd dX=dY.W");
      break;
    default:  // dW(N, K) += dY(M, N)ᵀ · X(M, K)
      p = {.m = N, .n = K, .k = M, .transpose_a = true, .beta = 1};
      a = dy.data(), b = x.data();
      state.SetLabel("bwd dW+=dYt.X");
      break;
  }
  for (auto _ : state) {
    gemm(p, a, b, out.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = per_second(gemm_flops(p) / 1e9);
}

void gemm_args(benchmark::internal::Benchmark* b) {
  const std::int64_t shapes[][2] = {
      {768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
  for (const std::int64_t M : {256, 1024})
    for (const auto& s : shapes)
      for (const std::int64_t which : {0, 1, 2}) b->Args({M, s[0], s[1], which});
  b->ArgNames({"M", "K", "N", "gemm"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_Gemm)->Apply(gemm_args);

// Args: T. B 4, 12 heads of 64.
void BM_AttentionForwardBackward(benchmark::State& state) {
  const AttentionShape s{.B = 4, .T = state.range(0), .NH = 12, .HD = 64};
  const std::int64_t C = s.NH * s.HD;
  const auto qkv = filled(s.B * s.T * 3 * C), dout = filled(s.B * s.T * C);
  auto out = filled(s.B * s.T * C), att = filled(s.B * s.NH * s.T * s.T),
       dqkv = filled(s.B * s.T * 3 * C);
  for (auto _ : state) {
    attention_forward(s, qkv.data(), out.data(), att.data());
    attention_backward(s, dout.data(), qkv.data(), att.data(), dqkv.data());
    benchmark::ClobberMemory();
  }
  // FLOPs as run (causal blocks); backward has twice forward's GEMM work.
  state.counters["GFLOP/s"] = per_second(3 * attention_forward_flops(s) / 1e9);
}
BENCHMARK(BM_AttentionForwardBackward)
    ->Arg(64)
    ->Arg(256)
    ->ArgName("T")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// AdamW over GPT-2 124M's parameters: reads p, g, m, v and writes p, m, v (28 B each).
void BM_AdamW(benchmark::State& state) {
  const std::int64_t n = 124'475'904;
  auto p = filled(n), g = filled(n, 1e-3f), m = filled(n, 0.0f), v = filled(n, 0.0f);
  std::int64_t step = 0;
  for (auto _ : state) {
    adamw(p.data(), g.data(), m.data(), v.data(), n, {.lr = 1e-4f, .weight_decay = 0.1f}, ++step);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = per_second(28.0 * static_cast<double>(n) / 1e9);
}
BENCHMARK(BM_AdamW)->Unit(benchmark::kMillisecond)->UseRealTime();

// Row-wise kernels at B 4, T 256 (1024 rows).
void BM_LayerNormForwardBackward(benchmark::State& state) {
  const LayerNormShape s{.rows = 1024, .C = 768};
  const std::int64_t n = s.rows * s.C;
  const auto x = filled(n), dy = filled(n), gamma = filled(s.C, 1.0f), beta = filled(s.C);
  auto out = filled(n), dx = filled(n), mean = filled(s.rows), rstd = filled(s.rows);
  auto dgamma = filled(s.C), dbeta = filled(s.C);
  for (auto _ : state) {
    layer_norm_forward(s, x.data(), gamma.data(), beta.data(), out.data(), mean.data(),
                       rstd.data());
    layer_norm_backward(s, dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                        dgamma.data(), dbeta.data());
  }
  state.counters["GB/s"] = per_second(4.0 * 7 * static_cast<double>(n) / 1e9);  // ~7 row passes
}
BENCHMARK(BM_LayerNormForwardBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluForwardBackward(benchmark::State& state) {
  const std::int64_t n = 1024 * 3072;
  const auto x = filled(n), dy = filled(n);
  auto y = filled(n), dx = filled(n);
  for (auto _ : state) {
    gelu_forward(x.data(), y.data(), n);
    gelu_backward(dy.data(), x.data(), dx.data(), n);
  }
  state.counters["GB/s"] = per_second(4.0 * 5 * static_cast<double>(n) / 1e9);
}
BENCHMARK(BM_GeluForwardBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CrossEntropyPhases(benchmark::State& state) {
  const CrossEntropyShape s{.rows = 1024, .local_vocab = 50304};
  const std::int64_t n = s.rows * s.local_vocab;
  auto logits = filled(n);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(s.rows), 42);
  auto max = filled(s.rows), sum = filled(s.rows), target = filled(s.rows), dloss = filled(s.rows);
  for (auto _ : state) {
    cross_entropy_max(s, logits.data(), max.data());
    cross_entropy_sums(s, logits.data(), targets.data(), max.data(), sum.data(), target.data());
    cross_entropy_backward(s, logits.data(), targets.data(), max.data(), sum.data(), dloss.data(),
                           logits.data());
  }
  state.counters["GB/s"] = per_second(4.0 * 4 * static_cast<double>(n) / 1e9);
}
BENCHMARK(BM_CrossEntropyPhases)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
