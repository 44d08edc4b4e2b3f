// The sim binding runs the training step unchanged, and what it predicts follows from the
// platform and the schedule:
//  - one code path: for a configuration both bindings run, the sim device sees the very
//    op sequence the cpu device sees, and its memory high-water mark equals the cpu
//    allocator's to the byte;
//  - collectives take the time NCCL's tuner predicts over the platform's links;
//  - full fidelity and symmetric mode agree;
//  - the pipeline bubble is the schedule's (p − 1)/(m + p − 1);
//  - overlapping the dp reduction with backward hides it.
// SimGrid's engine can start once per process, so each simulation runs in a child.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <span>
#include <string>

#include "core/error.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "schedules/layout.hpp"
#include "sim/cost_model.hpp"
#include "sim/host_issue.hpp"
#include "sim/platform.hpp"
#include "sim/sim_communicator.hpp"
#include "sim/sim_runner.hpp"
#include "sim/simgrid_config.hpp"
#include "tests/sim/counting_samples.hpp"
#include "tests/sim/priced_options.hpp"
#include "tests/sim/recording_device.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"
#include "train/trainer.hpp"

namespace tandem::sim {
namespace {

using testing::in_child;

SimulateOptions options_for(const Topology& t, SimMode mode) {
  SimulateOptions o = priced_options(t);
  o.mode = mode;
  return o;
}

// The schedule and communication tests compare with closed forms of an idle host: the
// preset's host costs (tested by SimHost below) are zeroed unless `with_host`.
nlohmann::json simulate_in_child(const Scenario& s, const std::string& topology, SimMode mode,
                                 int iterations = 1, bool with_host = false,
                                 bool nccl_holds_sms = true) {
  return in_child([&] {
    Topology t = load_topology(topology);
    if (!with_host) {
      t.gpu.host_kernel_issue = t.gpu.host_collective_issue = Seconds(0);
      t.gpu.host_microbatch = t.gpu.host_iteration = Seconds(0);
      t.gpu.host_optimizer_tensor = t.gpu.host_unfused_softmax = Seconds(0);
      t.gpu.host_layer_timestamp = Seconds(0);
    }
    SimulateOptions o = options_for(t, mode);
    o.iterations = iterations;
    o.nccl_holds_sms = nccl_holds_sms;
    return to_json(simulate(s, t, o));
  });
}

Scenario small_gpt() {
  Scenario s;
  s.model.num_layers = 4;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.seq_length = 32;
  s.model.vocab_size = 500;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 8;
  s.cluster.world_size = 1;
  s.cluster.gpus_per_node = 8;
  return s;
}

// small_gpt at GPT-2 medium's width and sequence (hidden 1024, 16 heads, 1,024 tokens):
// kernels long enough for the host's issue and the GPU's work to be of one size.
Scenario gpt_1024() {
  Scenario s = small_gpt();
  s.model.hidden_size = 1024;
  s.model.num_attention_heads = 16;
  s.model.seq_length = 1024;
  return s;
}

// The distributed optimizer's parameter all-gather with --overlap-param-gather, in bf16:
// launched at the step's start and waited for bucket by bucket in forward, so the step is
// shorter than with the gathers ended before it. 16 layers of hidden 4096 at tp 8 × dp 4 on
// DGX A100 nodes: each dp group has one GPU a node, so a rank's 400M parameters (800 MB of
// bf16, ten buckets) cross one 200 Gb/s NIC, some 30 ms, against a forward of one
// microbatch of 8 × 1024 tokens of about the same length. And every step costs about the
// same: the first gathers the parameters it already has, so a one-iteration simulation is
// within 2 % of the second of two (the first also refreshes its whole 16-bit copy, 2.4 GB
// of traffic, where later steps round only their own slice).
TEST(SimBinding, OverlappedParameterGathersHideUnderForwardAndEveryStepCostsTheSame) {
  Scenario s = small_gpt();
  s.model.num_layers = 16;
  s.model.hidden_size = 4096;
  s.model.num_attention_heads = 32;
  s.model.seq_length = 1024;
  s.model.vocab_size = 50304;
  s.parallelism.tensor_model_parallel_size = 8;
  s.parallelism.sequence_parallel = true;
  s.cluster.world_size = 32;
  s.training.micro_batch_size = 8;
  s.training.global_batch_size = 32;
  s.training.bf16 = true;
  s.parallelism.use_distributed_optimizer = true;
  s.parallelism.overlap_grad_reduce = true;
  validate(s);
  Scenario overlapped = s;
  overlapped.parallelism.overlap_param_gather = true;
  validate(overlapped);
  auto seconds = [](const nlohmann::json& j) {
    if (j.contains("error")) throw std::runtime_error(j.dump());
    return j.at("iteration_seconds").get<double>();
  };
  const auto mode = SimMode::symmetric;
  const double ended_first = seconds(simulate_in_child(s, "dgx-a100-80g", mode));
  const double one = seconds(simulate_in_child(overlapped, "dgx-a100-80g", mode));
  const double second = seconds(simulate_in_child(overlapped, "dgx-a100-80g", mode, 2));
  EXPECT_LT(one, 0.9 * ended_first) << one << " s, gathers ended first: " << ended_first;
  EXPECT_NEAR(one, second, 2e-2 * second) << one << " " << second;
}

TEST(SimBinding, SameOpsAndSameMemoryHighWaterMarkAsTheCpuBinding) {
  Scenario s = small_gpt();
  validate(s);
  const int iterations = 2;
  // The cpu binding, one process.
  CpuDevice cpu;
  testing::RecordingDevice recorded(cpu);
  SelfCommunicator tp{recorded, "tp"}, pp{recorded, "pp"}, dp{recorded, "dp"},
      mp{recorded, "tp-pp"};
  testing::CountingSamples samples(s.model.seq_length, s.model.vocab_size);
  const auto layout = make_layout({1, 1, 1, 1, 1, s.parallelism.order});
  std::vector<std::string> cpu_ops;
  std::int64_t cpu_peak = 0;
  {
    Trainer trainer(
        s, make_parallel_context(layout, 0), recorded,
        TrainerGroups{.tp = &tp, .pp = &pp, .dp = &dp, .model_parallel = &mp, .amax = &dp}, samples,
        nullptr);
    for (int i = 0; i < iterations; ++i) trainer.train_step();
    cpu_peak = cpu.memory().peak().value;
    for (const auto& line : recorded.log())
      if (line.rfind("allocate", 0) != 0) cpu_ops.push_back(line.substr(0, line.find(' ')));
  }
  // The sim binding, the same scenario.
  const auto sim = in_child([&] {
    const Topology t = load_topology("dgx-a100-80g");
    SimulateOptions o = options_for(t, SimMode::full);
    o.iterations = iterations;
    o.record_ops = true;
    const SimReport r = simulate(s, t, o);
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : r.ranks.at(0).ops) ops.push_back(op.op.op);
    return nlohmann::json{{"peak", r.ranks.at(0).peak_memory_bytes}, {"ops", ops}};
  });
  ASSERT_FALSE(sim.contains("error")) << sim.dump();
  EXPECT_EQ(sim.at("peak").get<std::int64_t>(), cpu_peak);
  EXPECT_GT(cpu_peak, 0);
  const auto sim_ops = sim.at("ops").get<std::vector<std::string>>();
  ASSERT_EQ(sim_ops.size(), cpu_ops.size());
  for (std::size_t i = 0; i < cpu_ops.size(); ++i)
    ASSERT_EQ(sim_ops[i], cpu_ops[i]) << "op " << i << " differs";
}

// One iteration of `s` on the A100 preset with every op recorded (in a child: one SimGrid
// engine per process); `pick` takes from the report what the test compares.
nlohmann::json recorded_run(const Scenario& s,
                            const std::function<nlohmann::json(const SimReport&)>& pick) {
  const auto j = in_child([&] {
    const Topology t = load_topology("dgx-a100-80g");
    SimulateOptions o = options_for(t, SimMode::full);
    o.record_ops = true;
    return pick(simulate(s, t, o));
  });
  if (j.contains("error")) throw std::runtime_error(j.dump());
  return j;
}

// Gradient bytes rank 0 all-reduces over dp in one iteration of `s` (world 2, dp 2): the
// buckets, not the one-number reductions (loss, found-inf) beside them.
std::int64_t dp_all_reduce_bytes(const Scenario& s) {
  return recorded_run(s,
                      [](const SimReport& r) {
                        std::int64_t bytes = 0;
                        for (const auto& c : r.ranks.at(0).collectives)
                          if (c.rfind("all_reduce dp ", 0) == 0) {
                            const std::int64_t b = std::stoll(c.substr(c.rfind(' ') + 1));
                            if (b > 16) bytes += b;
                          }
                        return nlohmann::json{{"bytes", bytes}};
                      })
      .at("bytes")
      .get<std::int64_t>();
}

// Megatron's data-parallel gradient reduction: fp16 runs reduce 16-bit gradients unless
// accumulate_allreduce_grads_in_fp32 is set; bf16 runs always reduce in fp32.
TEST(SimBinding, Fp16GradientsAreReducedIn16BitsUnlessAccumulatedInFp32) {
  Scenario s = small_gpt();
  s.cluster.world_size = 2;
  s.training.fp16 = true;
  validate(s);
  const std::int64_t fp16 = dp_all_reduce_bytes(s);
  s.training.accumulate_allreduce_grads_in_fp32 = true;
  const std::int64_t fp32 = dp_all_reduce_bytes(s);
  s.training.fp16 = false;
  s.training.bf16 = true;
  s.training.accumulate_allreduce_grads_in_fp32 = false;
  const std::int64_t bf16 = dp_all_reduce_bytes(s);
  EXPECT_GT(fp16, 0);
  EXPECT_EQ(2 * fp16, fp32);
  EXPECT_EQ(bf16, fp32);
}

// Rank 0's ops (name and bytes) in one iteration of `s`, and the iteration time.
// How many of the ops that ops_and_time recorded are `name`.
int count_ops(const nlohmann::json& j, const std::string& name) {
  int n = 0;
  for (const auto& op : j.at("ops")) n += op.at("op") == name;
  return n;
}

nlohmann::json ops_and_time(const Scenario& s) {
  return recorded_run(s, [](const SimReport& r) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : r.ranks.at(0).ops)
      ops.push_back({{"op", op.op.op}, {"bytes", op.op.bytes}});
    return nlohmann::json{{"ops", ops}, {"seconds", r.iteration_seconds}};
  });
}

