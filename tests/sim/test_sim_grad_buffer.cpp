// The simulator's data-parallel bytes and memory follow Megatron-Core's gradient buffer:
// with the distributed optimizer the reduce-scatter moves the buffer padded to
// lcm(dp, 128) (or lcm(dp, 128, 2^16) with pad_buckets_for_high_nccl_busbw), without it
// the all-reduce moves the parameters unpadded; grad_reduce_in_bf16 halves the bytes of a
// bf16 run; the padding is memory the rank holds. The sizes are worked out by hand from
// the model below, not taken from the layout code.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "tests/sim/priced_options.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// GPT-2-style, 4 layers, hidden 64, vocab 500 (padded to 512), 32 positions, dp 3.
// Per layer: layer norms 2 · 2 · 64 = 256, qkv 192 · 64 + 192 = 12,480, projection
// 64 · 64 + 64 = 4,160, fc1 256 · 64 + 256 = 16,640, fc2 64 · 256 + 64 = 16,448:
// 49,984. With the embeddings (512 · 64 + 32 · 64 = 34,816) and the final layer norm
// (128): 4 · 49,984 + 34,816 + 128 = 234,880 elements, every parameter a multiple of 64
// (no alignment gaps). One bucket (no overlap) padded to lcm(3, 128) = 384: 612 · 384 =
// 235,008; to lcm(3, 128, 2^16) = 196,608: 393,216.
constexpr std::int64_t kParameters = 234'880;
constexpr std::int64_t kPadded = 235'008;
constexpr std::int64_t kPaddedBusbw = 393'216;

Scenario dp3_gpt() {
  Scenario s;
  s.model.num_layers = 4;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.seq_length = 32;
  s.model.vocab_size = 500;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 12;
  s.cluster.world_size = 3;
  s.cluster.gpus_per_node = 8;
  return s;
}

struct DpTraffic {
  std::int64_t reduce_scatter = 0, all_reduce = 0;  // bytes rank 0 reduces over dp
  std::int64_t all_gather = 0;                      // bytes rank 0 gathers over dp
  std::int64_t peak = 0;                            // rank 0's memory high-water mark
  int copies = 0;                                   // rank 0's copy ops
  std::map<std::string, std::int64_t> held;         // what held the peak, by memory use
};

// One iteration of `s` on the A100 preset (in a child: one SimGrid engine per process).
DpTraffic simulate_dp(const Scenario& s) {
  const auto j = testing::in_child([&] {
    const Topology t = load_topology("dgx-a100-80g");
    SimulateOptions o = priced_options(t);
    o.mode = SimMode::full;
    o.record_ops = true;
    const SimReport r = simulate(s, t, o);
    std::int64_t rs = 0, ar = 0, ag = 0;
    for (const auto& c : r.ranks.at(0).collectives) {
      const std::int64_t bytes = std::stoll(c.substr(c.rfind(' ') + 1));
      if (c.rfind("reduce_scatter dp ", 0) == 0) rs += bytes;
      if (c.rfind("all_gather dp ", 0) == 0) ag += bytes;
      // The gradients, not the one-number reductions (loss, found-inf) beside them.
      if (c.rfind("all_reduce dp ", 0) == 0 && bytes > 16) ar += bytes;
    }
    int copies = 0;
    for (const auto& op : r.ranks.at(0).ops) copies += op.op.op == "copy";
    nlohmann::json held;
    for (std::size_t i = 0; i < kMemoryUses; ++i)
      held[std::string(memory_use_name(static_cast<MemoryUse>(i)))] =
          r.ranks.at(0).peak_memory_by_use[i].value;
    return nlohmann::json{{"rs", rs},         {"ar", ar},
                          {"ag", ag},         {"peak", r.ranks.at(0).peak_memory_bytes},
                          {"copies", copies}, {"held", held}};
  });
  if (j.contains("error")) throw std::runtime_error(j.dump());
  return {j.at("rs").get<std::int64_t>(), j.at("ar").get<std::int64_t>(),
          j.at("ag").get<std::int64_t>(), j.at("peak").get<std::int64_t>(),
          j.at("copies").get<int>(),      j.at("held").get<std::map<std::string, std::int64_t>>()};
}

TEST(SimGradBuffer, ReduceScatterMovesTheBucketPaddedToLcmOfDpAnd128) {
  Scenario s = dp3_gpt();
  s.parallelism.use_distributed_optimizer = true;
  validate(s);
  const DpTraffic d = simulate_dp(s);
  EXPECT_EQ(d.reduce_scatter, 4 * kPadded);  // fp32 gradients
  EXPECT_EQ(d.all_reduce, 0);
}

TEST(SimGradBuffer, AllReduceWithoutTheDistributedOptimizerIsUnpadded) {
  Scenario s = dp3_gpt();
  validate(s);
  const DpTraffic d = simulate_dp(s);
  EXPECT_EQ(d.all_reduce, 4 * kParameters);
  EXPECT_EQ(d.reduce_scatter, 0);
}

