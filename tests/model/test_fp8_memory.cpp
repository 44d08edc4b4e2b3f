// What an FP8 transformer layer holds, counted by hand against the MemoryTracker the cpu,
// cuda and sim bindings share: Transformer Engine's Linear keeps the FP8 copy of its input
// for the weight gradient (1 byte an element and one fp32 scale), not the compute-dtype
// input, and caches its weight in FP8 twice (fprop's rowwise copy and dgrad's columnwise /
// transposed one) from the step's first forward on. A layer that kept the compute-dtype
// inputs of its linear layers, or a single weight copy, misses these counts.
#include <gtest/gtest.h>

#include "tests/model/fp8_layer.hpp"

namespace tandem {
namespace {

using testing::Fp8Layer;
constexpr std::int64_t C = Fp8Layer::hidden, kHeads = Fp8Layer::heads, F = Fp8Layer::ffn,
                       T = Fp8Layer::seq, B = Fp8Layer::batch, N = Fp8Layer::rows;
constexpr std::int64_t kFp32 = 4;  // the cpu binding computes in fp32

// An FP8 copy of a (rows, cols) matrix under per-tensor scaling: a byte per element, one
// fp32 inverse scale.
std::int64_t fp8_bytes(std::int64_t rows, std::int64_t cols) {
  return rows * cols + kFp32;
}

// The four linear layers' weights (out, in): qkv (3 heads' worth of C), proj, fc1 (gate and
// up), fc2.
constexpr std::int64_t kWeights[4][2] = {{3 * C, C}, {C, C}, {2 * F, C}, {C, F}};

TEST(Fp8Memory, LayerHoldsTheFp8InputsAndTwoWeightCopies) {
  Fp8Layer l(Fp8Config{.format = "hybrid", .recipe = "delayed"});
  const Bytes before = l.device.memory().live();
  const MemoryByUse uses_before = l.device.memory().live_by_use();
  const auto grown = [&](MemoryUse u) {
    const auto i = static_cast<std::size_t>(u);
    return l.device.memory().live_by_use()[i].value - uses_before[i].value;
  };
  LayerActivations saved;
  Tensor out = l.layer.forward(l.env, l.x, saved);

  std::int64_t weights = 0;
  for (const auto& w : kWeights) weights += 2 * fp8_bytes(w[0], w[1]);
  const std::int64_t state = 3 * 12 * kFp32;  // amax history (length 1), scales, amaxes
  const std::int64_t activations =
      N * kFp32                 // RMSNorm 1's rstd (its input is the layer's, held anyway)
      + fp8_bytes(N, C)         // qkv's input (not the normalized x)
      + N * 3 * C * kFp32       // qkv, for attention's backward
      + N * C * kFp32           // attention's output, for fused attention's backward
      + B * kHeads * T * kFp32  // its log-sum-exp
      + fp8_bytes(N, C)         // proj's input
      + N * C * kFp32           // the residual, RMSNorm 2's input
      + N * kFp32               // its rstd
      + fp8_bytes(N, C)         // fc1's input (not the normalized residual)
      + N * 2 * F * kFp32       // fc1's output, for SwiGLU's backward
      + fp8_bytes(N, F);        // fc2's input (not SwiGLU's output)
  const std::int64_t output = N * C * kFp32;
  EXPECT_EQ(l.device.memory().live().value - before.value, weights + state + activations + output);
  // Counted under what they hold: the weights' FP8 copies and the scaling state as fp8, the
  // rest as activations; the model's own weights and gradients were there before.
  EXPECT_EQ(grown(MemoryUse::fp8), weights + state);
  EXPECT_EQ(grown(MemoryUse::activations), activations + output);
  EXPECT_EQ(grown(MemoryUse::weights), 0);
  EXPECT_EQ(grown(MemoryUse::gradients), 0);
  EXPECT_TRUE(saved.ln1_out.shape.dims().empty());
  EXPECT_TRUE(saved.ln2_out.shape.dims().empty());
  EXPECT_TRUE(saved.gelu_out.shape.dims().empty());

  // Backward frees every activation; the weights' FP8 copies stay cached for the step.
  Tensor grad = l.device.allocate(Shape{N, C}, DType::fp32);
  l.device.fill(l.device.default_stream(), grad, 1e-3f);
  Tensor dx = l.layer.backward(l.env, grad, saved);
  out = grad = dx = Tensor{};
  EXPECT_EQ(l.device.memory().live().value - before.value, weights + state);
}

// --no-fp8-wgrad: the weight gradient runs in the compute dtype on the saved
// compute-dtype inputs, so those are held and no FP8 copies of them.
TEST(Fp8Memory, WithoutFp8WgradTheComputeDtypeInputsAreHeld) {
  Fp8Layer fp8(Fp8Config{.format = "hybrid", .recipe = "delayed"});
  Fp8Layer bf16_wgrad(Fp8Config{.format = "hybrid", .recipe = "delayed", .wgrad = false});
  auto held = [](Fp8Layer& l) {
    const Bytes before = l.device.memory().live();
    LayerActivations saved;
    Tensor out = l.layer.forward(l.env, l.x, saved);
    return l.device.memory().live().value - before.value;
  };
  // ln1_out, ln2_out (N × C) and SwiGLU's output (N × F) in fp32 instead of their FP8
  // copies; the attention output's FP8 copy (fused attention keeps its fp32 output anyway)
  // is not made either.
  const std::int64_t extra =
      2 * N * C * kFp32 + N * F * kFp32 - 3 * fp8_bytes(N, C) - fp8_bytes(N, F);
  EXPECT_EQ(held(bf16_wgrad) - held(fp8), extra);
}

}  // namespace
}  // namespace tandem