// fp16's loss scaler (Megatron's MixedPrecisionOptimizer): after the gradients are reduced,
// one unscale-and-check pass over this rank's main gradients per bucket (4 bytes read and
// written an element), and the found-inf flag max-reduced; bf16 runs have no scaler and
// neither, unless a constant loss_scale asks for one.
TEST(SimBinding, Fp16UnscalesAndChecksTheGradientsOnce) {
  Scenario s = small_gpt();
  s.cluster.world_size = 2;
  s.parallelism.use_distributed_optimizer = true;
  s.training.fp16 = true;
  validate(s);
  const auto fp16 = ops_and_time(s);
  std::int64_t bytes = 0, sum_squares = 0;
  for (const auto& op : fp16.at("ops")) {
    if (op.at("op") == "check_finite_and_unscale") bytes += op.at("bytes").get<std::int64_t>();
    if (op.at("op") == "sum_squares") sum_squares += op.at("bytes").get<std::int64_t>();
  }
  EXPECT_EQ(count_ops(fp16, "check_finite_and_unscale"), 1);  // one bucket, this rank's half
  // The norm reads this rank's parameters' gradients once (4 bytes an element); the check
  // reads and writes them and the slice's padding.
  EXPECT_GE(bytes, 2 * sum_squares);
  EXPECT_LT(bytes, 2 * sum_squares + 8 * 64 * 64) << bytes << " " << sum_squares;
  s.training.fp16 = false;
  s.training.bf16 = true;
  EXPECT_EQ(count_ops(ops_and_time(s), "check_finite_and_unscale"), 0);
  s.training.loss_scale = 1024;
  EXPECT_EQ(count_ops(ops_and_time(s), "check_finite_and_unscale"), 1);
}

// Without gradient_accumulation_fusion every weight-gradient GEMM after a chunk's first
// backward of the step writes a fresh fp16 gradient that one more kernel adds: 4 linear
// weights a layer and the output layer, in 3 of the 4 microbatches; each add reads two
// gradients and writes one (6 bytes an element).
TEST(SimBinding, UnfusedGradientAccumulationAddsOneKernelPerWeightAfterTheFirstMicrobatch) {
  Scenario s = small_gpt();  // 4 layers, micro batch 2 of global 8: 4 microbatches
  s.training.fp16 = true;
  validate(s);
  auto adds = [](const nlohmann::json& j, double* bytes) {
    int n = 0;
    for (const auto& op : j.at("ops"))
      if (op.at("op") == "add") {
        ++n;
        *bytes += op.at("bytes").get<double>();
      }
    return n;
  };
  double fused_bytes = 0, unfused_bytes = 0;
  const auto fused = ops_and_time(s);
  s.training.gradient_accumulation_fusion = false;
  const auto unfused = ops_and_time(s);
  const int extra = adds(unfused, &unfused_bytes) - adds(fused, &fused_bytes);
  const std::int64_t h = s.model.hidden_size, vocab = 512;  // 500 padded to a multiple of 128
  const std::int64_t layer_weights = 3 * h * h + h * h + 4 * h * h + 4 * h * h;
  EXPECT_EQ(extra, 3 * (4 * 4 + 1));
  EXPECT_DOUBLE_EQ(unfused_bytes - fused_bytes,
                   3.0 * 6.0 * static_cast<double>(4 * layer_weights + vocab * h));
  EXPECT_EQ(unfused.at("ops").size() - fused.at("ops").size(), static_cast<std::size_t>(extra));
  EXPECT_GT(unfused.at("seconds").get<double>(), fused.at("seconds").get<double>());
}

// Megatron's bias fusions: each layer's forward issues bias_gelu for fc1's bias_add and
// GeLU, and bias_dropout_add for the projection's and fc2's bias_add and residual add: 3
// kernels fewer a layer and microbatch, and the bias adds' memory traffic (each reads and
// writes its output: fc1's 4h columns, the projection's and fc2's h) no longer paid.
TEST(SimBinding, BiasFusionsSaveThreeKernelsAndTheBiasAddsTrafficPerLayerForward) {
  Scenario s = small_gpt();  // 4 layers, micro batch 2 of global 8: 4 microbatches
  s.training.fp16 = true;
  s.training.recompute_granularity = "none";
  validate(s);
  auto total_bytes = [](const nlohmann::json& j) {
    double b = 0;
    for (const auto& op : j.at("ops")) b += op.at("bytes").get<double>();
    return b;
  };
  const auto fused = ops_and_time(s);
  s.training.bias_gelu_fusion = false;
  s.training.bias_dropout_fusion = false;
  const auto unfused = ops_and_time(s);
  const int passes = 4 * 4;  // layers × microbatches
  EXPECT_EQ(count_ops(fused, "bias_gelu"), passes);
  EXPECT_EQ(count_ops(fused, "bias_gelu_backward"), passes);
  EXPECT_EQ(count_ops(fused, "bias_dropout_add"), 2 * passes);
  EXPECT_EQ(count_ops(unfused, "bias_gelu") + count_ops(unfused, "bias_dropout_add"), 0);
  EXPECT_EQ(count_ops(unfused, "bias_add") - count_ops(fused, "bias_add"), 3 * passes);
  EXPECT_EQ(unfused.at("ops").size() - fused.at("ops").size(),
            static_cast<std::size_t>(3 * passes));
  const double h = static_cast<double>(s.model.hidden_size), tokens = 32.0 * 2;
  EXPECT_DOUBLE_EQ(total_bytes(unfused) - total_bytes(fused),
                   passes * 2.0 * (4 * h + h + h) * tokens * 2 /* fp16 */);
  EXPECT_GT(unfused.at("seconds").get<double>(), fused.at("seconds").get<double>());
}

// Hidden dropout: Megatron's kernels write a bool mask forward (1 byte an element) and run
// one more kernel per site backward; fused, the forward adds no kernel, unfused a dropout
// per site; the embedding has its own dropout each way.
TEST(SimBinding, HiddenDropoutAddsItsMaskBytesAndABackwardKernelPerSite) {
  Scenario s = small_gpt();  // 4 layers, 4 microbatches
  s.training.fp16 = true;
  s.training.recompute_granularity = "none";
  validate(s);
  const auto plain = ops_and_time(s);
  s.model.hidden_dropout = 0.1;
  const auto fused = ops_and_time(s);
  s.training.bias_dropout_fusion = false;
  const auto unfused = ops_and_time(s);
  const int passes = 4 * 4, microbatches = 4;
  EXPECT_EQ(count_ops(fused, "dropout_backward"), 2 * passes + microbatches);
  EXPECT_EQ(count_ops(fused, "dropout"), microbatches);  // the embedding's
  EXPECT_EQ(count_ops(unfused, "dropout"), 2 * passes + microbatches);
  EXPECT_EQ(fused.at("ops").size() - plain.at("ops").size(),
            static_cast<std::size_t>(2 * passes + 2 * microbatches));
  EXPECT_GT(fused.at("seconds").get<double>(), plain.at("seconds").get<double>());
  EXPECT_GT(unfused.at("seconds").get<double>(), fused.at("seconds").get<double>());
  // Context parallelism with hidden dropout is refused by the scenario.
  Scenario cp = s;
  cp.parallelism.context_parallel_size = 2;
  cp.cluster.world_size = 2;
  EXPECT_THROW(validate(cp), ConfigError);
}

