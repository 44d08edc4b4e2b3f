// transformer_impl "transformer_engine" on the step: each transformer layer is issued as
// Transformer Engine's five modules — LayerNormLinear (norm + QKV), DotProductAttention,
// Linear (projection), LayerNormLinear (norm + fc1), Linear (fc2) — one library call each,
// forward and backward, with the residual adds and the activation outside them (Megatron-
// Core's TE layer spec); "local" marks no call. The ops inside each call are read from the
// cpu binding's op log, so what a call holds is checked, not only how many there are.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/model/random_microbatch.hpp"
#include "tests/sim/recording_device.hpp"

namespace tandem {
namespace {

// The outermost library calls, as [first, last) lines of the device's op log.
class TeCallRecorder : public StepObserver {
 public:
  explicit TeCallRecorder(const testing::RecordingDevice& d) : device_(d) {}
  void begin_library_call(Stream&) override {
    if (depth_++ == 0) open_ = device_.log().size();
  }
  void end_library_call(Stream&) override {
    if (--depth_ == 0) calls_.emplace_back(open_, device_.log().size());
  }
  const std::vector<std::pair<std::size_t, std::size_t>>& calls() const { return calls_; }
  int depth() const { return depth_; }

 private:
  const testing::RecordingDevice& device_;
  int depth_ = 0;
  std::size_t open_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> calls_;
};

constexpr GptDims kTeDims{.num_layers = 2,
                          .hidden = 16,
                          .heads = 2,
                          .ffn = 64,
                          .seq = 8,
                          .micro_batch = 2,
                          .padded_vocab = 128,
                          .max_positions = 8,
                          .options = {.flash_attn = true}};

struct TeRun {
  CpuDevice cpu;
  testing::RecordingDevice device{cpu};
  SelfCommunicator tp{cpu, "tp"};
  TeCallRecorder calls{device};
  ModelEnv env{device, device.default_stream(), tp};
  ParameterSet params{1, 0};
  GptChunk chunk;
  MicrobatchTensors mb;

  explicit TeRun(bool transformer_engine)
      : chunk(params, kTeDims, ChunkPlan{0, 2, true, true}, Recompute::none) {
    env.observer = &calls;
    env.transformer_engine = transformer_engine;
    params.allocate(device);
    params.initialize(device, device.default_stream(), 7);
    mb = testing::random_microbatch(device, kTeDims);
    chunk.forward(env, 0, Tensor{}, mb);
    chunk.backward(env, 0, Tensor{}, 1.0f);
  }

  // The op names (allocations left out) of call `i`.
  std::vector<std::string> ops_of(std::size_t i) const {
    std::vector<std::string> out;
    const auto [first, last] = calls.calls().at(i);
    for (std::size_t l = first; l < last; ++l) {
      const std::string& line = device.log()[l];
      const std::string op = line.substr(0, line.find(' '));
      if (op != "allocate") out.push_back(op);
    }
    return out;
  }
};

bool has_op(const std::vector<std::string>& ops, const std::string& op) {
  for (const auto& o : ops)
    if (o == op) return true;
  return false;
}

TEST(TransformerEngineModules, EachLayerIsFiveModuleCallsEachWay) {
  const TeRun te(true);
  EXPECT_EQ(te.calls.depth(), 0);
  // Two layers: five calls each forward, five each backward.
  ASSERT_EQ(te.calls.calls().size(), 20u);
  for (int layer = 0; layer < 2; ++layer) {
    const std::size_t f = 5 * static_cast<std::size_t>(layer);
    // Forward: norm then QKV GEMM; the fused attention alone; projection GEMM; norm then fc1.
    const auto qkv = te.ops_of(f), attention = te.ops_of(f + 1), proj = te.ops_of(f + 2),
               fc1 = te.ops_of(f + 3), fc2 = te.ops_of(f + 4);
    ASSERT_FALSE(qkv.empty());
    EXPECT_EQ(qkv.front(), "layer_norm") << "layer " << layer;
    EXPECT_TRUE(has_op(qkv, "gemm"));
    EXPECT_FALSE(has_op(qkv, "bias_add"));  // the GEMM's epilogue
    EXPECT_EQ(attention, std::vector<std::string>{"flash_attention"});
    EXPECT_TRUE(has_op(proj, "gemm"));
    EXPECT_FALSE(has_op(proj, "layer_norm"));
    ASSERT_FALSE(fc1.empty());
    EXPECT_EQ(fc1.front(), "layer_norm");
    EXPECT_TRUE(has_op(fc1, "gemm"));
    EXPECT_FALSE(has_op(fc1, "gelu") || has_op(fc1, "bias_gelu"));  // the activation is Megatron's
    EXPECT_TRUE(has_op(fc2, "gemm"));
  }
  // Backward, last layer first: fc2, then fc1 with its norm, projection, attention, QKV with
  // its norm.
  for (int layer = 0; layer < 2; ++layer) {
    const std::size_t b = 10 + 5 * static_cast<std::size_t>(layer);
    EXPECT_TRUE(has_op(te.ops_of(b), "gemm"));
    EXPECT_TRUE(has_op(te.ops_of(b + 1), "gemm"));
    EXPECT_TRUE(has_op(te.ops_of(b + 1), "layer_norm_backward"));
    EXPECT_FALSE(has_op(te.ops_of(b + 2), "layer_norm_backward"));
    EXPECT_EQ(te.ops_of(b + 3), std::vector<std::string>{"flash_attention_backward"});
    EXPECT_TRUE(has_op(te.ops_of(b + 4), "layer_norm_backward"));
  }
}

// The module boundaries change how ops are issued, and one thing in which: Transformer
// Engine's Linear runs the QKV bias (the one bias Megatron-Core's TE spec leaves in its
// linear layer) and its gradient as the GEMMs' epilogues, where the local layers issue a
// bias_add after the forward GEMM and a bias_grad after the weight-gradient GEMM. With those
// two ops per layer folded into their GEMMs, the two op logs are the same.
TEST(TransformerEngineModules, LocalLayersMarkNoCallAndRunTheSameOps) {
  const TeRun local(false), te(true);
  EXPECT_TRUE(local.calls.calls().empty());
  std::vector<std::string> folded;
  for (const std::string& line : local.device.log()) {
    const bool after_gemm = !folded.empty() && folded.back().rfind("gemm ", 0) == 0;
    const bool qkv_bias = line == "bias_add (16, 48) (48)" || line == "bias_grad (16, 48) (48)";
    if (after_gemm && qkv_bias)
      folded.back() += line.rfind("bias_add", 0) == 0 ? " +bias" : " +bias_grad";
    else
      folded.push_back(line);
  }
  EXPECT_EQ(folded.size() + 4, local.device.log().size());  // 2 layers × 2 ops
  EXPECT_EQ(folded, te.device.log());
}

// The epilogues are the same math as the ops they replace: every gradient of the two runs
// (the QKV bias's among them) equal to the last bit.
TEST(TransformerEngineModules, EpiloguesGiveTheLocalLayersGradients) {
  TeRun local(false), te(true);
  std::vector<float> a(static_cast<std::size_t>(local.params.grads().numel())), b(a.size());
  local.device.download(local.device.default_stream(), local.params.grads(), a);
  te.device.download(te.device.default_stream(), te.params.grads(), b);
  EXPECT_EQ(a, b);
  bool any = false;
  for (float v : a) any = any || v != 0.0f;
  EXPECT_TRUE(any);  // the gradients were computed
}

}  // namespace
}  // namespace tandem
