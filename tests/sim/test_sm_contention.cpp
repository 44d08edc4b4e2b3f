// The SMs NCCL's kernels take from compute (sim/sm_contention.hpp): the block count NCCL
// launches, the time owed by compute that overlapped a collective (whichever of the two is
// told first), and a simulated step in which the tensor-parallel all-reduce overlaps the
// weight-gradient GEMM, slower by what the model owes, against one where they run in series.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "sim/sm_contention.hpp"
#include "tests/sim/priced_options.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// NCCL's ncclTopoPostset: the search's channels doubled; across nodes on Hopper (sm 90)
// doubled again while under 16; NVLS as it is.
TEST(SmContention, NcclBlocksFollowNcclsDuplication) {
  EXPECT_EQ(nccl_blocks(12, false, 80, false), 24);  // A100 in a node: 12 rings, 24 blocks
  EXPECT_EQ(nccl_blocks(16, false, 90, false), 32);
  EXPECT_EQ(nccl_blocks(1, true, 90, false), 4);  // one NIC across H100 nodes
  EXPECT_EQ(nccl_blocks(8, true, 90, false), 16);
  EXPECT_EQ(nccl_blocks(1, true, 80, false), 2);  // not on Ampere
  EXPECT_EQ(nccl_blocks(16, false, 90, true), 16);
}

// 100 SMs; compute over [0, 10); a 20-block collective over [5, 15): the 5 s of compute it
// overlapped ran on 80 SMs, 5 · 20 / 80 = 1.25 s more, owed once.
TEST(SmContention, OverlappedComputeOwesTheSmsTheCollectiveHeld) {
  SmContention c(100, 80);
  c.compute_ran(0, 10);
  c.collective_ran(5, 15, 20);
  EXPECT_DOUBLE_EQ(c.take_delay(), 1.25);
  EXPECT_DOUBLE_EQ(c.take_delay(), 0.0);
  c.compute_ran(15, 20);  // after the collective: nothing
  EXPECT_DOUBLE_EQ(c.take_delay(), 0.0);
  EXPECT_DOUBLE_EQ(c.total_delay(), 1.25);
}

// A collective whose time is known when it is issued (told before the compute it overlaps):
// the compute told later owes it, once; a collective over idle compute owes nothing; blocks
// are capped at half the SMs.
TEST(SmContention, EachPairIsCountedOnceWhicheverComesFirst) {
  SmContention c(100, 90);
  c.collective_ran(0, 4, 80);  // held as 50 of 100
  c.compute_ran(2, 6);         // 2 s overlapped at half speed: 2 more
  EXPECT_DOUBLE_EQ(c.take_delay(), 2.0);
  c.compute_ran(6, 8);
  c.collective_ran(20, 30, 10);  // the compute stream idle meanwhile
  EXPECT_DOUBLE_EQ(c.take_delay(), 0.0);
}

struct StepGemms {
  double gemm = 0;        // the last iteration's GEMM seconds
  double contention = 0;  // of which owed to the SMs NCCL held (RankReport)
};

StepGemms gemm_seconds_of_step(bool async_allreduce, bool holds_sms) {
  const auto r = testing::in_child([&] {
    Scenario s;
    s.model.num_layers = 2;
    s.model.hidden_size = 4096;
    s.model.num_attention_heads = 32;
    s.model.seq_length = 2048;
    s.parallelism.tensor_model_parallel_size = 8;
    s.training.async_tensor_model_parallel_allreduce = async_allreduce;
    s.training.micro_batch_size = 4;
    s.training.global_batch_size = 4;
    s.training.bf16 = true;
    s.cluster.world_size = 8;
    const Topology t = load_topology("dgx-a100-80g");
    SimulateOptions o = priced_options(t);
    o.nccl_holds_sms = holds_sms;
    const SimReport rep = simulate(s, t, o);
    return nlohmann::json{{"gemm", rep.ranks.front().iteration_op_seconds.at("gemm")},
                          {"contention", rep.ranks.front().sm_contention_seconds},
                          {"seconds", rep.iteration_seconds}};
  });
  EXPECT_FALSE(r.contains("error")) << r;
  return {r.value("gemm", 0.0), r.value("contention", -1.0)};
}

// Megatron's tensor-parallel layers without sequence parallelism all-reduce the input
// gradient while the weight gradient's GEMM runs (async_tensor_model_parallel_allreduce):
// on an A100 (108 SMs) NCCL's 24 blocks leave that GEMM 84, so the step's GEMMs take longer
// than with collectives that hold nothing; with the all-reduce in series they do not.
TEST(SmContention, TheOverlappedAllReduceSlowsTheWeightGradientGemm) {
  const StepGemms free = gemm_seconds_of_step(true, false);
  const StepGemms held = gemm_seconds_of_step(true, true);
  EXPECT_GT(held.gemm, free.gemm * 1.01) << free.gemm << " " << held.gemm;
  // At most every GEMM slowed by 24 / 84.
  EXPECT_LT(held.gemm, free.gemm * (1 + 24.0 / 84.0));
  // The report says what the SMs cost: the GEMM time added, less what the next iteration
  // would pay (the last owed span has no GEMM after it in a one-iteration run).
  EXPECT_DOUBLE_EQ(free.contention, 0.0);
  EXPECT_GE(held.contention, held.gemm - free.gemm - 1e-12);
  EXPECT_LT(held.contention, 2 * (held.gemm - free.gemm));
  const StepGemms series_free = gemm_seconds_of_step(false, false);
  const StepGemms series_held = gemm_seconds_of_step(false, true);
  EXPECT_NEAR(series_held.gemm, series_free.gemm, 1e-3 * series_free.gemm);
  EXPECT_DOUBLE_EQ(series_held.contention, 0.0);
}

}  // namespace
}  // namespace tandem::sim
