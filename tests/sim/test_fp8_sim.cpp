// FP8 in the simulator: an FP8 GEMM priced at the H100's FP8 rate on 1-byte operands, a GPU
// without an FP8 rate refused with the field named, the GPU rules of each recipe, and a
// whole FP8 step simulated: faster than the same step in bf16, its GEMMs issued as fp8_gemm.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "sim/cost_model.hpp"
#include "sim/fp8_gpu_rules.hpp"
#include "sim/sim_runner.hpp"
#include "tests/sim/priced_options.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

TEST(Fp8Sim, GemmRunsAtTheFp8Rate) {
  const GpuSpec h100 = load_topology("dgx-h100").gpu;
  const CostModel model(h100);
  const std::int64_t n = 8192;
  const double flops = 2.0 * n * n * n;
  const OpDesc bf16{.op = "gemm", .dtype = DType::bf16, .m = n, .n = n, .k = n, .flops = flops};
  OpDesc fp8 = bf16;
  fp8.op = "fp8_gemm";
  fp8.bytes = 2.0 * n * n + 2.0 * n * n;  // two 1-byte operands, a bf16 output
  // The datasheet's dense rates, 1979 FP8 and 989 bf16 TFLOP/s, each at its own fraction of
  // peak (cost-model rule 2d): 0.75 against 0.82, from 84 GEMMs of training shapes on which
  // cuBLASLt's FP8 ran 1.83 times as fast as bf16 on an H200 (geometric mean).
  EXPECT_DOUBLE_EQ(h100.gemm_fp8_peak_fraction, 0.75);
  const double ratio = model.seconds(bf16) / model.seconds(fp8);
  EXPECT_NEAR(ratio, 1979.0 / 989.0 * 0.75 / 0.82, 0.05)
      << model.seconds(bf16) << " " << model.seconds(fp8);
  // The issue's bar for the real cuBLASLt GEMM at this shape on an H100: at least 1.6x.
  EXPECT_GT(ratio, 1.6);
  EXPECT_EQ(op_class("fp8_gemm"), "gemm");
  EXPECT_EQ(op_class("fp8_quantize"), "memory-bound");
}

// Rule 2d by hand: with one tile shape (no L2 figure), an 8192^3 FP8 GEMM is 32 x 64 = 2048
// tiles of 256 x 128 on 132 SMs = 16 waves, each SM's tile (its K of 8192 and the fixed cost
// per tile of 256 more, rule 2f) at 1979 TFLOP/s x 0.75 / 132. A preset without
// gemm_fp8_peak_fraction prices FP8 at gemm_peak_fraction.
TEST(Fp8Sim, Fp8GemmTakesItsOwnPeakFraction) {
  GpuSpec h100 = load_topology("dgx-h100").gpu;
  h100.l2_bandwidth = BytesPerSecond(0);
  const std::int64_t n = 8192;
  const OpDesc fp8{.op = "fp8_gemm",
                   .dtype = DType::bf16,
                   .m = n,
                   .n = n,
                   .k = n,
                   .flops = 2.0 * n * n * n,
                   .bytes = 4.0 * n * n};
  const double waves = 16, tile_flops = 2.0 * 256 * 128 * (n + 256), launch = 4e-6;
  // At the preset's sustained clock (0.76 of the microbenchmarks', cost-model rule 2e).
  EXPECT_NEAR(CostModel(h100).seconds(fp8),
              waves * 132 * tile_flops / (1979e12 * 0.75 * 0.76) + launch, 1e-9);
  h100.gemm_fp8_peak_fraction = 0;
  EXPECT_NEAR(CostModel(h100).seconds(fp8),
              waves * 132 * tile_flops / (1979e12 * 0.82 * 0.76) + launch, 1e-9);
}

