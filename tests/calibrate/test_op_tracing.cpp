// Per-op slices of a real run (train/op_tracing_device): the decorator forwards every op
// to the binding it wraps (results unchanged), records one slice per op with the shape key
// a calibration row uses, and — the point of it — the keys of a real training step are the
// very keys the simulator issues for that step, so a table built from the slices
// (tandem calibrate --from-trace) prices every simulated op by an exact row.
// SimGrid's engine can start once per process, so the simulation runs in a child.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "core/parallel_context.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "kernels/cpu/threads.hpp"
#include "schedules/layout.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "tests/sim/counting_samples.hpp"
#include "tests/tools/in_child.hpp"
#include "tools/calibration_table.hpp"
#include "topology/topology_io.hpp"
#include "train/op_tracing_device.hpp"
#include "train/trainer.hpp"

namespace tandem {
namespace {

using testing::in_child;

using Key =
    std::tuple<std::string, std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

Key key_of_slice(const nlohmann::json& e) {
  const auto& a = e.at("args");
  return {e.at("name"), a.at("dtype"), a.at("m"), a.at("n"), a.at("k"), a.at("batch")};
}

TEST(OpTracingDevice, ForwardsEachOpAndRecordsItsShapeKey) {
  CpuDevice cpu;
  RunTrace trace;
  OpTracingDevice device(cpu, trace);
  EXPECT_EQ(device.kind(), "cpu");
  Stream& s = device.default_stream();
  // C(6, 5) = A(6, 4) · B(5, 4)ᵀ with A = 1 and B = 2: every entry 4 · 1 · 2 = 8.
  Tensor a = device.allocate({6, 4}, DType::fp32), b = device.allocate({5, 4}, DType::fp32),
         c = device.allocate({6, 5}, DType::fp32);
  device.fill(s, a, 1.0f);
  device.fill(s, b, 2.0f);
  device.gemm(s, {.a = a, .b = b, .c = c, .transpose_b = true});
  std::vector<float> host(30);
  device.download(s, c, host);
  for (float x : host) EXPECT_EQ(x, 8.0f);
  // Attention over qkv (T 8, B 2, 3, heads 2, head_dim 4; 8·2·3·2·4 = 384 elements):
  // m = n = T, k = 4, batch = B · heads.
  Tensor qkv = device.allocate({8, 2, 3, 2, 4}, DType::fp32),
         out = device.allocate({8, 2, 2, 4}, DType::fp32),
         probs = device.allocate({2, 2, 8, 8}, DType::fp32);
  device.fill(s, qkv, 0.5f);
  device.attention(s, {.qkv = qkv, .output = out, .probs = probs});
  // A (rows, C) op on a 3-d tensor: rows = 2 · 3.
  Tensor x = device.allocate({2, 3, 8}, DType::fp32), y = device.allocate({2, 3, 8}, DType::fp32);
  device.gelu(s, x, y);

  const auto part = trace.part();
  std::vector<Key> keys;
  for (const auto& e : part) {
    EXPECT_EQ(e.at("cat"), "op");
    EXPECT_LE(e.at("start_ns").get<std::int64_t>(), e.at("end_ns").get<std::int64_t>());
    keys.push_back(key_of_slice(e));
  }
  const std::vector<Key> want = {{"fill", "fp32", 24, 0, 0, 1},  {"fill", "fp32", 20, 0, 0, 1},
                                 {"gemm", "fp32", 6, 5, 4, 1},   {"download", "fp32", 30, 0, 0, 1},
                                 {"fill", "fp32", 384, 0, 0, 1}, {"attention", "fp32", 8, 8, 4, 4},
                                 {"gelu", "fp32", 6, 8, 0, 1}};
  EXPECT_EQ(keys, want);
}

Scenario small_gpt() {
  Scenario s;
  s.model.num_layers = 2;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.seq_length = 32;
  s.model.vocab_size = 500;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 4;
  s.cluster.world_size = 1;
  s.cluster.gpus_per_node = 8;
  return s;
}

TEST(OpTracingDevice, AStepsSlicesHaveTheKeysTheSimulatorIssues) {
  Scenario s = small_gpt();
  validate(s);
  kernels::cpu::set_num_threads(1);
  CpuDevice cpu;
  RunTrace trace;
  OpTracingDevice device(cpu, trace);
  SelfCommunicator tp{device, "tp"}, pp{device, "pp"}, dp{device, "dp"}, mp{device, "tp-pp"};
  testing::CountingSamples samples(s.model.seq_length, s.model.vocab_size);
  const auto layout = make_layout({1, 1, 1, 1, 1, s.parallelism.order});
  std::vector<Key> traced;
  {
    Trainer trainer(
        s, make_parallel_context(layout, 0), device,
        TrainerGroups{.tp = &tp, .pp = &pp, .dp = &dp, .model_parallel = &mp, .amax = &dp}, samples,
        nullptr);
    trainer.train_step();
  }
  for (const auto& e : trace.part()) traced.push_back(key_of_slice(e));

  const auto simulated = in_child([&] {
    const Topology t = load_topology("cpu-host");
    auto cost = std::make_shared<sim::CostModel>(t.gpu);
    sim::SimulateOptions o;
    o.mode = sim::SimMode::full;
    o.record_ops = true;
    o.pricer = [cost](const sim::OpDesc& op) { return cost->seconds(op); };
    const auto r = sim::simulate(s, t, o);
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : r.ranks.at(0).ops)
      ops.push_back(
          {op.op.op, std::string(dtype_name(op.op.dtype)), op.op.m, op.op.n, op.op.k, op.op.batch});
    return ops;
  });
  ASSERT_FALSE(simulated.is_object()) << simulated.dump();
  std::vector<Key> sim_keys;
  for (const auto& o : simulated) sim_keys.push_back({o[0], o[1], o[2], o[3], o[4], o[5]});
  ASSERT_FALSE(traced.empty());
  ASSERT_EQ(traced.size(), sim_keys.size());
  for (std::size_t i = 0; i < traced.size(); ++i)
    ASSERT_EQ(traced[i], sim_keys[i]) << "op " << i << " differs";
}

TEST(OpTracingDevice, TheMergedTraceBecomesATableRowPerShape) {
  CpuDevice cpu;
  RunTrace trace;
  OpTracingDevice device(cpu, trace);
  Stream& s = device.default_stream();
  Tensor x = device.allocate({64, 32}, DType::fp32), y = device.allocate({64, 32}, DType::fp32);
  for (int i = 0; i < 5; ++i) device.gelu(s, x, y);
  for (int i = 0; i < 3; ++i) device.fill(s, x, 0.0f);
  const auto path = std::filesystem::path(::testing::TempDir()) / "tandem_op_trace.json";
  write_merged_trace(path, {trace.part()},
                     {make_parallel_context(make_layout({1, 1, 1, 1, 1}), 0)});
  std::ifstream in(path);
  const auto timings = cli::op_timings_of_trace(nlohmann::json::parse(in), path.string());
  ASSERT_EQ(timings.size(), 2u);  // by key: fill before gelu
  EXPECT_EQ(timings[0].shape.op, "fill");
  EXPECT_EQ(timings[0].shape.m, 64 * 32);
  EXPECT_EQ(timings[0].repetitions, 3);
  EXPECT_EQ(timings[1].shape.op, "gelu");
  EXPECT_EQ(timings[1].shape.m, 64);
  EXPECT_EQ(timings[1].shape.n, 32);
  EXPECT_EQ(timings[1].repetitions, 5);
  for (const auto& t : timings) {
    EXPECT_GT(t.seconds, 0);
    EXPECT_LE(t.min_seconds, t.seconds);
    EXPECT_LE(t.seconds, t.max_seconds);
  }
}

}  // namespace
}  // namespace tandem