// Megatron-DeepSpeed's BF16_Optimizer (distributed_optimizer_grad_reduce all_reduce):
// the same padded buffer all-reduced instead of reduce-scattered, and the same parameter
// all-gather after the step as Megatron-Core's distributed optimizer; the optimizer state is
// as sharded (the same held bytes), and no slice of the sum is received apart.
TEST(SimGradBuffer, AllReducedShardedOptimizerMovesThePaddedBucketWhole) {
  Scenario s = dp3_gpt();
  s.parallelism.use_distributed_optimizer = true;
  validate(s);
  const DpTraffic scattered = simulate_dp(s);
  s.parallelism.distributed_optimizer_grad_reduce = "all_reduce";
  validate(s);
  const DpTraffic reduced = simulate_dp(s);
  EXPECT_EQ(reduced.all_reduce, 4 * kPadded);  // fp32 gradients, padded as the distributed one
  EXPECT_EQ(reduced.reduce_scatter, 0);
  // The fp32 parameters gathered whole: the buffer, padding included, once.
  EXPECT_EQ(scattered.all_gather, 4 * kPadded);
  EXPECT_EQ(reduced.all_gather, scattered.all_gather);
  EXPECT_EQ(reduced.held.at("optimizer"), scattered.held.at("optimizer"));
}

// The padding is memory: values and gradients, fp32 each (8 bytes an element), grow by the
// extra padding of the high-bus-bandwidth rule, and the reduce-scatter moves it. Rank 0's
// third of the bucket grows too, from 235,008 / 3 = 78,336 to 393,216 / 3 = 131,072
// elements, all of them parameters (the buffer's first 234,880): its Adam moments (two fp32
// states) grow by 8 bytes for each of the 52,736 more.
TEST(SimGradBuffer, HighBusBandwidthPaddingIsMovedAndHeld) {
  Scenario s = dp3_gpt();
  s.parallelism.use_distributed_optimizer = true;
  validate(s);
  const DpTraffic plain = simulate_dp(s);
  s.parallelism.ddp_pad_buckets_for_high_nccl_busbw = true;
  const DpTraffic busbw = simulate_dp(s);
  EXPECT_EQ(busbw.reduce_scatter, 4 * kPaddedBusbw);
  EXPECT_EQ(busbw.peak - plain.peak, 8 * (kPaddedBusbw - kPadded) + 8 * (131'072 - 78'336));
}

// bf16 runs reduce fp32 gradients (Megatron forces accumulate_allreduce_grads_in_fp32)
// unless grad_reduce_in_bf16: then every dp collective's bytes halve, with the distributed
// optimizer and without.
struct Bf16Runs {
  DpTraffic fp32, bf16;  // the bf16 run reducing in fp32, then with grad_reduce_in_bf16
};
Bf16Runs bf16_runs(bool distributed) {
  Scenario s = dp3_gpt();
  s.training.bf16 = true;
  s.parallelism.use_distributed_optimizer = distributed;
  validate(s);
  const DpTraffic fp32 = simulate_dp(s);
  s.training.grad_reduce_in_bf16 = true;
  return {fp32, simulate_dp(s)};
}

TEST(SimGradBuffer, GradReduceInBf16HalvesTheDpBytes) {
  for (const bool distributed : {true, false}) {
    const auto [fp32, bf16] = bf16_runs(distributed);
    const std::int64_t fp32_bytes = distributed ? fp32.reduce_scatter : fp32.all_reduce;
    const std::int64_t bf16_bytes = distributed ? bf16.reduce_scatter : bf16.all_reduce;
    EXPECT_EQ(fp32_bytes, 4 * (distributed ? kPadded : kParameters)) << distributed;
    EXPECT_EQ(2 * bf16_bytes, fp32_bytes) << distributed;
  }
}

// Under grad_reduce_in_bf16 the gradient buffer is Megatron's main_grad in bf16, which the
// weight-gradient GEMMs accumulate into and the reduce-scatter reads as it is: no cast
// before the reduction and none back, only Megatron's copy of the rank's one slice into
// fp32 for the optimizer (one copy more than with fp32 reduction; tandem had cast the bucket
// to bf16 before reducing it, two). The buffer holds 2 bytes an element less, and the peak
// falls during the backward, where the buffer is all that differs: 2 · 235,008 bytes (the
// fp32 copy of the slice comes after the activations are freed).
TEST(SimGradBuffer, Bf16ReductionHoldsABf16BufferAndCastsNothing) {
  const auto [fp32, bf16] = bf16_runs(true);
  EXPECT_EQ(bf16.copies, fp32.copies + 1);
  EXPECT_EQ(fp32.peak - bf16.peak, 2 * kPadded);
}

// What holds rank 0's high-water mark (the last backward), by use, counted by hand: the
// bf16 weights and the gradient buffer (2 or 4 bytes) over the whole padded buffer; the
// optimizer's fp32 main values and Adam's two moments (12 bytes) over rank 0's third of it,
// 78,336 elements; no FP8. The uses add up to the peak, and the two runs differ only in the
// gradients.
TEST(SimGradBuffer, TheHighWaterMarkIsSplitByWhatHoldsIt) {
  const auto [fp32, bf16] = bf16_runs(true);
  for (const auto* run : {&fp32, &bf16}) {
    const bool sixteen = run == &bf16;
    EXPECT_EQ(run->held.at("weights"), 2 * kPadded);
    EXPECT_EQ(run->held.at("gradients"), (sixteen ? 2 : 4) * kPadded);
    EXPECT_EQ(run->held.at("optimizer"), 12 * 78'336);
    EXPECT_EQ(run->held.at("fp8"), 0);
    std::int64_t sum = 0;
    for (const auto& [use, bytes] : run->held) sum += bytes;
    EXPECT_EQ(sum, run->peak);
    EXPECT_GT(run->held.at("activations"), 0);
  }
  EXPECT_EQ(fp32.held.at("activations"), bf16.held.at("activations"));
  EXPECT_EQ(fp32.held.at("communication"), bf16.held.at("communication") * 2);
}

}  // namespace
}  // namespace tandem::sim