// Rule 2e: the sustained clock slows what the SMs bound (a GEMM, fused attention) by its
// inverse and leaves what HBM bounds (a copy) as it was.
TEST(CostModelClock, SustainedClockScalesSmBoundOpsOnly) {
  GpuSpec h100 = load_topology("dgx-h100").gpu;
  h100.l2_bandwidth = BytesPerSecond(0);
  const std::int64_t n = 8192;
  const OpDesc gemm{.op = "gemm",
                    .dtype = DType::bf16,
                    .m = n,
                    .n = n,
                    .k = n,
                    .flops = 2.0 * n * n * n,
                    .bytes = 6.0 * n * n};
  const OpDesc copy{.op = "copy", .dtype = DType::bf16, .bytes = 4.0 * n * n};
  const double launch = 4e-6;
  GpuSpec boosted = h100;
  boosted.sustained_clock_fraction = 0;  // unset: the microbenchmarks' clock
  const double g_boost = CostModel(boosted).seconds(gemm) - launch;
  const double g_sustained = CostModel(h100).seconds(gemm) - launch;
  EXPECT_NEAR(g_sustained, g_boost / 0.76, 1e-12);
  // 16 waves of 256 x 128 tiles (K and the fixed 256 per tile) at 0.82 of 989 TFLOP/s, then
  // at 0.76 of that clock.
  EXPECT_NEAR(g_boost, 16 * 132 * 2.0 * 256 * 128 * (n + 256) / (989e12 * 0.82), 1e-9);
  EXPECT_DOUBLE_EQ(CostModel(h100).seconds(copy), CostModel(boosted).seconds(copy));
  EXPECT_NEAR(CostModel(h100).seconds(copy), launch + 4.0 * n * n / (3350e9 * 0.90), 1e-9);
}

TEST(Fp8Sim, GpuWithoutFp8RateIsRefused) {
  const CostModel model(load_topology("dgx-a100-80g").gpu);
  try {
    model.seconds({.op = "fp8_gemm", .dtype = DType::bf16, .m = 64, .n = 64, .k = 64});
    FAIL() << "priced an FP8 GEMM on an A100";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations().front().field, "gpu.peak_tflops.fp8");
  }
}

Scenario fp8_scenario(const std::string& recipe) {
  Scenario s;
  s.model.num_layers = 2;
  s.model.hidden_size = 4096;
  s.model.num_attention_heads = 32;
  s.model.seq_length = 2048;
  s.model.use_flash_attn = true;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 2;
  s.training.bf16 = true;
  s.training.fp8.format = "hybrid";
  s.training.fp8.recipe = recipe;
  s.cluster.world_size = 1;
  return s;
}

std::string refused_field(const Scenario& s, const std::string& topology) {
  try {
    check_fp8_gpu(s, load_topology(topology).gpu);
  } catch (const ConfigError& e) {
    return e.violations().front().field;
  }
  return "";
}

TEST(Fp8Sim, RecipesNeedTheirGpus) {
  EXPECT_EQ(refused_field(fp8_scenario("delayed"), "dgx-a100-80g"), "fp8");  // cc 8.0
  EXPECT_EQ(refused_field(fp8_scenario("delayed"), "dgx-h100"), "");
  EXPECT_EQ(refused_field(fp8_scenario("tensorwise"), "dgx-h100"), "");
  EXPECT_EQ(refused_field(fp8_scenario("blockwise"), "dgx-h100"), "");
  EXPECT_EQ(refused_field(fp8_scenario("mxfp8"), "dgx-h100"), "fp8_recipe");  // Blackwell only
  EXPECT_EQ(refused_field(fp8_scenario("delayed"), "cpu-host"), "fp8");       // no FP8 rate
  EXPECT_EQ(compute_capability(load_topology("dgx-h100").gpu), 90);
  Scenario off = fp8_scenario("mxfp8");
  off.training.fp8.format = "";
  EXPECT_EQ(refused_field(off, "dgx-a100-80g"), "");
}

