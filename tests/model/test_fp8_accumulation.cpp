// Which FP8 GEMMs accumulate fast: Transformer Engine runs a linear layer's forward GEMM
// with Hopper's fast accumulation and splits the accumulator for dgrad and wgrad
// (_2X_ACC_FPROP False, _2X_ACC_DGRAD and _2X_ACC_WGRAD True). The layer's fp8_gemm calls
// are read off the cpu binding's op log: four forward GEMMs (QKV, projection, FC1, FC2), all
// fast; eight backward ones (each layer's dgrad and wgrad), none fast. A model that left
// the flag at its default, or set it everywhere, fails one of the two counts.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "model/transformer_layer.hpp"
#include "tests/sim/recording_device.hpp"

namespace tandem {
namespace {

struct Fp8GemmCount {
  int fast = 0, split = 0;
};

// The fp8_gemm lines of log[first, last).
Fp8GemmCount count_fp8_gemms(const std::vector<std::string>& log, std::size_t first,
                             std::size_t last) {
  Fp8GemmCount c;
  for (std::size_t i = first; i < last; ++i) {
    if (log[i].rfind("fp8_gemm ", 0) != 0) continue;
    if (log[i].find(" fast-accumulate") != std::string::npos)
      ++c.fast;
    else
      ++c.split;
  }
  return c;
}

TEST(Fp8Accumulation, ForwardGemmsAccumulateFastAndBackwardOnesSplit) {
  for (const char* recipe : {"delayed", "tensorwise"}) {
    CpuDevice cpu;
    testing::RecordingDevice device{cpu};
    SelfCommunicator tp{cpu, "tp"};
    ModelEnv env{device, device.default_stream(), tp, false, DType::fp32};
    ParameterSet params{1, 0};
    const std::int64_t hidden = 32, seq = 16, batch = 2;
    TransformerLayer layer(
        params, 0,
        LayerDims{.hidden = hidden,
                  .heads = 2,
                  .ffn = 64,
                  .seq = seq,
                  .micro_batch = batch,
                  .num_layers = 1,
                  .options = {.swiglu = true,
                              .normalization = Normalization::rms_norm,
                              .rope = true,
                              .add_bias_linear = false,
                              .flash_attn = true,
                              .fp8 = Fp8Config{.format = "hybrid", .recipe = recipe}}},
        Recompute::none);
    params.allocate(device);
    params.initialize(device, device.default_stream(), 3);
    Tensor x = device.allocate(Shape{seq * batch, hidden}, DType::fp32);
    device.fill(device.default_stream(), x, 0.25f);

    LayerActivations saved;
    const std::size_t start = device.log().size();
    Tensor out = layer.forward(env, x, saved);
    const std::size_t forward_end = device.log().size();
    Tensor grad = device.allocate(Shape{seq * batch, hidden}, DType::fp32);
    device.fill(device.default_stream(), grad, 1e-3f);
    Tensor dx = layer.backward(env, grad, saved);

    const Fp8GemmCount forward = count_fp8_gemms(device.log(), start, forward_end);
    const Fp8GemmCount backward = count_fp8_gemms(device.log(), forward_end, device.log().size());
    EXPECT_EQ(forward.fast, 4) << recipe;
    EXPECT_EQ(forward.split, 0) << recipe;
    EXPECT_EQ(backward.fast, 0) << recipe;
    EXPECT_EQ(backward.split, 8) << recipe;
  }
}

}  // namespace
}  // namespace tandem