// Seconds until every member of a group named `group` (global ranks `members` of `world`
// on a fresh platform of `topology`) has run `work` on its own communicator and device.
using GroupWork = std::function<void(SimCommunicator&, SimDevice&, int member)>;
double time_group(const std::string& topology, int world, const std::vector<int>& members,
                  const std::string& group, const GroupWork& work) {
  const auto j = in_child([&] {
    const Topology t = load_topology(topology);
    int argc = 1;
    char name[] = "test";
    char* argv[] = {name, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    configure_network_model(engine);
    const Platform p = build_platform(t, world);
    std::vector<RankCoordinates> coords(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) coords[static_cast<std::size_t>(r)].dp = r;
    ParallelSizes sizes;
    sizes.dp = world;
    SimWorld w(p.hosts, coords, sizes, SimMode::full);
    std::vector<std::unique_ptr<SimCommunicator>> comms;
    std::vector<std::unique_ptr<SimDevice>> devices;
    double finished = 0;
    for (int m : members) {
      comms.push_back(std::make_unique<SimCommunicator>(w, members, m, group, "g"));
      devices.push_back(std::make_unique<SimDevice>([](const OpDesc&) { return 0.0; }));
      auto* c = comms.back().get();
      auto* d = devices.back().get();
      simgrid::s4u::Actor::create("r" + std::to_string(m), p.hosts[static_cast<std::size_t>(m)],
                                  [c, d, m, &work, &finished] {
                                    work(*c, *d, m);
                                    finished = std::max(finished, sim_now());
                                  });
    }
    engine.run();
    return nlohmann::json{{"seconds", finished}};
  });
  if (j.contains("error")) throw std::runtime_error(j.dump());
  return j.at("seconds").get<double>();
}

// One collective on a fresh platform, timed from inside an actor.
double time_collective(const std::string& topology, int world, std::vector<int> members,
                       const std::string& kind, std::int64_t elements) {
  const auto n = static_cast<std::int64_t>(members.size());
  return time_group(topology, world, members, "dp", [&](SimCommunicator& c, SimDevice& d, int) {
    Tensor in = d.allocate(Shape{elements}, DType::fp32);
    Tensor out = d.allocate(Shape{elements * n}, DType::fp32);
    auto& st = d.default_stream();
    auto w = kind == "all_reduce" ? c.all_reduce(st, in, ReduceOp::sum) : c.all_gather(st, in, out);
    w->wait();
  });
}

// One send of `elements` fp32 from global rank `from` to `to` over a communicator of the
// two named `group`; seconds until both ends are done.
double time_send(const std::string& topology, int world, int from, int to, const std::string& group,
                 std::int64_t elements) {
  return time_group(topology, world, {from, to}, group,
                    [&](SimCommunicator& c, SimDevice& d, int m) {
                      const bool sender = m == from;
                      const P2POp op{sender ? P2POp::Kind::send : P2POp::Kind::recv,
                                     d.allocate(Shape{elements}, DType::fp32), sender ? 1 : 0};
                      c.batch_p2p(d.default_stream(), std::span<const P2POp>(&op, 1))->wait();
                    });
}

// NCCL's send/recv inside an NVLink domain runs at the rate OpenXLA measured for it
// (dgx-h100: nccl.p2p_nvlink_gbs 292 GB/s per GPU, not the 450 GB/s of the link); the
// tensor-parallel group's (userbuffers' ring exchange) at the link's; across nodes at the
// NIC's 50 GB/s, as before. Each plus the route's 1 µs (two half-latency GPU links).
TEST(SimBinding, NcclSendRecvInANodeRunsAtTheMeasuredP2pRate) {
  const std::int64_t elements = 64 << 20;  // 256 MiB
  const double bytes = 4.0 * static_cast<double>(elements);
  const double pp = time_send("dgx-h100", 16, 0, 1, "pp", elements);
  EXPECT_NEAR(pp, bytes / 292e9, 0.01 * bytes / 292e9);
  const double tp = time_send("dgx-h100", 16, 0, 1, "tp", elements);
  EXPECT_NEAR(tp, bytes / 450e9, 0.01 * bytes / 450e9);
  const double across = time_send("dgx-h100", 16, 0, 8, "pp", elements);
  EXPECT_NEAR(across, bytes / 50e9, 0.02 * bytes / 50e9);
  // Without the measured rate (dgx-a100-80g has none) the send runs at the link's 300 GB/s.
  const double a100 = time_send("dgx-a100-80g", 16, 0, 1, "pp", elements);
  EXPECT_NEAR(a100, bytes / 300e9, 0.01 * bytes / 300e9);
}

TEST(SimBinding, RingAllReduceInsideANodeTakesTheMeasuredNcclTime) {
  const Topology t = load_topology("dgx-a100-80g");
  const std::int64_t elements = 16 << 20;  // 64 MiB of fp32
  const double bytes = 4.0 * static_cast<double>(elements), n = 8;
  // nccl-tests all_reduce_perf on one DGX A100 measures 202.61 GB/s bus bandwidth at
  // 64 MiB on 8 GPUs (vTrain trace/a100/AR_GPU8_1M_1024M_LUT), the table the preset
  // carries: time = 2(n−1)/n of the buffer at that bus bandwidth.
  const double expected = 2 * (n - 1) / n * bytes / 202.61e9;
  ASSERT_EQ(t.nccl.measured_all_reduce_busbw.count(8), 1u);
  const double got =
      time_collective("dgx-a100-80g", 16, {0, 1, 2, 3, 4, 5, 6, 7}, "all_reduce", elements);
  EXPECT_NEAR(got, expected, 1e-3 * expected);
}

TEST(SimBinding, AllGatherAcrossNodesRunsAtTheNicsAchievedBandwidth) {
  const Topology t = load_topology("dgx-a100-80g");
  const std::int64_t elements = 4 << 20;  // 16 MiB per rank
  const double out_bytes = 4.0 * static_cast<double>(elements) * 2;
  // Ranks 0 and 8 sit on two nodes, one GPU each: one channel through one NIC at the
  // 24 GB/s NCCL reaches on HDR; ring/Simple, one network step at the tree network
  // latency (14 us, one GPU per node) after the 8.4 us base.
  ASSERT_DOUBLE_EQ(t.nccl.nic_bus.value, 24e9);
  const double expected = 8.4e-6 + 14e-6 + 0.5 * out_bytes / 24e9;
  const double got = time_collective("dgx-a100-80g", 16, {0, 8}, "all_gather", elements);
  EXPECT_NEAR(got, expected, 1e-3 * expected);
}

// A TP group of 16 over two nodes: NCCL spreads its ring over the 8 NICs of each node,
// so it runs near 8 x the NIC rate, not at one NIC's (the old ideal ring in rank order).
TEST(SimBinding, CrossNodeRingUsesEveryNicOfTheNode) {
  const std::int64_t elements = 64 << 20;  // 256 MiB
  const double bytes = 4.0 * static_cast<double>(elements), n = 16;
  std::vector<int> all(16);
  for (int r = 0; r < 16; ++r) all[static_cast<std::size_t>(r)] = r;
  const double got = time_collective("dgx-a100-80g", 16, all, "all_reduce", elements);
  const double busbw = bytes / got * 2 * (n - 1) / n;
  EXPECT_GT(busbw, 0.9 * 192e9);
  EXPECT_LT(busbw, 192e9);
}

Scenario sixteen_ranks() {
  Scenario s;
  s.model.num_layers = 4;
  s.model.hidden_size = 1024;
  s.model.num_attention_heads = 16;
  s.model.seq_length = 512;
  s.model.vocab_size = 8192;
  s.parallelism.tensor_model_parallel_size = 2;
  s.parallelism.pipeline_model_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 16;
  s.training.bf16 = true;
  s.cluster.world_size = 16;  // two DGX nodes, dp 4 across them
  s.cluster.gpus_per_node = 8;
  return s;
}

TEST(SimBinding, FullFidelityAndSymmetricModeAgreeWithinTwoPercent) {
  for (bool overlap : {false, true}) {
    Scenario s = sixteen_ranks();
    s.parallelism.overlap_grad_reduce = overlap;
    s.parallelism.ddp_bucket_size = 1000000;
    validate(s);
    const auto full = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
    const auto sym = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric);
    ASSERT_FALSE(full.contains("error")) << full.dump();
    ASSERT_FALSE(sym.contains("error")) << sym.dump();
    EXPECT_EQ(full.at("simulated_ranks"), 16);
    EXPECT_EQ(sym.at("simulated_ranks"), 2);
    const double a = full.at("iteration_seconds"), b = sym.at("iteration_seconds");
    EXPECT_NEAR(b, a, 0.02 * a) << "overlap_grad_reduce " << overlap;
    EXPECT_EQ(full.at("max_peak_memory_bytes"), sym.at("max_peak_memory_bytes"));
  }
}

// Two NICs per node: four GPUs share each, so the dp rings of the tp peers contend on
// the NICs — traffic the symmetric mode must put on the links for ranks it does not run.
TEST(SimBinding, SymmetricModeKeepsTheContentionOfThePeersItDoesNotRun) {
  auto topo = to_json(load_topology("dgx-a100-80g"));
  topo["name"] = "two-nics";
  topo["fabric"]["nics_per_node"] = 2;
  const auto path = std::filesystem::path(::testing::TempDir()) / "two-nics.json";
  std::ofstream(path) << topo.dump();
  Scenario s = sixteen_ranks();
  s.parallelism.pipeline_model_parallel_size = 1;  // tp 2 × dp 8 over two nodes
  s.training.global_batch_size = 8;
  validate(s);
  const auto full = simulate_in_child(s, path.string(), SimMode::full);
  const auto sym = simulate_in_child(s, path.string(), SimMode::symmetric);
  const auto roomy = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
  ASSERT_FALSE(full.contains("error")) << full.dump();
  ASSERT_FALSE(sym.contains("error")) << sym.dump();
  ASSERT_FALSE(roomy.contains("error")) << roomy.dump();
  const double dp_full = full.at("exposed_seconds").at("dp");
  // Sharing a NIC between four GPUs slows the dp reduction down…
  EXPECT_GT(dp_full, 1.5 * roomy.at("exposed_seconds").at("dp").get<double>());
  // …and the symmetric mode, running one rank of sixteen, sees the same slowdown.
  EXPECT_NEAR(sym.at("exposed_seconds").at("dp").get<double>(), dp_full, 0.02 * dp_full);
  const double a = full.at("iteration_seconds"), b = sym.at("iteration_seconds");
  EXPECT_NEAR(b, a, 0.02 * a);
}

