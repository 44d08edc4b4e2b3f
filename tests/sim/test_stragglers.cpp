// Stragglers (sim/stragglers.hpp): the expected slowest of n nodes, and a simulated step
// whose gradient sync waits for the data-parallel group's slowest node. The expected
// maxima are the tabulated order statistics of the standard normal (E[max of 2] = 1/√π,
// of 3 = 3/(2√π), of 10 = 1.53875, of 100 = 2.50759), not values this code produced.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <stdexcept>

#include "sim/sim_runner.hpp"
#include "sim/stragglers.hpp"
#include "tests/sim/priced_options.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

TEST(Stragglers, ExpectedMaximumOfNormalsMatchesTheTables) {
  EXPECT_EQ(expected_max_of_normals(0), 0.0);
  EXPECT_EQ(expected_max_of_normals(1), 0.0);
  EXPECT_NEAR(expected_max_of_normals(2), 1 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_of_normals(3), 1.5 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_of_normals(4), 1.02938, 1e-5);
  EXPECT_NEAR(expected_max_of_normals(10), 1.53875, 1e-5);
  EXPECT_NEAR(expected_max_of_normals(100), 2.50759, 1e-5);
  // More nodes, a slower slowest: it grows like √(2 ln n), without bound.
  EXPECT_GT(expected_max_of_normals(11200), expected_max_of_normals(2240));
  EXPECT_LT(expected_max_of_normals(11200), std::sqrt(2 * std::log(11200.0)));
}

TEST(Stragglers, TheWaitScalesWithTheSpread) {
  EXPECT_EQ(straggler_wait_fraction(0, 64), 0.0);
  EXPECT_EQ(straggler_wait_fraction(0.05, 1), 0.0);
  EXPECT_DOUBLE_EQ(straggler_wait_fraction(0.05, 10), 0.05 * expected_max_of_normals(10));
}

// A small GPT, tp 8 on each node, data parallel over `dp` nodes, two microbatches a replica
// (with `distributed`, the distributed optimizer's reduce-scatters overlapped with the
// backward).
Scenario small_gpt(int dp, bool distributed = false) {
  Scenario s;
  s.model.num_layers = 4;
  s.model.hidden_size = 256;
  s.model.num_attention_heads = 8;
  s.model.seq_length = 128;
  s.model.vocab_size = 1024;
  s.parallelism.tensor_model_parallel_size = 8;
  s.parallelism.use_distributed_optimizer = distributed;
  s.parallelism.overlap_grad_reduce = distributed;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 4 * dp;
  s.training.bf16 = true;
  s.cluster.world_size = 8 * dp;
  s.cluster.gpus_per_node = 8;
  validate(s);
  return s;
}

struct Step {
  double seconds = 0, wait = 0;
};

// One iteration of `s` on dgx-a100-80g with the given node spread (in a child: one SimGrid
// engine per process).
Step simulate_step(const Scenario& s, double spread, SimMode mode = SimMode::symmetric) {
  const auto j = testing::in_child([&] {
    Topology t = load_topology("dgx-a100-80g");
    t.node.node_time_spread = spread;
    SimulateOptions o = priced_options(t);
    o.mode = mode;
    const SimReport r = simulate(s, t, o);
    return nlohmann::json{{"seconds", r.iteration_seconds}, {"wait", r.straggler_wait_seconds}};
  });
  if (j.contains("error")) throw std::runtime_error(j.dump());
  return {j.at("seconds").get<double>(), j.at("wait").get<double>()};
}

// Without the distributed optimizer the gradients are all-reduced after the last backward:
// the sync waits spread · E[max of 4] of the step so far, and the step is that much longer.
TEST(Stragglers, TheGradientSyncWaitsForTheSlowestOfTheNodes) {
  const Scenario s = small_gpt(4);
  const Step even = simulate_step(s, 0);
  const Step spread = simulate_step(s, 0.05);
  EXPECT_EQ(even.wait, 0.0);
  const double whole_step = 0.05 * expected_max_of_normals(4) * even.seconds;
  EXPECT_GT(spread.wait, 0.7 * whole_step);  // the sync comes after the backward
  EXPECT_LT(spread.wait, whole_step);
  EXPECT_NEAR(spread.seconds - even.seconds, spread.wait, 0.01 * spread.wait);
  // Every rank simulated: the same step.
  EXPECT_NEAR(simulate_step(s, 0.05, SimMode::full).seconds, spread.seconds, 1e-6 * spread.seconds);
}

// The distributed optimizer with its gradients all-reduced (Megatron-DeepSpeed's
// BF16_Optimizer) syncs with that all-reduce, after the last backward: it waits as the plain
// all-reduce does, though no reduce-scatter runs.
TEST(Stragglers, AnAllReducedShardedOptimizerWaitsAtItsAllReduce) {
  Scenario s = small_gpt(4);
  s.parallelism.use_distributed_optimizer = true;
  s.parallelism.distributed_optimizer_grad_reduce = "all_reduce";
  validate(s);
  const Step even = simulate_step(s, 0);
  const Step spread = simulate_step(s, 0.05);
  const double whole_step = 0.05 * expected_max_of_normals(4) * even.seconds;
  EXPECT_GT(spread.wait, 0.7 * whole_step);
  EXPECT_LT(spread.wait, whole_step);
  EXPECT_NEAR(spread.seconds - even.seconds, spread.wait, 0.01 * spread.wait);
}

// Replicas on one node share its host: no straggler to wait for.
TEST(Stragglers, ReplicasOnOneNodeDoNotWait) {
  Scenario s = small_gpt(1);
  s.parallelism.tensor_model_parallel_size = 1;
  s.training.global_batch_size = 32;
  validate(s);
  const Step even = simulate_step(s, 0);
  const Step spread = simulate_step(s, 0.05);
  EXPECT_EQ(spread.wait, 0.0);
  EXPECT_DOUBLE_EQ(spread.seconds, even.seconds);
}

// With the distributed optimizer and the reduce-scatters overlapped with the backward,
// the last bucket's sync waits too (the slowest node is late throughout): the step grows by
// the wait, and more nodes wait longer.
TEST(Stragglers, OverlappedBucketsWaitToo) {
  const Step even = simulate_step(small_gpt(4, true), 0);
  const Step spread = simulate_step(small_gpt(4, true), 0.05);
  EXPECT_GT(spread.wait, 0.5 * 0.05 * expected_max_of_normals(4) * even.seconds);
  EXPECT_NEAR(spread.seconds - even.seconds, spread.wait, 0.05 * spread.wait);
  const Step sixteen = simulate_step(small_gpt(16, true), 0.05);
  EXPECT_GT(sixteen.wait, spread.wait);
}

}  // namespace
}  // namespace tandem::sim