nlohmann::json simulated(const Scenario& s) {
  return testing::in_child([&] {
    const Topology t = load_topology("dgx-h100");
    const SimReport r = simulate(s, t, priced_options(t));
    const auto& ops = r.ranks.front().op_seconds;
    auto seconds = [&](const char* op) { return ops.count(op) ? ops.at(op) : 0.0; };
    const auto& host = r.ranks.front().host_seconds;
    const auto& exposed = r.ranks.front().exposed_seconds;
    const auto& step_ops = r.ranks.front().iteration_op_seconds;
    return nlohmann::json{
        {"exposed_dp", exposed.count("dp") ? exposed.at("dp") : 0.0},
        {"quantize", step_ops.count("fp8_quantize") ? step_ops.at("fp8_quantize") : 0.0},
        {"seconds", r.iteration_seconds},
        {"kernel_issue", host.count("kernel issue") ? host.at("kernel issue") : 0.0},
        {"peak", r.ranks.front().peak_memory_bytes},
        {"fp8_gemm", seconds("fp8_gemm")},
        {"gemm", seconds("gemm")}};
  });
}

// `s` simulated on the H100 preset for `iterations`, every op and collective recorded
// (SimReport's RankStats::collectives); to be run in a child.
SimReport simulated_recording(const Scenario& s, int iterations = 1) {
  const Topology t = load_topology("dgx-h100");
  SimulateOptions o = priced_options(t);
  o.iterations = iterations;
  o.record_ops = true;
  return simulate(s, t, o);
}

// Hidden 4096, sequence 2048 on an H100: the linear layers' GEMMs at twice the bf16 rate
// outweigh the casts (measured when written: 36 ms in bf16, 31 ms in FP8 per iteration).
TEST(Fp8Sim, StepIsFasterThanBf16) {
  Scenario bf16 = fp8_scenario("delayed");
  bf16.training.fp8.format = "";
  const auto base = simulated(bf16);
  const auto fp8 = simulated(fp8_scenario("delayed"));
  ASSERT_FALSE(base.contains("error")) << base;
  ASSERT_FALSE(fp8.contains("error")) << fp8;
  EXPECT_EQ(base["fp8_gemm"].get<double>(), 0.0);
  EXPECT_GT(fp8["fp8_gemm"].get<double>(), 0.0);
  // The linear layers' GEMMs leave "gemm" for "fp8_gemm"; the output layer's stay.
  EXPECT_LT(fp8["gemm"].get<double>(), base["gemm"].get<double>());
  EXPECT_LT(fp8["seconds"].get<double>(), base["seconds"].get<double>());
  // The FP8 copies (weights held for the step, inputs and gradients while used) count.
  EXPECT_NE(fp8["peak"].get<std::int64_t>(), base["peak"].get<std::int64_t>());
}

// Under transformer_impl transformer_engine the casts and amax updates of an FP8 linear are
// launched from Transformer Engine's C++ inside the module's call (the preset's 4 us kernel
// launch each), not issued one by one by the framework (42 us each on the H100 preset): FP8
// adds a tenth of the host issue time it adds under local layers, and TE's layers cost the
// host less than local ones in both precisions.
TEST(Fp8Sim, TransformerEngineLaunchesTheCastsFromItsModules) {
  auto issue = [](const std::string& impl, bool fp8) {
    Scenario s = fp8_scenario("delayed");
    s.model.transformer_impl = impl;
    if (!fp8) s.training.fp8.format = "";
    const auto r = simulated(s);
    EXPECT_FALSE(r.contains("error")) << r;
    return r.value("kernel_issue", 0.0);
  };
  const double local_bf16 = issue("local", false), local_fp8 = issue("local", true);
  const double te_bf16 = issue("transformer_engine", false),
               te_fp8 = issue("transformer_engine", true);
  EXPECT_LT(te_bf16, local_bf16);
  EXPECT_LT(te_fp8, local_fp8);
  EXPECT_GT(local_fp8 - local_bf16, 0.0);
  EXPECT_LT(te_fp8 - te_bf16, (local_fp8 - local_bf16) / 4)
      << local_bf16 << " " << local_fp8 << " " << te_bf16 << " " << te_fp8;
}

