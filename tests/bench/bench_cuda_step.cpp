// A full training step on one GPU (forward, backward, global grad norm, AdamW) through the
// cuda binding, for the GPT-2 124M shape and a 1.3B shape (GPT-3 XL: 24 layers, hidden 2048,
// 16 heads), one process. Counters: tokens/s, model TFLOP/s (6 · params · tokens + the
// attention-score FLOPs 12 · L · B · T² · h, Narayanan et al.) and MFU against the GPU's
// dense bf16 tensor-core peak (TANDEM_PEAK_TFLOPS overrides it; H100 SXM 989, A100 312).
// The model computes in the dtype it allocates (fp32 today), so MFU against the bf16 peak is
// a conservative figure. The second argument turns Megatron's bias fusions (bias-GeLU,
// bias-add into the residual) on (1, the default) or off (0). Without a GPU it prints
// SKIPPED and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

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

void run_step(benchmark::State& state, const GptDims& dims) {
  CudaDevice device(0);
  Stream& s = device.default_stream();
  SelfCommunicator tp(device, "tp");
  ModelEnv env{device, s, tp};
  env.bias_gelu_fusion = env.bias_dropout_fusion = state.range(1) != 0;
  ParameterSet params(1, 0);
  GptChunk chunk(params, dims, ChunkPlan{0, dims.num_layers, true, true}, Recompute::none);
  params.allocate(device);
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
  float norm = 0;
  for (auto _ : state) {
    device.fill(s, params.grads(), 0.0f);
    chunk.forward(env, 0, Tensor{}, mb);
    chunk.backward(env, 0, Tensor{}, 1.0f);
    Tensor ss = adam.grad_sum_squares(s);
    adam.step(s, 1e-4f, 1.0f);
    device.download(s, ss, std::span<float>(&norm, 1));  // waits for the step
  }
  benchmark::DoNotOptimize(norm);
  const double n_params = static_cast<double>(params.numel());
  const double tokens = static_cast<double>(rows);
  const double attention = 12.0 * dims.num_layers * dims.micro_batch *
                           static_cast<double>(dims.seq) * dims.seq * dims.hidden;
  const double flops = 6.0 * n_params * tokens + attention;
  state.counters["tokens/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  const double peak = peak_tflops();
  if (peak > 0)
    state.counters["MFU"] =
        benchmark::Counter(flops * 1e-12 / peak, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params_M"] = n_params * 1e-6;
  state.counters["peak_TFLOPs"] = peak;
}

void BM_Gpt2_124M(benchmark::State& state) {
  run_step(state, {.num_layers = 12,
                   .hidden = 768,
                   .heads = 12,
                   .ffn = 3072,
                   .seq = 1024,
                   .micro_batch = static_cast<int>(state.range(0)),
                   .padded_vocab = 50304,
                   .max_positions = 1024});
}
BENCHMARK(BM_Gpt2_124M)->Args({4, 1})->Args({4, 0})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Gpt_1_3B(benchmark::State& state) {
  run_step(state, {.num_layers = 24,
                   .hidden = 2048,
                   .heads = 16,
                   .ffn = 8192,
                   .seq = 2048,
                   .micro_batch = static_cast<int>(state.range(0)),
                   .padded_vocab = 50304,
                   .max_positions = 2048});
}
BENCHMARK(BM_Gpt_1_3B)->Args({1, 1})->Args({1, 0})->Unit(benchmark::kMillisecond)->UseRealTime();

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
