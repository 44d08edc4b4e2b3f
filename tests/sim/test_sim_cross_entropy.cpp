// The vocab-parallel loss in the simulator under Megatron-Core's --cross-entropy-loss-fusion:
// the model all-reduces the target logits and the sums of exponentials as one tensor (two
// tensor-parallel all-reduces per microbatch's loss, not three), and the sim binding prices
// each cross_entropy_* op at the traffic of the kernels that run it. Counts and bytes are
// worked out from the model below, not read from the program.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/sim_device.hpp"
#include "sim/sim_runner.hpp"
#include "tests/sim/priced_options.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// Bytes per logit, summed over the three passes, from the pass listings in sim_device.cpp:
// Megatron's 16-bit (2+4+4+8) + (8+4+8) + (8+4+2) = 52; Megatron-Core's fused
// (2+4) + (4+4+4+4) + (4+4+2) = 32; Transformer Engine's 2 + (2+2) + (2+2) = 10.
TEST(SimCrossEntropy, EachImplementationMovesItsPassesBytes) {
  auto total = [](CrossEntropyKernels k, bool half) {
    const CrossEntropyBytes b = cross_entropy_bytes_per_logit(k, half);
    return b.max + b.sums + b.backward;
  };
  EXPECT_EQ(total(CrossEntropyKernels::megatron, true), 52);
  EXPECT_EQ(total(CrossEntropyKernels::megatron_fused, true), 32);
  EXPECT_EQ(total(CrossEntropyKernels::transformer_engine, true), 10);
  // fp32 logits, no conversions: Megatron's (4+8) + (8+4+8) + 8 = 40; the fused
  // 4 + (4+4+4+4) + (4+4+2) = 30; Transformer Engine's 4 + (4+4) + (4+4) = 20.
  EXPECT_EQ(total(CrossEntropyKernels::megatron, false), 40);
  EXPECT_EQ(total(CrossEntropyKernels::megatron_fused, false), 30);
  EXPECT_EQ(total(CrossEntropyKernels::transformer_engine, false), 20);
}

// GPT, 2 layers, hidden 64, vocab 512 over tp 2 (256 columns a rank), sequence 32, micro
// batch 2: 64 rows of logits a microbatch; 4 microbatches an iteration, bf16.
Scenario tp2_gpt(bool fused, const std::string& impl = "native") {
  Scenario s;
  s.model.num_layers = 2;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.seq_length = 32;
  s.model.vocab_size = 512;
  s.parallelism.tensor_model_parallel_size = 2;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 8;
  s.training.bf16 = true;
  s.training.cross_entropy_loss_fusion = fused;
  s.training.cross_entropy_fusion_impl = impl;
  s.cluster.world_size = 2;
  s.cluster.gpus_per_node = 8;
  return s;
}

// Rank 0's tensor-parallel all-reduces of the loss's 64-row vectors (by their bytes: 64 ·
// 4 = 256 one tensor, 512 the fused pair) and the bytes of its cross_entropy_* ops.
nlohmann::json loss_traffic(const Scenario& s) {
  return testing::in_child([&] {
    const Topology t = load_topology("dgx-h100");
    SimulateOptions o = priced_options(t);
    o.mode = SimMode::full;
    o.record_ops = true;
    const SimReport r = simulate(s, t, o);
    std::map<std::string, int> reduces;
    for (const auto& c : r.ranks.at(0).collectives)
      if (c.rfind("all_reduce", 0) == 0 && c.find(" tp ") != std::string::npos)
        ++reduces[c.substr(c.rfind(' ') + 1)];
    nlohmann::json bytes;
    for (const auto& op : r.ranks.at(0).ops)
      if (op.op.op.rfind("cross_entropy_", 0) == 0 && op.op.op != "cross_entropy_loss")
        bytes[op.op.op] = op.op.bytes;
    return nlohmann::json{{"reduces", reduces}, {"bytes", bytes}};
  });
}

TEST(SimCrossEntropy, FusionAllReducesTheTargetLogitsAndSumsAsOne) {
  const auto unfused = loss_traffic(tp2_gpt(false));
  const auto fused = loss_traffic(tp2_gpt(true));
  ASSERT_FALSE(unfused.contains("error")) << unfused;
  ASSERT_FALSE(fused.contains("error")) << fused;
  // Unfused: the row max, the target logits and the sums, 256 bytes each, per microbatch.
  EXPECT_EQ(unfused["reduces"].value("256", 0), 3 * 4) << unfused;
  EXPECT_EQ(unfused["reduces"].value("512", 0), 0) << unfused;
  // Fused: the row max alone, then the pair as one 512-byte tensor.
  EXPECT_EQ(fused["reduces"].value("256", 0), 4) << fused;
  EXPECT_EQ(fused["reduces"].value("512", 0), 4) << fused;
}

TEST(SimCrossEntropy, EachOpIsPricedAtItsKernelsTraffic) {
  constexpr double kLogits = 64.0 * 256;  // a microbatch's rows × this rank's vocab columns
  for (const auto& [fused, impl, max, sums, backward] :
       {std::tuple{false, "native", 18.0, 20.0, 14.0}, std::tuple{true, "native", 6.0, 16.0, 10.0},
        std::tuple{true, "te", 2.0, 4.0, 4.0}}) {
    const auto r = loss_traffic(tp2_gpt(fused, impl));
    ASSERT_FALSE(r.contains("error")) << r;
    const auto& b = r["bytes"];
    EXPECT_EQ(b["cross_entropy_max"].get<double>(), max * kLogits) << impl << " " << fused;
    EXPECT_EQ(b["cross_entropy_sums"].get<double>(), sums * kLogits) << impl << " " << fused;
    EXPECT_EQ(b["cross_entropy_backward"].get<double>(), backward * kLogits)
        << impl << " " << fused;
  }
}

}  // namespace
}  // namespace tandem::sim