TEST(SimBinding, PipelineBubbleIsTheSchedulesFraction) {
  for (int m : {4, 8, 16}) {
    Scenario s;
    s.model.num_layers = 8;
    s.model.hidden_size = 2048;
    s.model.num_attention_heads = 16;
    s.model.seq_length = 1024;
    s.model.vocab_size = 1024;  // a light head: the stages stay balanced
    s.parallelism.pipeline_model_parallel_size = 4;
    s.training.micro_batch_size = 1;
    s.training.global_batch_size = m;
    s.training.bf16 = true;
    s.cluster.world_size = 4;
    s.cluster.gpus_per_node = 8;
    validate(s);
    const auto r = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
    ASSERT_FALSE(r.contains("error")) << r.dump();
    const double p = 4, expected = (p - 1) / (m + p - 1);
    EXPECT_NEAR(r.at("bubble_fraction").get<double>(), expected, 0.03) << "m = " << m;
  }
}

// ZB-H1 against 1F1B on one layout (pp 4, m 8, the balanced stages above): its Bs reach the
// stages ahead after a B instead of a whole backward, and its Ws fill the cool-down, so the
// idle time per stage falls from (p − 1)(F + B + W) to (p − 1)(F + B − W) (Qi et al. 2024,
// §3.1) with F, B, W the simulated passes' own lengths — what the report's per-rank pass
// seconds give. The iteration is shorter, and the peak memory within one microbatch's
// held output gradients of 1F1B's.
// 8 layers of hidden 2048 (16 heads, 1,024 tokens) in bf16 on 1F1B over four A100s of one
// node, eight microbatches of one sample a step.
Scenario four_stage_gpt(int vocab) {
  Scenario s;
  s.model.num_layers = 8;
  s.model.hidden_size = 2048;
  s.model.num_attention_heads = 16;
  s.model.seq_length = 1024;
  s.model.vocab_size = vocab;
  s.parallelism.pipeline_model_parallel_size = 4;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 8;
  s.training.bf16 = true;
  s.cluster.world_size = 4;
  s.cluster.gpus_per_node = 8;
  validate(s);
  return s;
}

TEST(SimBinding, ZbH1BubbleIsSmallerThan1F1BsOnTheSameLayout) {
  Scenario s = four_stage_gpt(1024);
  const auto base = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
  s.parallelism.pipeline_schedule = "zb-h1";
  validate(s);
  const auto zb = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
  ASSERT_FALSE(base.contains("error")) << base.dump();
  ASSERT_FALSE(zb.contains("error")) << zb.dump();
  const double p = 4, m = 8;
  // A middle stage's passes, per microbatch.
  const auto& passes = zb.at("ranks").at(1).at("pass_seconds");
  const double f = passes.at("forward").get<double>() / m;
  const double b = passes.at("backward").get<double>() / m;
  const double w = passes.at("weight").get<double>() / m;
  EXPECT_GT(w, 0.2 * (b + w));  // the weight GEMMs are a real share of the backward
  const double zb_expected = (p - 1) * (f + b - w) / (m * (f + b + w) + (p - 1) * (f + b - w));
  const double base_expected = (p - 1) / (m + p - 1);
  EXPECT_NEAR(zb.at("bubble_fraction").get<double>(), zb_expected, 0.03);
  EXPECT_NEAR(base.at("bubble_fraction").get<double>(), base_expected, 0.03);
  EXPECT_LT(zb.at("bubble_fraction").get<double>(),
            base.at("bubble_fraction").get<double>() - 0.05);
  EXPECT_LT(zb.at("iteration_seconds").get<double>(), base.at("iteration_seconds").get<double>());
  // Memory: ZB-H1 keeps 1F1B's microbatches in flight (tests/schedules), but a split
  // backward holds each linear layer's output gradient from B to W, where a whole backward
  // frees it layer by layer: at most one microbatch's of them more, 2 layers a stage ×
  // 1024 tokens × (qkv 3h + proj h + fc1 4h + fc2 h) × 2 bytes (bf16).
  const double held = 2.0 * 1024 * 9 * 2048 * 2;
  EXPECT_LE(zb.at("max_peak_memory_bytes").get<double>(),
            base.at("max_peak_memory_bytes").get<double>() + held);
  // 1F1B's backward is one class; ZB-H1's rank reports B and W apart.
  EXPECT_FALSE(base.at("ranks").at(1).at("pass_seconds").contains("weight"));
}

// Megatron-Core's --defer-embedding-wgrad-compute on four_stage_gpt with a 131,072-token
// vocabulary (its output layer as heavy as two of the stage's layers): the
// last stage runs the output layer's weight-gradient GEMMs after the schedule, in the flush,
// instead of in each backward, so its backward passes lose them (about a third of the
// output layer's work) and the steady state, which the last stage paces, is shorter. It
// holds each deferred microbatch's logits gradient until then: 1,024 × 131,072 bf16 values
// (268 MB) a microbatch, the eight of a step 2.1 GB. With wgrad_deferral_limit 2 only the
// first two microbatches' wait.
TEST(SimBinding, DeferredOutputWeightGradientsRunInTheFlush) {
  Scenario s = four_stage_gpt(131072);
  const auto base = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
  s.training.defer_embedding_wgrad_compute = true;
  validate(s);
  const auto deferred = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
  s.training.wgrad_deferral_limit = 2;
  validate(s);
  const auto limited = simulate_in_child(s, "dgx-a100-80g", SimMode::full);
  for (const auto* r : {&base, &deferred, &limited}) ASSERT_FALSE(r->contains("error")) << *r;
  const auto& last = deferred.at("ranks").at(3).at("pass_seconds");
  const auto& last_base = base.at("ranks").at(3).at("pass_seconds");
  const double w = last.at("weight").get<double>();
  // The GEMMs moved, not added: what the backward passes lost, the weight pass runs.
  EXPECT_NEAR(last_base.at("backward").get<double>() - last.at("backward").get<double>(), w,
              0.05 * w);
  EXPECT_GT(w, 0.05 * last_base.at("backward").get<double>());
  EXPECT_FALSE(deferred.at("ranks").at(0).at("pass_seconds").contains("weight"));
  EXPECT_NEAR(limited.at("ranks").at(3).at("pass_seconds").at("weight").get<double>(), w / 4,
              0.05 * w);
  EXPECT_LT(deferred.at("iteration_seconds").get<double>(),
            base.at("iteration_seconds").get<double>());
  const double held = 8.0 * 1024 * 131072 * 2;
  EXPECT_GT(deferred.at("ranks").at(3).at("peak_memory_bytes").get<double>() -
                base.at("ranks").at(3).at("peak_memory_bytes").get<double>(),
            0.5 * held);
}

// Megatron-Core's overlap_p2p_comm on the interleaved schedule: a forward's transfers run
// under the backward after it and a backward's under the next forward, where the batched
// calls wait for both at once after each pair. tp 8 × pp 4 × vpp 2 on four DGX A100 nodes,
// a stage a node: each tp rank sends its whole activation (2048 tokens × 4096 × 2 bytes,
// 16 MB) over its own 200 Gb/s NIC, about 0.7 ms, against a chunk's forward of about as
// long. Most of the exposed pipeline traffic goes, the step is shorter by much of it, and
// the GEMMs are the same.
TEST(SimBinding, OverlappedPipelineP2PHidesUnderTheOtherDirectionsCompute) {
  Scenario s;
  s.model.num_layers = 8;
  s.model.hidden_size = 4096;
  s.model.num_attention_heads = 32;
  s.model.seq_length = 2048;
  s.model.vocab_size = 1024;
  s.parallelism.tensor_model_parallel_size = 8;
  s.parallelism.pipeline_model_parallel_size = 4;
  s.parallelism.virtual_pipeline_model_parallel_size = 2;
  s.parallelism.overlap_p2p_comm = false;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 16;
  s.training.bf16 = true;
  s.cluster.world_size = 32;
  s.cluster.gpus_per_node = 8;
  validate(s);
  const auto batched = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, false, false);
  s.parallelism.overlap_p2p_comm = true;
  validate(s);
  const auto overlapped = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, false, false);
  ASSERT_FALSE(batched.contains("error")) << batched.dump();
  ASSERT_FALSE(overlapped.contains("error")) << overlapped.dump();
  const double exposed_batched = batched.at("exposed_seconds").at("pp");
  const double exposed_overlapped = overlapped.at("exposed_seconds").at("pp");
  const double t_batched = batched.at("iteration_seconds").get<double>();
  const double t_overlapped = overlapped.at("iteration_seconds").get<double>();
  EXPECT_GT(exposed_batched, 0.05 * t_batched);
  EXPECT_LT(exposed_overlapped, 0.5 * exposed_batched)
      << exposed_overlapped << " vs " << exposed_batched;
  EXPECT_LT(t_overlapped, t_batched - 0.5 * (exposed_batched - exposed_overlapped));
  EXPECT_NEAR(overlapped.at("ranks")[0].at("op_seconds").at("gemm").get<double>(),
              batched.at("ranks")[0].at("op_seconds").at("gemm").get<double>(), 1e-9);
}