// --fp8-param-gather on one DGX H100 (dp 8, the distributed optimizer): the FP8 linear
// layers' weights are held as their codes, with no bf16 copy and no quantized copy for fprop
// — 2 bytes an element where they were 4 (the bf16 weight and its two FP8 copies against the
// codes and dgrad's copy of them) —; the optimizer's all-gather moves their codes, 1 byte an
// element instead of 2, so less of it is exposed; and the step quantizes no weight, each
// rank casting only its eighth of them from the fp32 main values.
TEST(Fp8Sim, ParamGatherHoldsAndGathersTheWeightsInFp8) {
  auto run = [](bool gather) {
    Scenario s = fp8_scenario("delayed");
    s.cluster.world_size = 8;
    s.training.global_batch_size = 8;
    s.parallelism.use_distributed_optimizer = true;
    s.training.fp8.param_gather = gather;
    return simulated(s);
  };
  const auto plain = run(false), gathered = run(true);
  ASSERT_FALSE(plain.contains("error")) << plain;
  ASSERT_FALSE(gathered.contains("error")) << gathered;
  // 2 layers × (qkv 3 + proj 1 + fc1 4 + fc2 4) · 4096² weight elements.
  const double fp8_elements = 2.0 * 12.0 * 4096.0 * 4096.0;
  const double saved =
      static_cast<double>(plain["peak"].get<std::int64_t>() - gathered["peak"].get<std::int64_t>());
  EXPECT_NEAR(saved, 2.0 * fp8_elements, 0.01 * 2.0 * fp8_elements);
  EXPECT_LT(gathered["exposed_dp"].get<double>(), 0.95 * plain["exposed_dp"].get<double>())
      << plain << " " << gathered;
  EXPECT_LT(gathered["quantize"].get<double>(), plain["quantize"].get<double>());
  EXPECT_LT(gathered["seconds"].get<double>(), plain["seconds"].get<double>());
}

// Delayed scaling reduces each FP8 layer's amaxes over Megatron's amax reduction group (tp ×
// dp × cp, get_amax_reduction_group(with_context_parallel=True)), a communicator of its own,
// from the first step on. Before, the first step skipped the reduction (nothing recorded) and
// later steps ran it on the data-parallel communicator, behind the parameter all-gathers the
// distributed optimizer overlaps with forward: a step after the first came out 6 % slower
// here (GPT-3 175B on 128 H100s at global batch 32: 52 %). Two stages of 4 layers at tp 8 ×
// dp 2 over four DGX H100s, each stage's dp pair on two nodes.
TEST(Fp8Sim, DelayedScalingReducesAmaxesOnTheirOwnGroupFromTheFirstStep) {
  auto run = [](int iterations) {
    return testing::in_child([&] {
      Scenario s = fp8_scenario("delayed");
      s.model.num_layers = 8;
      s.model.hidden_size = 8192;
      s.model.num_attention_heads = 64;
      s.model.use_flash_attn = false;
      s.model.transformer_impl = "transformer_engine";
      s.cluster.world_size = 32;
      s.parallelism.tensor_model_parallel_size = 8;
      s.parallelism.pipeline_model_parallel_size = 2;
      s.parallelism.virtual_pipeline_model_parallel_size = 2;
      s.parallelism.sequence_parallel = true;
      s.parallelism.use_distributed_optimizer = true;
      s.parallelism.overlap_grad_reduce = true;
      s.parallelism.overlap_param_gather = true;
      s.training.global_batch_size = 8;
      const SimReport r = simulated_recording(s, iterations);
      int amax = 0;
      for (const std::string& c : r.ranks.front().collectives)
        if (c.rfind("all_reduce tp-dp-cp ", 0) == 0) ++amax;
      return nlohmann::json{{"seconds", r.iteration_seconds}, {"amax", amax}};
    });
  };
  const auto first = run(1), second = run(2);
  ASSERT_FALSE(first.contains("error")) << first;
  ASSERT_FALSE(second.contains("error")) << second;
  // Each of the stage's 4 FP8 layers reduces once a step, the first step included.
  EXPECT_EQ(first["amax"].get<int>(), 4);
  EXPECT_EQ(second["amax"].get<int>(), 8);
  const double one = first["seconds"].get<double>(), two = second["seconds"].get<double>();
  EXPECT_NEAR(two, one, 0.01 * one) << one << " s, then " << two << " s";
}

