// A full GPT-2 124M training step on the cpu binding (forward, backward, global grad norm,
// AdamW), one process, fp32 — the figure to compare with PyTorch on the same machine
// (scripts/bench/pytorch_gpt2_step.py) — and the GEMM ceiling at the step's shapes in the
// same binary. Counters: tokens/s and model GFLOP/s (6 · params · tokens + attention).
#include <benchmark/benchmark.h>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "kernels/cpu/gemm.hpp"
#include "model/gpt_chunk.hpp"
#include "model/optimizer.hpp"

namespace tandem {
namespace {

GptDims gpt2_124m(int seq, int micro_batch) {
  return {.num_layers = 12,
          .hidden = 768,
          .heads = 12,
          .ffn = 3072,
          .seq = seq,
          .micro_batch = micro_batch,
          .padded_vocab = 50304,
          .max_positions = 1024};
}

void BM_Gpt2TrainStep(benchmark::State& state) {
  const int T = static_cast<int>(state.range(0)), B = 4;
  const GptDims dims = gpt2_124m(T, B);
  CpuDevice device;
  Stream& s = device.default_stream();
  SelfCommunicator tp(device, "tp");
  ModelEnv env{device, s, tp};
  // The second argument: Megatron's bias fusions on (1, the default) or off (0).
  env.bias_gelu_fusion = env.bias_dropout_fusion = state.range(1) != 0;
  ParameterSet params(1, 0);
  GptChunk chunk(params, dims, ChunkPlan{0, 12, true, true}, Recompute::none);
  params.allocate(device);
  params.initialize(device, s, 1234);
  AdamW adam(device, params, {});
  const std::int64_t rows = std::int64_t{T} * B;
  MicrobatchTensors mb{device.allocate(Shape{rows}, DType::int32),
                       device.allocate(Shape{rows}, DType::int32),
                       device.allocate(Shape{rows}, DType::int32)};
  for (std::int64_t i = 0; i < rows; ++i) {
    mb.tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919) % 50257);
    mb.positions.data<std::int32_t>()[i] = static_cast<std::int32_t>(i / B);  // row t·B + b
    mb.labels.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 104729 + 1) % 50257);
  }
  auto step = [&] {
    device.fill(s, params.grads(), 0.0f);
    chunk.forward(env, 0, Tensor{}, mb);
    chunk.backward(env, 0, Tensor{}, 1.0f);
    Tensor ss = adam.grad_sum_squares(s);
    adam.step(s, 1e-4f, 1.0f);
    benchmark::DoNotOptimize(ss.data<float>()[0]);
  };
  // The first step allocates every activation and first-touches its pages (about a
  // quarter slower at T = 256); like scripts/bench/pytorch_gpt2_step.py, time the steps
  // after it.
  step();
  for (auto _ : state) step();
  // Parameters counted once (the output layer is the tied embedding; positions 1024 rows).
  const double n_params = static_cast<double>(params.numel());
  const double tokens = static_cast<double>(rows);
  const double attention = 12.0 * dims.num_layers * B * static_cast<double>(T) * T * dims.hidden;
  state.counters["tokens/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter((6.0 * n_params * tokens + attention) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params_M"] = n_params * 1e-6;
}
BENCHMARK(BM_Gpt2TrainStep)
    ->Args({64, 1})
    ->Args({64, 0})
    ->Args({256, 1})
    ->Args({256, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The GEMM ceiling at the step's shapes: the MLP's fc1 and the output layer, forward.
void BM_StepGemmCeiling(benchmark::State& state) {
  const std::int64_t m = state.range(0), k = 768, n = state.range(1);
  std::vector<float> a(static_cast<std::size_t>(m * k), 0.5f),
      b(static_cast<std::size_t>(n * k), 0.25f), c(static_cast<std::size_t>(m * n));
  const kernels::cpu::GemmParams p{.m = m, .n = n, .k = k, .transpose_b = true};
  for (auto _ : state) kernels::cpu::gemm(p, a.data(), b.data(), c.data());
  state.counters["GFLOP/s"] = benchmark::Counter(kernels::cpu::gemm_flops(p) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_StepGemmCeiling)
    ->Args({256, 3072})
    ->Args({256, 50304})
    ->Args({1024, 3072})
    ->Args({1024, 50304})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tandem