TEST(SimBinding, OverlappedGradientReductionIsHidden) {
  Scenario s = sixteen_ranks();
  s.parallelism.ddp_bucket_size = 1000000;
  // Long enough sequences that the backward compute of a bucket's layers outlasts the
  // bucket's reduction, NCCL's tens of µs of latency included, and the GPU, not the
  // issuing host, sets the pace (a host-bound backward gains nothing from hiding it).
  s.model.seq_length = 4096;
  validate(s);
  // The schedule's overlap, with collectives that take no SMs from compute.
  const auto plain = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, false, false);
  s.parallelism.overlap_grad_reduce = true;
  const auto overlapped = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, false, false);
  ASSERT_FALSE(plain.contains("error")) << plain.dump();
  ASSERT_FALSE(overlapped.contains("error")) << overlapped.dump();
  const double exposed_plain = plain.at("exposed_seconds").at("dp");
  const double exposed_overlap = overlapped.at("exposed_seconds").at("dp");
  EXPECT_GT(exposed_plain, 0);
  EXPECT_LT(exposed_overlap, 0.5 * exposed_plain) << exposed_overlap << " vs " << exposed_plain;
  EXPECT_LT(overlapped.at("iteration_seconds").get<double>(),
            plain.at("iteration_seconds").get<double>());
  // With NCCL's blocks holding SMs (sim/sm_contention.hpp) the reduction stays hidden, and
  // the backward's GEMMs pay for the SMs it held: more GEMM time than without.
  const auto held = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric);
  ASSERT_FALSE(held.contains("error")) << held.dump();
  EXPECT_LT(held.at("exposed_seconds").at("dp").get<double>(), 0.5 * exposed_plain);
  EXPECT_GT(held.at("ranks")[0].at("op_seconds").at("gemm").get<double>(),
            overlapped.at("ranks")[0].at("op_seconds").at("gemm").get<double>());
}

// Megatron's async_tensor_model_parallel_allreduce: a column-parallel backward all-reduces
// its input gradient while its weight gradient is computed. Off, the all-reduce ends before
// the weight-gradient GEMM starts: the same ops, more of the tp communication exposed.
TEST(SimBinding, AsyncTensorParallelAllReduceHidesBehindTheWeightGradient) {
  Scenario s = gpt_1024();
  s.cluster.world_size = 2;
  s.parallelism.tensor_model_parallel_size = 2;
  validate(s);
  // With collectives that take no SMs from compute the two run the same ops for as long.
  const auto async = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, false, false);
  s.training.async_tensor_model_parallel_allreduce = false;
  const auto serial = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, false, false);
  ASSERT_FALSE(async.contains("error")) << async.dump();
  ASSERT_FALSE(serial.contains("error")) << serial.dump();
  const double exposed_async = async.at("exposed_seconds").at("tp");
  const double exposed_serial = serial.at("exposed_seconds").at("tp");
  EXPECT_GT(exposed_serial, exposed_async * 1.2) << exposed_serial << " vs " << exposed_async;
  EXPECT_GT(serial.at("iteration_seconds").get<double>(),
            async.at("iteration_seconds").get<double>());
  EXPECT_EQ(serial.at("ranks")[0].at("op_seconds"), async.at("ranks")[0].at("op_seconds"));
  // With NCCL's blocks holding SMs (sim/sm_contention.hpp), the weight-gradient GEMM beside
  // the all-reduce pays; in series nothing overlaps and nothing is paid.
  const auto held_serial = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric);
  s.training.async_tensor_model_parallel_allreduce = true;
  const auto held_async = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric);
  ASSERT_FALSE(held_serial.contains("error")) << held_serial.dump();
  ASSERT_FALSE(held_async.contains("error")) << held_async.dump();
  auto gemm = [](const nlohmann::json& r) {
    return r.at("ranks")[0].at("op_seconds").at("gemm").get<double>();
  };
  EXPECT_DOUBLE_EQ(gemm(held_serial), gemm(serial));
  EXPECT_GT(gemm(held_async), gemm(async));
}

}  // namespace
}  // namespace tandem::sim

