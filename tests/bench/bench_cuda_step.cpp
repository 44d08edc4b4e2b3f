// A full training step on one GPU through the cuda binding, one process, as Megatron steps
// it without pipelining: `microbatches` forwards and backwards into the fp32 gradient buffer
// (gradient-accumulation fusion), then the global grad norm and AdamW, and under bf16 the
// copy of the fp32 main weights into the bf16 ones. Shapes: GPT-2 124M (12 layers, hidden
// 768, sequence 1024) and 1.3B (GPT-3 XL: 24 layers, hidden 2048, 16 heads, sequence 2048).
// Arguments: micro batch, compute dtype (0 fp32, 1 bf16 with fp32 main weights), attention
// (0 tandem's unfused attention op, 1 fused flash_attention), microbatches per step.
// Counters: tokens/s, model TFLOP/s — 6 · parameters · tokens + 12 · layers · tokens ·
// sequence · hidden for the attention scores (Narayanan et al. 2021, full not causal: the
// figure tests/gpu/torch_reference_step.py reports too) — MFU against the GPU's dense bf16
// peak (TANDEM_PEAK_TFLOPS overrides it; H100 SXM 989, A100 312), and the step's forward +
// backward and optimizer milliseconds apart (the stream drained between them). Without a
// GPU it prints SKIPPED and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "exec/cpu/self_communicator.hpp"
#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_info.hpp"
#include "model/gpt_chunk.hpp"
#include "model/optimizer.hpp"

namespace tandem {
namespace {

// Dense bf16 tensor-core peak of the GPU in TFLOP/s, by name; 0 when unknown.
double peak_tflops() {
  if (const char* v = std::getenv("TANDEM_PEAK_TFLOPS")) return std::atof(v);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 0;
  const std::string name = prop.name;
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos)
    return name.find("PCIe") != std::string::npos ? 756 : 989;
  if (name.find("A100") != std::string::npos) return 312;
  return 0;
}

struct StepConfig {
  int micro_batch = 1;
  bool bf16 = false;
  bool flash = false;
  int microbatches = 8;
};

StepConfig config_of(const benchmark::State& state) {
  return {.micro_batch = static_cast<int>(state.range(0)),
          .bf16 = state.range(1) != 0,
          .flash = state.range(2) != 0,
          .microbatches = static_cast<int>(state.range(3))};
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void run_step(benchmark::State& state, GptDims dims) {
  const StepConfig c = config_of(state);
  dims.micro_batch = c.micro_batch;
  dims.compute = c.bf16 ? DType::bf16 : DType::fp32;
  dims.options.flash_attn = c.flash;
  CudaDevice device(0);
  Stream& s = device.default_stream();
  SelfCommunicator tp(device, "tp");
  ModelEnv env{device, s, tp};
  env.compute = dims.compute;
  env.bias_gelu_fusion = env.bias_dropout_fusion = true;
  env.gradient_accumulation_fusion = true;  // Megatron's default
  ParameterSet params(1, 0);
  GptChunk chunk(params, dims, ChunkPlan{0, dims.num_layers, true, true}, Recompute::none);
  params.allocate(device, {}, dims.compute);
  params.initialize(device, s, 1234);
  AdamW adam(device, params, {}, make_optimizer_shard(params, 1, 0));
  const std::int64_t rows = std::int64_t{dims.seq} * dims.micro_batch;
  MicrobatchTensors mb{device.allocate(Shape{rows}, DType::int32),
                       device.allocate(Shape{rows}, DType::int32),
                       device.allocate(Shape{rows}, DType::int32)};
  const auto ids = [&](std::int64_t mul, std::int64_t add, std::int64_t mod) {
    return Device::ProduceInts([=](std::span<std::int32_t> out) {
      for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<std::int32_t>((static_cast<std::int64_t>(i) * mul + add) % mod);
    });
  };
  device.upload(s, mb.tokens, ids(7919, 0, 50257));
  device.upload(s, mb.positions, ids(1, 0, dims.seq));
  device.upload(s, mb.labels, ids(104729, 1, 50257));
  const float loss_scale = 1.0f / static_cast<float>(c.microbatches);
  double fwd_bwd = 0, optimizer = 0;
  float norm = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    device.fill(s, params.grads(), 0.0f);
    for (int j = 0; j < c.microbatches; ++j) {
      env.first_backward = j == 0;
      chunk.forward(env, j, Tensor{}, mb);
      chunk.backward(env, j, Tensor{}, loss_scale);
    }
    s.synchronize();
    fwd_bwd += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    Tensor ss = adam.grad_sum_squares(s);
    adam.step(s, 1e-4f, 1.0f);
    params.refresh_compute(device, s);  // bf16: main → model weights (fp32: nothing)
    device.download(s, ss, std::span<float>(&norm, 1));  // waits for the step
    optimizer += seconds_since(t0);
  }
  benchmark::DoNotOptimize(norm);
  const double n_params = static_cast<double>(params.numel());
  const double tokens = static_cast<double>(rows) * c.microbatches;
  const double attention = 12.0 * dims.num_layers * tokens * dims.seq * dims.hidden;
  const double flops = 6.0 * n_params * tokens + attention;
  using benchmark::Counter;
  state.counters["tokens/s"] = Counter(tokens, Counter::kIsIterationInvariantRate);
  state.counters["TFLOP/s"] = Counter(flops * 1e-12, Counter::kIsIterationInvariantRate);
  const double peak = peak_tflops();
  if (peak > 0)
    state.counters["MFU"] = Counter(flops * 1e-12 / peak, Counter::kIsIterationInvariantRate);
  state.counters["fwd_bwd_ms"] = Counter(fwd_bwd * 1e3, Counter::kAvgIterations);
  state.counters["optimizer_ms"] = Counter(optimizer * 1e3, Counter::kAvgIterations);
  state.counters["params_M"] = n_params * 1e-6;
  state.counters["peak_TFLOPs"] = peak;
}

// {micro batch, bf16, fused attention, microbatches}: today's fp32 path, then bf16 with the
// unfused and the fused attention op — the configurations tests/gpu/run.sh holds against
// the PyTorch reference.
void BM_Gpt2_124M(benchmark::State& state) {
  run_step(state, {.num_layers = 12,
                   .hidden = 768,
                   .heads = 12,
                   .ffn = 3072,
                   .seq = 1024,
                   .padded_vocab = 50304,
                   .max_positions = 1024});
}
BENCHMARK(BM_Gpt2_124M)
    ->ArgNames({"mbs", "bf16", "flash", "microbatches"})
    ->Args({4, 0, 0, 8})
    ->Args({4, 1, 0, 8})
    ->Args({4, 1, 1, 8})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Gpt_1_3B(benchmark::State& state) {
  run_step(state, {.num_layers = 24,
                   .hidden = 2048,
                   .heads = 16,
                   .ffn = 8192,
                   .seq = 2048,
                   .padded_vocab = 50304,
                   .max_positions = 2048});
}
BENCHMARK(BM_Gpt_1_3B)
    ->ArgNames({"mbs", "bf16", "flash", "microbatches"})
    ->Args({1, 1, 0, 8})
    ->Args({1, 1, 1, 8})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  const auto a = tandem::cuda_availability();
  if (a.devices == 0) {
    std::printf("bench_cuda_step: SKIPPED: needs a CUDA GPU: %s\n", a.reason.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
