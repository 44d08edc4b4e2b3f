// One Llama-style transformer layer in FP8 on the cpu binding (SwiGLU, RMSNorm, RoPE, fused
// attention, no biases; hidden 64, 4 heads, FFN 96, sequence 32, micro batch 2), its ops
// logged by a RecordingDevice: the fixture of the FP8 memory and accumulation tests.
#pragma once

#include <cstdint>
#include <utility>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "model/transformer_layer.hpp"
#include "tests/sim/recording_device.hpp"

namespace tandem::testing {

struct Fp8Layer {
  static constexpr std::int64_t hidden = 64, heads = 4, ffn = 96, seq = 32, batch = 2;
  static constexpr std::int64_t rows = seq * batch;

  CpuDevice cpu;
  RecordingDevice device{cpu};
  SelfCommunicator tp{cpu, "tp"};
  ModelEnv env{device, device.default_stream(), tp, false, DType::fp32};
  ParameterSet params{1, 0};
  TransformerLayer layer;
  Tensor x;  // (rows, hidden), 0.5 everywhere

  explicit Fp8Layer(Fp8Config fp8)
      : layer(params, 0,
              LayerDims{.hidden = hidden,
                        .heads = heads,
                        .ffn = ffn,
                        .seq = seq,
                        .micro_batch = batch,
                        .num_layers = 1,
                        .options = {.swiglu = true,
                                    .normalization = Normalization::rms_norm,
                                    .rope = true,
                                    .add_bias_linear = false,
                                    .flash_attn = true,
                                    .fp8 = std::move(fp8)}},
              Recompute::none) {
    params.allocate(device);
    params.initialize(device, device.default_stream(), 5);
    x = device.allocate(Shape{rows, hidden}, DType::fp32);
    device.fill(device.default_stream(), x, 0.5f);
  }
};

}  // namespace tandem::testing