namespace tandem::sim {
namespace {

// Runs `body` as the one actor on a one-GPU dgx-a100-80g platform, to the end of the
// simulation (devices the body uses are made before, outside the engine).
void on_one_host(const std::function<void()>& body) {
  const Topology t = load_topology("dgx-a100-80g");
  int argc = 1;
  char name[] = "test";
  char* argv[] = {name, nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  configure_network_model(engine);
  const Platform p = build_platform(t, 1);
  simgrid::s4u::Actor::create("r0", p.hosts[0], body);
  engine.run();
}

// A run that reduces in 16 bits holds Megatron's main_grad in 16 bits; the optimizer reads
// an fp32 copy of the rank's slices (_copy_model_grads_to_main_grads), staged after the
// reduction and freed after the step. The layout of tests/model/test_optimizer_shard.cpp's
// MainValues test: a 16-element buffer of which rank 1 of dp 2 holds [6, 12) and [14, 16).
// (The cpu binding computes in fp32 only, so the sim binding holds the 16-bit buffer here;
// the values a copy converts are each binding's copy op's, tested with it.)
TEST(SimParameters, SixteenBitGradsAreStagedInFp32ForTheHeldSlices) {
  const auto j = in_child([] {
    SimDevice device([](const OpDesc&) { return 1e-6; }, SimDeviceOptions{.record_ops = true});
    nlohmann::json out;
    on_one_host([&] {
      ParameterSet p(1, 0);
      for (std::int64_t n : {3, 5, 7})
        p.add({"p" + std::to_string(n), Shape{n}, ShardKind::replicated, 0, 0, true, false});
      p.allocate(device, {.bucket_elements = 12, .pad_to = 2}, DType::bf16,
                 {.dp_size = 2, .dp_rank = 1}, DType::bf16);
      out["allocated"] = device.memory().live().value;
      out["grads_bf16"] = p.grads().dtype == DType::bf16;
      try {
        p.main_grads(6, 6);
        out["unstaged_threw"] = false;
      } catch (const std::logic_error&) {
        out["unstaged_threw"] = true;
      }
      p.stage_main_grads(device, device.default_stream());
      out["staged"] = device.memory().live().value;
      {  // views keep the staged buffer alive: let them go before it is released
        const Tensor first = p.main_grads(6, 6), second = p.main_grads(14, 2);
        out["offsets"] = {first.offset, second.offset};
        out["fp32"] = first.dtype == DType::fp32 && second.dtype == DType::fp32;
        out["same_storage"] = first.storage == second.storage;
        try {
          p.main_grads(0, 2);  // rank 0's slice
          out["foreign_threw"] = false;
        } catch (const std::logic_error&) {
          out["foreign_threw"] = true;
        }
      }
      p.release_main_grads();
      out["released"] = device.memory().live().value;
      std::vector<std::string> copies;
      for (const auto& op : device.issued_ops())
        if (op.op.op == "copy") copies.push_back(std::to_string(op.op.m));
      out["copies"] = copies;
    });
    return out;
  });
  ASSERT_FALSE(j.contains("error")) << j.dump();
  // 16 bf16 gradients, 16 bf16 parameters, 6 + 2 fp32 main values; then 6 + 2 fp32 gradients.
  EXPECT_EQ(j.at("allocated").get<std::int64_t>(), 16 * 2 + 16 * 2 + 8 * 4);
  EXPECT_TRUE(j.at("grads_bf16").get<bool>());
  EXPECT_TRUE(j.at("unstaged_threw").get<bool>());
  EXPECT_EQ(j.at("staged").get<std::int64_t>(), 16 * 2 + 16 * 2 + 8 * 4 + 8 * 4);
  EXPECT_EQ(j.at("offsets"), (nlohmann::json{0, 6}));  // slices back to back
  EXPECT_TRUE(j.at("fp32").get<bool>());
  EXPECT_TRUE(j.at("same_storage").get<bool>());
  EXPECT_TRUE(j.at("foreign_threw").get<bool>());
  EXPECT_EQ(j.at("released").get<std::int64_t>(), 16 * 2 + 16 * 2 + 8 * 4);
  EXPECT_EQ(j.at("copies"), (nlohmann::json{"6", "2"}));  // one copy per held slice
}

// With fp32 gradients the buffer is what the optimizer reads: staging copies nothing.
TEST(SimParameters, Fp32GradsAreReadInPlace) {
  CpuDevice d;
  ParameterSet p(1, 0);
  for (std::int64_t n : {3, 5, 7})
    p.add({"p" + std::to_string(n), Shape{n}, ShardKind::replicated, 0, 0, true, false});
  p.allocate(d, {.bucket_elements = 12, .pad_to = 2}, DType::bf16, {.dp_size = 2, .dp_rank = 1});
  const Bytes before = d.memory().live();
  p.stage_main_grads(d, d.default_stream());
  EXPECT_EQ(d.memory().live(), before);
  EXPECT_EQ(p.main_grads(6, 6).storage, p.grads().storage);
  EXPECT_EQ(p.main_grads(6, 6).offset, 6);
}

// HostTurns on the sim binding: the two tasks are actors of the rank's host, taking turns
// as host threads do (tests/core/test_host_turns.cpp), and a task waiting for its turn lets
// simulated time pass: b sleeps 5 µs of its turn, and a's second part starts after it.
TEST(SimHost, TheTwoTasksOfACombinedStepTakeTurnsAsActors) {
  const auto j = in_child([] {
    SimDevice device([](const OpDesc&) { return 0.0; }, SimDeviceOptions{});
    std::vector<std::string> log;
    double a2_at = -1;
    on_one_host([&] {
      HostTurns& turns = device.host_turns();
      turns.run(
          [&] {
            log.push_back("a1");
            turns.yield();
            log.push_back("a2");
            a2_at = sim_now();
            turns.yield();
            log.push_back("a3");
          },
          [&] {
            log.push_back("b1");
            simgrid::s4u::this_actor::sleep_for(5e-6);
            turns.yield();
            log.push_back("b2");
          });
    });
    return nlohmann::json{{"log", log}, {"a2_at", a2_at}};
  });
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["log"].get<std::vector<std::string>>(),
            (std::vector<std::string>{"a1", "b1", "a2", "b2", "a3"}));
  EXPECT_NEAR(j["a2_at"].get<double>(), 5e-6, 1e-12);
}

// The host issue clock: `ops` fill kernels of `op_us` each, issued by a host that spends
// `issue_us` per kernel, then one attention op (5 kernels); the stream drained.
nlohmann::json issue_in_child(double op_us, double issue_us, int ops) {
  return in_child([=] {
    SimDevice device([op_us](const OpDesc& op) { return op.op == "fill" ? op_us * 1e-6 : 0.0; },
                     SimDeviceOptions{.host = {.kernel_issue = issue_us * 1e-6}});
    double end = 0, before_attention = 0, starved = 0, busy = 0;
    on_one_host([&] {
      Tensor x = device.allocate(Shape{16}, DType::fp32);
      for (int i = 0; i < ops; ++i) device.fill(device.default_stream(), x, 0.0f);
      device.default_stream().synchronize();
      end = sim_now();
      before_attention = device.host_seconds().at("kernel issue");
      starved = device.host_bound();
      busy = device.compute_busy();
      Tensor qkv = device.allocate(Shape{8, 1, 3, 2, 4}, DType::fp32);
      Tensor out = device.allocate(Shape{8, 1, 2, 4}, DType::fp32);
      Tensor probs = device.allocate(Shape{1, 2, 8, 8}, DType::fp32);
      device.attention(device.default_stream(), {qkv, out, probs});
    });
    return nlohmann::json{
        {"end", end},
        {"starved", starved},
        {"busy", busy},
        {"issue", before_attention},
        {"attention_issue", device.host_seconds().at("kernel issue") - before_attention}};
  });
}

// TE's cast_transpose writes a weight's FP8 codes and their transposed copy in one pass
// (2 bytes read, 1 + 1 written an element, the scale given): the second quantization, the
// copy dgrad reads, is priced with no traffic of its own, only its launch.
TEST(SimFp8, TheTransposedCopyIsPricedWithTheCastThatWroteIt) {
  const auto j = in_child([] {
    auto seen = std::make_shared<std::vector<OpDesc>>();
    SimDevice device([seen](const OpDesc& op) {
      seen->push_back(op);
      return 0.0;
    });
    on_one_host([&] {
      Tensor w = device.allocate(Shape{256, 128}, DType::bf16);
      Tensor scale = device.allocate(Shape{1}, DType::fp32);
      const Fp8Layout layout{.format = Fp8Format::e4m3};
      Fp8Tensor rowwise = allocate_fp8(device, 256, 128, layout);
      Fp8Tensor copy = allocate_fp8(device, 256, 128, layout);
      device.fp8_quantize(device.default_stream(),
                          {.input = w, .output = rowwise, .scale = &scale});
      device.fp8_quantize(device.default_stream(),
                          {.input = w, .output = copy, .scale = &scale, .transposed_copy = true});
    });
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : *seen)
      if (op.op == "fp8_quantize") ops.push_back({op.bytes, op.flops});
    return nlohmann::json{{"ops", ops}};
  });
  ASSERT_FALSE(j.contains("error")) << j.dump();
  ASSERT_EQ(j["ops"].size(), 2u) << j.dump();
  EXPECT_DOUBLE_EQ(j["ops"][0][0].get<double>(), 256.0 * 128 * (2 + 1 + 1));
  EXPECT_DOUBLE_EQ(j["ops"][1][0].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["ops"][1][1].get<double>(), 0.0);
}

// Kernels of 1 µs issued every 10 µs: op i starts when issued (10·i µs) and the stream
// waits 10 µs for the first and 9 µs for each later one. The 100th ends at 1001 µs.
TEST(SimHost, AStreamStarvesWhenKernelsAreShorterThanTheirIssue) {
  const auto j = issue_in_child(1, 10, 100);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NEAR(j["end"].get<double>(), 1001e-6, 1e-12);
  EXPECT_NEAR(j["starved"].get<double>(), 10e-6 + 99 * 9e-6, 1e-12);
  EXPECT_NEAR(j["busy"].get<double>(), 100e-6, 1e-12);
  EXPECT_NEAR(j["issue"].get<double>(), 100 * 10e-6, 1e-12);
  // Attention is launched as its 5 parts (sim/cost_model.hpp rule 3).
  EXPECT_NEAR(j["attention_issue"].get<double>(), 5 * 10e-6, 1e-12);
}

// Kernels of 50 µs issued every 10 µs: the host runs ahead, only the first op waits for
// its issue, and the stream ends at 10 + 100 · 50 µs.
TEST(SimHost, LongKernelsHideTheHost) {
  const auto j = issue_in_child(50, 10, 100);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NEAR(j["end"].get<double>(), 10e-6 + 100 * 50e-6, 1e-12);
  EXPECT_NEAR(j["starved"].get<double>(), 10e-6, 1e-12);
}

// An op of several kernels on a host of 10 µs per kernel: one fp32 attention (5 kernels,
// 50 µs of issue, rule 3) priced at `attention_us`, alone on the stream; then the host
// sits until the stream drains. Returns when it drained and the stream's host-bound time.
nlohmann::json kernels_of_one_op_in_child(double attention_us) {
  return in_child([=] {
    SimDevice device(
        [attention_us](const OpDesc& op) { return op.op == "attention" ? attention_us * 1e-6 : 0; },
        SimDeviceOptions{.host = {.kernel_issue = 10e-6}});
    double end = 0;
    on_one_host([&] {
      Tensor qkv = device.allocate(Shape{8, 1, 3, 2, 4}, DType::fp32);
      Tensor out = device.allocate(Shape{8, 1, 2, 4}, DType::fp32);
      Tensor probs = device.allocate(Shape{1, 2, 8, 8}, DType::fp32);
      device.attention(device.default_stream(), {qkv, out, probs});
      device.default_stream().synchronize();
      end = sim_now();
    });
    return nlohmann::json{{"end", end},
                          {"starved", device.host_bound()},
                          {"issue", device.host_seconds().at("kernel issue")}};
  });
}

// SimDevice prices each distinct op once: two attention ops alike but for their dropout
// are two ops (rule 3c prices the dropout kernel), in either order. (Until 2026-11-28 the
// key left dropout out, and whichever came first set the other's price.)
TEST(SimHost, OpsThatDifferOnlyInDropoutArePricedApart) {
  for (const bool dropout_first : {false, true}) {
    const auto j = in_child([=] {
      SimDevice device(
          [](const OpDesc& op) {
            return op.op == "attention" ? (op.dropout > 0 ? 3e-6 : 2e-6) : 0;
          },
          SimDeviceOptions{});
      double plain = 0, dropped = 0;
      on_one_host([&] {
        Tensor qkv = device.allocate(Shape{8, 1, 3, 2, 4}, DType::fp32);
        Tensor out = device.allocate(Shape{8, 1, 2, 4}, DType::fp32);
        Tensor probs = device.allocate(Shape{1, 2, 8, 8}, DType::fp32);
        auto booked = [&] {
          double sum = 0;
          for (const auto& [key, seconds] : device.op_seconds()) sum += seconds;
          return sum;
        };
        auto run = [&](float p) {
          const double before = booked();
          device.attention(device.default_stream(), {qkv, out, probs, {.p = p}});
          return booked() - before;
        };
        if (dropout_first) {
          dropped = run(0.1f);
          plain = run(0);
        } else {
          plain = run(0);
          dropped = run(0.1f);
        }
      });
      return nlohmann::json{{"plain", plain}, {"dropped", dropped}};
    });
    ASSERT_FALSE(j.contains("error")) << j.dump();
    EXPECT_NEAR(j["plain"].get<double>(), 2e-6, 1e-15) << dropout_first;
    EXPECT_NEAR(j["dropped"].get<double>(), 3e-6, 1e-15) << dropout_first;
  }
}

// The GPU runs an op's first kernel once the host issued it (10 µs), not once the host
// issued all five (50 µs): 100 µs of attention ends at 110 µs, not 150. The host's issue
// hides behind the GPU's work, so the op takes max(issue, GPU), plus the first issue.
TEST(SimHost, AnOpRunsItsFirstKernelWhileTheHostIssuesTheRest) {
  const auto j = kernels_of_one_op_in_child(100);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NEAR(j["issue"].get<double>(), 50e-6, 1e-12);
  EXPECT_NEAR(j["end"].get<double>(), 110e-6, 1e-12);
  EXPECT_NEAR(j["starved"].get<double>(), 10e-6, 1e-12);
}

// Five kernels of 1 µs each (5 µs in all): the last one is issued at 50 µs and runs to
// 51 µs; the op cannot end before it. The stream stood 46 µs of the 51 waiting for the host.
TEST(SimHost, AnOpEndsNoEarlierThanItsLastKernelIsIssuedAndRun) {
  const auto j = kernels_of_one_op_in_child(5);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NEAR(j["end"].get<double>(), 51e-6, 1e-12);
  EXPECT_NEAR(j["starved"].get<double>(), 46e-6, 1e-12);
}

// What the host pays per op kind, on a host of 10 µs per kernel, 1 µs per optimizer tensor
// and 100 µs per unfused softmax: three adam ops; an fp16 attention whose softmax Megatron
// fuses (B·heads = 8, T = 32); one it runs unfused (B·heads = 2, rule 3b).
nlohmann::json host_issue_by_kind_in_child() {
  return in_child([] {
    SimDevice device(
        [](const OpDesc&) { return 1e-6; },
        SimDeviceOptions{
            .compute_dtype = DType::fp16,
            .host = {.kernel_issue = 10e-6, .optimizer_tensor = 1e-6, .unfused_softmax = 100e-6}});
    double adam = 0, fused = 0, unfused = 0;
    on_one_host([&] {
      auto issued = [&] { return device.host_seconds().at("kernel issue"); };
      Tensor w = device.allocate(Shape{16}, DType::fp32);
      for (int i = 0; i < 3; ++i) device.adam(device.default_stream(), {w, w, w, w});
      adam = issued();
      auto attention = [&](std::int64_t T, std::int64_t heads) {
        Tensor qkv = device.allocate(Shape{T, 1, 3, heads, 4}, DType::fp16);
        Tensor out = device.allocate(Shape{T, 1, heads, 4}, DType::fp16);
        Tensor probs = device.allocate(Shape{1, heads, T, T}, DType::fp16);
        const double before = issued();
        device.attention(device.default_stream(), {qkv, out, probs});
        return issued() - before;
      };
      fused = attention(32, 8);
      unfused = attention(32, 2);
      device.default_stream().synchronize();
    });
    return nlohmann::json{{"adam", adam}, {"fused", fused}, {"unfused", unfused}};
  });
}

TEST(SimHost, OptimizerTensorsAndTheUnfusedSoftmaxHaveTheirOwnHostCost) {
  const auto j = host_issue_by_kind_in_child();
  ASSERT_FALSE(j.contains("error")) << j.dump();
  // Rule 5: no kernel issue per optimizer tensor, 1 µs each.
  EXPECT_NEAR(j["adam"].get<double>(), 3 * 1e-6, 1e-12);
  // Rule 3: 5 kernels; rule 3b: 4 more and the fallback's Python.
  EXPECT_NEAR(j["fused"].get<double>(), 5 * 10e-6, 1e-12);
  EXPECT_NEAR(j["unfused"].get<double>(), 9 * 10e-6 + 100e-6, 1e-12);
}

// The host clock across waits (SimDevice::host_waited): fills of 100 µs, 10 µs to issue
// each. The actor sits until 50 µs in a wait that is not the host's own (a collective's
// Work: NCCL orders the stream, not the host), so the next issue still ends at 20 µs and
// its fill runs [110, 210]. A stream synchronize is the host's own wait (until 210 µs): the
// next issue ends at 220. A wait the binding declares (Megatron's batch_p2p_sync) counts
// too: the host sits until 400 µs, issues until 410, the fill ends at 510.
nlohmann::json host_clock_across_waits_in_child() {
  return in_child([] {
    SimDevice device([](const OpDesc&) { return 100e-6; },
                     SimDeviceOptions{.host = {.kernel_issue = 10e-6}});
    nlohmann::json j;
    on_one_host([&] {
      Tensor x = device.allocate(Shape{16}, DType::fp32);
      Stream& s = device.default_stream();
      device.fill(s, x, 0.0f);
      simgrid::s4u::this_actor::sleep_until(50e-6);
      device.fill(s, x, 0.0f);
      j["after_other_wait"] = device.host_clock();
      s.synchronize();
      j["synchronized_at"] = sim_now();
      device.fill(s, x, 0.0f);
      j["after_synchronize"] = device.host_clock();
      simgrid::s4u::this_actor::sleep_until(400e-6);
      device.host_waited();
      device.fill(s, x, 0.0f);
      j["after_declared_wait"] = device.host_clock();
      s.synchronize();
      j["end"] = sim_now();
    });
    return j;
  });
}

TEST(SimHost, TheHostRunsAheadAcrossWaitsThatAreNotItsOwn) {
  const auto j = host_clock_across_waits_in_child();
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NEAR(j["after_other_wait"].get<double>(), 20e-6, 1e-12);
  EXPECT_NEAR(j["synchronized_at"].get<double>(), 210e-6, 1e-12);
  EXPECT_NEAR(j["after_synchronize"].get<double>(), 220e-6, 1e-12);
  EXPECT_NEAR(j["after_declared_wait"].get<double>(), 410e-6, 1e-12);
  EXPECT_NEAR(j["end"].get<double>(), 510e-6, 1e-12);
}

// The in-process communicator seen as a group of two: HostIssueCommunicator treats a
// group of one as Megatron does (no torch.distributed call), so the waiting host is
// exercised on a group it would really call NCCL for.
struct TwoRankGroup : SelfCommunicator {
  using SelfCommunicator::SelfCommunicator;
  int size() const override { return 2; }
};

// GpuSpec::host_waits_for_collectives: the actor is at 50 µs when a collective's wait
// returns. A host that waits for collectives issues the next kernel (10 µs) from there, to
// 60 µs; one that only orders the stream issued it long before, to 10 µs. On a group of
// one, which Megatron bypasses, no host waits: 10 µs either way.
double host_clock_after_a_collective_wait(bool waits, bool group_of_one = false) {
  const auto j = in_child([waits, group_of_one] {
    SimDevice device(
        [](const OpDesc&) { return 1e-6; },
        SimDeviceOptions{.host = {.kernel_issue = 10e-6, .waits_for_collectives = waits}});
    SelfCommunicator one(device, "tp");
    TwoRankGroup two(device, "tp");
    HostIssueCommunicator tp(group_of_one ? static_cast<Communicator&>(one) : two, device);
    double clock = 0;
    on_one_host([&] {
      Tensor x = device.allocate(Shape{16}, DType::fp32);
      auto work = tp.all_reduce(device.default_stream(), x, ReduceOp::sum);
      simgrid::s4u::this_actor::sleep_until(50e-6);
      work->wait();
      device.fill(device.default_stream(), x, 0.0f);
      clock = device.host_clock();
    });
    return nlohmann::json{{"clock", clock}};
  });
  if (j.contains("error")) throw std::runtime_error(j.dump());
  return j.at("clock").get<double>();
}

TEST(SimHost, TheHostWaitsForACollectiveOnlyWhenThePresetSaysSo) {
  EXPECT_NEAR(host_clock_after_a_collective_wait(true), 60e-6, 1e-12);
  EXPECT_NEAR(host_clock_after_a_collective_wait(false), 10e-6, 1e-12);
}

TEST(SimHost, NoHostWaitsForTheCollectiveOfAGroupOfOne) {
  EXPECT_NEAR(host_clock_after_a_collective_wait(true, true), 10e-6, 1e-12);
}

// Megatron skips torch.distributed on a group of one: no host cost for it.
TEST(SimHost, AGroupOfOneCostsTheHostNothing) {
  SimDevice device([](const OpDesc&) { return 0.0; },
                   SimDeviceOptions{.host = {.collective_issue = 95e-6}});
  SelfCommunicator self(device, "tp");
  HostIssueCommunicator tp(self, device);
  Tensor x = device.allocate(Shape{4}, DType::fp32);
  tp.all_reduce(device.default_stream(), x, ReduceOp::sum)->wait();
  EXPECT_EQ(device.host_seconds().count("collective issue"), 0u);
  EXPECT_DOUBLE_EQ(device.host_clock(), 0.0);
}

// Inside a library call (SimDevice::begin_library_call: Transformer Engine's userbuffers
// ring steps under --tp-comm-overlap) the first op costs the host a framework op's issue
// (10 µs) and every later kernel or collective the preset's C++ launch (2 µs), not its own
// 10 µs or 95 µs; after the call, ops cost 10 µs again. Fill, fill, all-reduce (group of
// two), fill inside, one fill after: 10 + 2 + 2 + 2 + 10 = 26 µs of host issue.
TEST(SimHost, ALibraryCallsOpsAfterItsFirstCostACppLaunch) {
  const auto j = in_child([] {
    SimDevice device(
        [](const OpDesc&) { return 1e-6; },
        SimDeviceOptions{
            .host = {.kernel_issue = 10e-6, .collective_issue = 95e-6, .library_launch = 2e-6}});
    TwoRankGroup two(device, "tp");
    HostIssueCommunicator tp(two, device);
    nlohmann::json out;
    on_one_host([&] {
      Tensor x = device.allocate(Shape{16}, DType::fp32);
      Stream& s = device.default_stream();
      device.begin_library_call();
      device.fill(s, x, 0.0f);
      device.fill(s, x, 0.0f);
      tp.all_reduce(s, x, ReduceOp::sum)->wait();
      device.fill(s, x, 0.0f);
      device.end_library_call();
      out["inside"] = device.host_clock();
      device.fill(s, x, 0.0f);
      out["after"] = device.host_clock();
      out["collective"] = device.host_seconds().at("collective issue");
    });
    return out;
  });
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_NEAR(j["inside"].get<double>(), 16e-6, 1e-12);
  EXPECT_NEAR(j["after"].get<double>(), 26e-6, 1e-12);
  EXPECT_NEAR(j["collective"].get<double>(), 2e-6, 1e-12);
}

// Between SimDevice::begin_split_gemm and end_split_gemm (Transformer Engine's userbuffers
// blocks, StepObserver::begin_split_gemm) the GEMMs reach the pricer marked as blocks whose
// last wave is shared (cost-model rule 2g); other ops, and GEMMs outside, are not.
TEST(SimDeviceOps, SplitGemmBlocksArePricedWithASharedWaveTail) {
  const auto j = in_child([] {
    nlohmann::json seen = nlohmann::json::array();
    SimDevice device([&](const OpDesc& op) {
      seen.push_back({std::string(op.op), op.shared_wave_tail});
      return 1e-6;
    });
    on_one_host([&] {
      Stream& s = device.default_stream();
      Tensor b = device.allocate(Shape{8, 8}, DType::fp32);
      auto gemm_of_rows = [&](std::int64_t rows) {  // a shape of its own: priced anew
        Tensor a = device.allocate(Shape{rows, 8}, DType::fp32);
        Tensor c = device.allocate(Shape{rows, 8}, DType::fp32);
        device.gemm(s, {.a = a, .b = b, .c = c});
        return c;
      };
      gemm_of_rows(4);
      device.begin_split_gemm();
      Tensor c = gemm_of_rows(5);
      device.fill(s, c, 0.0f);
      device.end_split_gemm();
      gemm_of_rows(6);
    });
    return nlohmann::json{{"seen", seen}};
  });
  ASSERT_FALSE(j.contains("error")) << j.dump();
  const nlohmann::json expected = nlohmann::json::parse(
      R"([["gemm", false], ["gemm", true], ["fill", false], ["gemm", false]])");
  EXPECT_EQ(j.at("seen"), expected);
}

// --tp-comm-overlap's userbuffers GEMMs reach the pricer as blocks of a split GEMM (rule 2g):
// with tensor parallelism 2 under sequence parallelism, two blocks per overlapped GEMM; the
// same run without the overlap has no such block.
TEST(SimDeviceOps, UserbuffersGemmsAreBlocksOfASplitGemm) {
  auto blocks_and_step = [](bool overlap) {
    Scenario s = small_gpt();
    s.parallelism.tensor_model_parallel_size = 2;
    s.parallelism.sequence_parallel = true;
    s.parallelism.tp_comm_overlap = overlap;
    s.cluster.world_size = 2;
    validate(s);
    return in_child([&] {
      const Topology t = load_topology("dgx-h100");
      SimulateOptions o = options_for(t, SimMode::full);
      o.record_ops = true;
      const SimReport r = simulate(s, t, o);
      int blocks = 0, gemms = 0;
      for (const auto& op : r.ranks.at(0).ops) {
        if (op.op.op != "gemm") continue;
        ++gemms;
        blocks += op.op.shared_wave_tail;
      }
      return nlohmann::json{{"blocks", blocks}, {"gemms", gemms}, {"seconds", r.iteration_seconds}};
    });
  };
  const auto on = blocks_and_step(true);
  const auto off = blocks_and_step(false);
  ASSERT_FALSE(on.contains("error")) << on.dump();
  ASSERT_FALSE(off.contains("error")) << off.dump();
  EXPECT_EQ(off.at("blocks").get<int>(), 0);
  EXPECT_GT(on.at("blocks").get<int>(), 0);
  EXPECT_EQ(on.at("blocks").get<int>() % 2, 0);                      // tp blocks a split GEMM
  EXPECT_LT(on.at("blocks").get<int>(), on.at("gemms").get<int>());  // the output layer, wgrads
}

// TrainingConfig::host_sync_per_layer: the host waits for the GPU at the start of each
// layer pass, so the host issue no longer overlaps the GPU work before it. On the preset's
// host (at tp 1 there are no collectives to run ahead of) the step gets longer and the
// stream starves longer; the kernels are the same.
TEST(SimHost, ASyncPerLayerKeepsTheHostFromRunningAhead) {
  Scenario s = gpt_1024();
  s.training.recompute_granularity = "full";
  validate(s);
  const auto plain = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  s.training.host_sync_per_layer = true;
  const auto synced = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  ASSERT_FALSE(plain.contains("error")) << plain.dump();
  ASSERT_FALSE(synced.contains("error")) << synced.dump();
  EXPECT_GT(synced.at("iteration_seconds").get<double>(),
            plain.at("iteration_seconds").get<double>());
  EXPECT_GT(synced.at("breakdown").at("host_bound_seconds").get<double>(),
            plain.at("breakdown").at("host_bound_seconds").get<double>());
  EXPECT_EQ(synced.at("ranks")[0].at("op_seconds"), plain.at("ranks")[0].at("op_seconds"));
}

// TrainingConfig::host_layer_timestamps: each layer's forward, recomputed forward and
// backward costs the host the preset's host_layer_timestamp_us (3 passes per layer and
// microbatch under full recomputation), booked as "layer timestamp", and the host does not
// wait for the GPU: the step is longer than without, shorter than one where the host
// waits at each layer pass as well (host_sync_per_layer), the kernels the same.
TEST(SimHost, LayerTimestampsCostTheHostWithoutASync) {
  Scenario s = gpt_1024();
  s.training.recompute_granularity = "full";
  validate(s);
  const auto plain = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  s.training.host_layer_timestamps = true;
  const auto stamped = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  s.training.host_sync_per_layer = true;
  const auto synced = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  ASSERT_FALSE(plain.contains("error")) << plain.dump();
  ASSERT_FALSE(stamped.contains("error")) << stamped.dump();
  ASSERT_FALSE(synced.contains("error")) << synced.dump();
  const double stamp = load_topology("dgx-a100-80g").gpu.host_layer_timestamp.value;
  ASSERT_GT(stamp, 0);
  const int passes = 3 * s.model.num_layers *
                     static_cast<int>(s.training.global_batch_size / s.training.micro_batch_size);
  EXPECT_NEAR(stamped.at("ranks")[0].at("host_seconds").at("layer timestamp").get<double>(),
              passes * stamp, 1e-9);
  EXPECT_FALSE(plain.at("ranks")[0].at("host_seconds").contains("layer timestamp"));
  const auto seconds = [](const nlohmann::json& j) {
    return j.at("iteration_seconds").get<double>();
  };
  EXPECT_GT(seconds(stamped), seconds(plain));
  EXPECT_LT(seconds(stamped), seconds(synced));
  EXPECT_EQ(stamped.at("ranks")[0].at("op_seconds"), plain.at("ranks")[0].at("op_seconds"));
}

// TrainingConfig::host_sync_output_layer: the host waits for the GPU before the output
// layer's forward and after its backward, so the output layer's GPU time (a 50257-row
// vocabulary at tp 1) no longer hides behind the host's issue of the layers next to it.
TEST(SimHost, ASyncAroundTheOutputLayerExposesItsGpuTime) {
  Scenario s = gpt_1024();
  s.model.vocab_size = 50257;
  s.model.make_vocab_size_divisible_by = 1;
  s.training.recompute_granularity = "full";
  validate(s);
  const auto plain = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  s.training.host_sync_output_layer = true;
  const auto synced = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  ASSERT_FALSE(plain.contains("error")) << plain.dump();
  ASSERT_FALSE(synced.contains("error")) << synced.dump();
  EXPECT_GT(synced.at("iteration_seconds").get<double>(),
            plain.at("iteration_seconds").get<double>());
  EXPECT_GT(synced.at("breakdown").at("host_bound_seconds").get<double>(),
            plain.at("breakdown").at("host_bound_seconds").get<double>());
  EXPECT_EQ(synced.at("ranks")[0].at("op_seconds"), plain.at("ranks")[0].at("op_seconds"));
}

// The preset's host costs reach the report: an iteration of a host-bound model is at
// least its kernels' issue time, and the breakdown books the starved stream.
TEST(SimHost, ReportSplitsTheIterationIntoItsCauses) {
  Scenario s = small_gpt();
  const auto j = simulate_in_child(s, "dgx-a100-80g", SimMode::symmetric, 1, true);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  const auto& rank = j["ranks"][0];
  const double issue = rank["host_seconds"]["kernel issue"].get<double>();
  EXPECT_GT(issue, 0);
  EXPECT_GE(j["iteration_seconds"].get<double>(), issue);
  const auto& b = j["breakdown"];
  EXPECT_GT(b["host_bound_seconds"].get<double>(), 0);
  // The parts add up to the iteration (other is what is left: under 10 % here).
  double parts = b["host_bound_seconds"].get<double>() +
                 b["pipeline_bubble_seconds"].get<double>() + b["peer_wait_seconds"].get<double>() +
                 b["other_seconds"].get<double>();
  for (const auto& [k, v] : b["compute_seconds"].items()) parts += v.get<double>();
  for (const auto& [k, v] : b["exposed_seconds"].items()) parts += v.get<double>();
  EXPECT_NEAR(parts, j["iteration_seconds"].get<double>(), 1e-9);
  EXPECT_LT(std::abs(b["other_seconds"].get<double>()),
            0.10 * j["iteration_seconds"].get<double>());
  EXPECT_TRUE(b["compute_seconds"].contains("gemm"));
}

}  // namespace
}  // namespace tandem::sim