// Sequence parallelism at tp 2 without --tp-comm-overlap: under per-tensor scaling each
// FP8 linear's all-gather moves codes, as Transformer Engine's does (its layer norm writes
// FP8 and the shard's codes are gathered; backward gathers them again for the weight
// gradient and gathers the row-parallel layers' output gradients as codes). Per layer and
// microbatch six all-gathers of (sequence × hidden) elements (qkv's and fc1's inputs forward
// and again backward, proj's and fc2's output gradients) at 1 byte instead of 2; three more
// of the same size stay bf16 (the output layer's input, forward and backward, and the
// embedding's gradient). Two layers: (6·2·1 + 3·2) / (6·2·2 + 3·2) = 18 / 30 of the bf16
// run's bytes. The block recipes gather codes too, with their fp32 block scales (here every
// shard, 1,024 rows of 4,096, is whole 128-blocks): forward the inputs' rowwise copies,
// backward their columnwise ones, and both of each output gradient (TE's two usages), 8
// code gathers and 8 scale gathers of 4/128 bytes an element a layer:
// (2·8·(1 + 1/32) + 3·2) / 30 = 22.5 / 30. With shards that are not whole blocks (a
// sequence of 2,000) they gather bf16, as TE falls back.
TEST(Fp8Sim, SequenceParallelGathersMoveFp8Codes) {
  auto gathered = [](const std::string& recipe, bool fp8, bool overlap = false,
                     int sequence = 2048) {
    return testing::in_child([&] {
      Scenario s = fp8_scenario(recipe);
      s.model.seq_length = sequence;
      if (!fp8) s.training.fp8.format = "";
      s.cluster.world_size = 2;
      s.parallelism.tensor_model_parallel_size = 2;
      s.parallelism.sequence_parallel = true;
      s.parallelism.tp_comm_overlap = overlap;
      s.training.train_iters = 1;
      const SimReport r = simulated_recording(s);
      double bytes = 0;
      for (const std::string& c : r.ranks.front().collectives)
        if (c.rfind("all_gather tp ", 0) == 0) bytes += std::stod(c.substr(14));
      return nlohmann::json{{"bytes", bytes}};
    });
  };
  const auto bf16 = gathered("delayed", false);
  ASSERT_FALSE(bf16.contains("error")) << bf16;
  const double base = bf16["bytes"].get<double>();
  ASSERT_GT(base, 0.0);
  for (const std::string recipe : {"delayed", "tensorwise"}) {
    const auto r = gathered(recipe, true);
    ASSERT_FALSE(r.contains("error")) << r;
    EXPECT_NEAR(r["bytes"].get<double>() / base, 18.0 / 30.0, 1e-9) << recipe;
  }
  const auto block = gathered("blockwise", true);
  ASSERT_FALSE(block.contains("error")) << block;
  EXPECT_NEAR(block["bytes"].get<double>() / base, 22.5 / 30.0, 1e-9);
  const auto ragged_bf16 = gathered("blockwise", false, false, 2000);
  const auto ragged = gathered("blockwise", true, false, 2000);
  ASSERT_FALSE(ragged.contains("error")) << ragged;
  EXPECT_DOUBLE_EQ(ragged["bytes"].get<double>(), ragged_bf16["bytes"].get<double>());
  // With --tp-comm-overlap the forward gathers and the output gradients' gathers move round
  // the ring instead; what stays an all-gather is backward's re-gather of qkv's and fc1's
  // inputs (codes, as TE's bulk overlap gathers its saved FP8 ln_out), the output layer's
  // re-gather and the embedding's gradient (bf16): (2·2·1 + 2·2) / (2·2·2 + 2·2) = 8 / 12.
  const auto ring_bf16 = gathered("delayed", false, true);
  const auto ring_fp8 = gathered("delayed", true, true);
  ASSERT_FALSE(ring_bf16.contains("error")) << ring_bf16;
  ASSERT_FALSE(ring_fp8.contains("error")) << ring_fp8;
  EXPECT_NEAR(ring_fp8["bytes"].get<double>() / ring_bf16["bytes"].get<double>(), 8.0 / 12.0, 1e-9);
}

}  // namespace
}  // namespace tandem::sim
