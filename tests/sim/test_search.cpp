// tandem search's pieces: the enumeration counts (derived by hand), and the dry run against
// full symmetric simulations over many candidates — the dry run's memory high-water mark
// must equal the simulated one to the byte, and its lower bound must not exceed the
// simulated iteration time (which is what makes the search's top K exact).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "sim/cost_model.hpp"
#include "sim/fp8_gpu_rules.hpp"
#include "sim/search/dry_run.hpp"
#include "sim/search/search_space.hpp"
#include "sim/sim_runner.hpp"
#include "tests/sim/search_fixtures.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim::search {
namespace {

// Runs `body` in a forked child (SimGrid's engine runs once per process) and returns the
// JSON it produced (or {"error": …}).
using testing::in_child;

// The dry runs' lower bounds of `picked` on dgx-h100, in a child process (a JSON array, or
// {"error": …}).
nlohmann::json h100_bounds(const std::vector<Scenario>& picked) {
  return in_child([&] {
    const Topology t = load_topology("dgx-h100");
    nlohmann::json out = nlohmann::json::array();
    for (const auto& d : dry_run(picked, t, pricer_for(t))) out.push_back(d.lower_bound_seconds);
    return out;
  });
}

// The symmetric simulation of `s` on dgx-h100, in a child process ({"seconds": iteration
// seconds}, or {"error": …}).
nlohmann::json h100_simulated(const Scenario& s) {
  return in_child([&] {
    const Topology t = load_topology("dgx-h100");
    SimulateOptions o;
    o.mode = SimMode::symmetric;
    o.pricer = pricer_for(t);
    return nlohmann::json{{"seconds", simulate(s, t, o).iteration_seconds}};
  });
}

// Each of `picked`, simulated on dgx-h100, takes no less than its bound in `dry` (an array
// from h100_bounds) and, where `at_least` > 0, less than its bound / at_least (the bound is
// not looser than that).
void expect_bounds_hold(const nlohmann::json& dry, const std::vector<Scenario>& picked,
                        double at_least = 0) {
  ASSERT_FALSE(dry.is_object()) << dry.dump();
  ASSERT_EQ(dry.size(), picked.size());
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const auto sim = h100_simulated(picked[i]);
    ASSERT_FALSE(sim.contains("error")) << sim.dump();
    const double bound = dry[i].get<double>(), simulated = sim["seconds"].get<double>();
    const std::string label = candidate_label(picked[i]);
    EXPECT_LE(bound, simulated * (1 + 1e-9)) << label;
    if (at_least > 0) {
      EXPECT_GT(bound, at_least * simulated) << label;
    }
  }
}

// The labels of the candidates other than the baseline, in enumeration order.
std::vector<std::string> searched_labels(const Enumeration& e) {
  std::vector<std::string> labels;
  for (const auto& c : e.valid)
    if (!c.baseline) labels.push_back(c.label);
  return labels;
}

SearchSpace fixed_space(const Scenario& s) {
  SearchSpace space = default_space(s, s.cluster.world_size);
  for (const char* f :
       {"vp=none", "mbs=1", "recompute=none", "sp=false", "distopt=false", "overlap_grad=false",
        "overlap_param=false", "order=tp-cp-ep-dp-pp", "schedule=auto"})
    fix(space, f);
  return space;
}

TEST(SearchSpace, CountsTheLayoutsThatDivideTheWorld) {
  Scenario s = small_model();
  s.cluster.world_size = 8;
  SearchSpace space = fixed_space(s);
  vary(space, "tp=1,2,4,8");
  vary(space, "pp=1,2,4,8");
  const Enumeration e = enumerate(s, 8, space);
  // 16 (tp, pp) pairs plus the baseline; tp·pp must divide 8: (1,1) (1,2) (1,4) (1,8) (2,1)
  // (2,2) (2,4) (4,1) (4,2) (8,1) are valid, the other 6 are not; the baseline (tp 1, pp 1)
  // duplicates one of them.
  EXPECT_EQ(e.enumerated, 17);
  EXPECT_EQ(e.valid.size(), 10u);
  EXPECT_TRUE(e.valid.front().baseline);
  std::int64_t invalid = 0, duplicate = 0;
  for (const auto& [rule, n] : e.pruned) {
    if (rule.rfind("invalid: world_size", 0) == 0) invalid += n;
    if (rule.rfind("duplicate", 0) == 0) duplicate += n;
  }
  EXPECT_EQ(invalid, 6);
  EXPECT_EQ(duplicate, 1);
}

TEST(SearchSpace, InterleavingAutoTriesEveryDivisorOfTheStageDepth) {
  Scenario s = small_model();
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=2");
  vary(space, "vp=auto");
  s.training.global_batch_size = 64;  // m = 64 / 8 = 8, a multiple of pp
  const Enumeration e = enumerate(s, 16, space);
  // 8 layers / pp 2 = 4 per stage: none, 1, 2 (4 would be one chunk per stage).
  const std::vector<std::string> labels = searched_labels(e);
  EXPECT_EQ(labels, (std::vector<std::string>{"tp1 pp2 mbs1 none tp-cp-ep-dp-pp",
                                              "tp1 pp2 vp1 mbs1 none tp-cp-ep-dp-pp",
                                              "tp1 pp2 vp2 mbs1 none tp-cp-ep-dp-pp"}));
}

TEST(SearchSpace, PlacesTheEmbeddingAndLossWhenVaried) {
  Scenario s = small_model();
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=2");
  vary(space, "vp=auto");
  vary(space, "embed_split=false,true");
  vary(space, "loss_split=false,true");
  s.training.global_batch_size = 64;
  const Enumeration e = enumerate(s, 16, space);
  // Neither counted: 8 / 2 = 4 layers a stage, vp none, 1, 2. One of them: 9 / 2 does not
  // split (one "none" candidate each, refused). Both: 10 / 2 = 5 a stage, vp none and 1.
  EXPECT_EQ(e.enumerated, 1 + 3 + 1 + 1 + 2);
  const std::vector<std::string> labels = searched_labels(e);
  EXPECT_EQ(labels, (std::vector<std::string>{
                        "tp1 pp2 mbs1 none tp-cp-ep-dp-pp", "tp1 pp2 vp1 mbs1 none tp-cp-ep-dp-pp",
                        "tp1 pp2 vp2 mbs1 none tp-cp-ep-dp-pp",
                        "tp1 pp2 embed-split loss-split mbs1 none tp-cp-ep-dp-pp",
                        "tp1 pp2 vp1 embed-split loss-split mbs1 none tp-cp-ep-dp-pp"}));
  // By default the base's placement only: no account_for candidate.
  const Enumeration plain = enumerate(s, 16, fixed_space(s));
  for (const auto& c : plain.valid) EXPECT_EQ(c.label.find("split"), std::string::npos);
  // On one stage the embedding, the layers and the loss share it whatever is counted: the
  // three accounted variants duplicate the plain one.
  fix(space, "pp=1");
  const Enumeration one = enumerate(s, 16, space);
  EXPECT_EQ(one.pruned.at("duplicate: account_for_*_in_pipeline_split has no effect at "
                          "pipeline_model_parallel_size 1"),
            3);
}

TEST(SearchSpace, ZeroBubbleScheduleIsADimension) {
  Scenario s = small_model();
  EXPECT_EQ(default_space(s, 16).values.at("pipeline_schedule"),
            (std::vector<std::string>{"auto", "zb-h1"}));
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  vary(space, "pp=1,2");
  vary(space, "vp=auto");
  vary(space, "schedule=auto,zb-h1");
  s.training.global_batch_size = 64;
  const Enumeration e = enumerate(s, 16, space);
  // pp 1: vp none only (the baseline's layout), zb-h1 refused (no pipeline). pp 2: vp none,
  // 1, 2 under auto; zb-h1 runs one chunk a stage, so only with vp none.
  std::vector<std::string> labels;
  for (const auto& c : e.valid) labels.push_back(c.label);
  EXPECT_EQ(labels,
            (std::vector<std::string>{
                "tp1 pp1 mbs1 none tp-cp-ep-dp-pp", "tp1 pp2 mbs1 none tp-cp-ep-dp-pp",
                "tp1 pp2 zb-h1 mbs1 none tp-cp-ep-dp-pp", "tp1 pp2 vp1 mbs1 none tp-cp-ep-dp-pp",
                "tp1 pp2 vp2 mbs1 none tp-cp-ep-dp-pp"}));
  std::int64_t refused = 0;
  for (const auto& [rule, n] : e.pruned)
    if (rule.rfind("invalid: pipeline_schedule", 0) == 0) refused += n;
  EXPECT_EQ(refused, 1 + 2);  // zb-h1 at pp 1, and at pp 2 with vp 1 and 2
  // Each rule is counted once whatever its numbers, and reads whole: vp 1 and vp 2 at pp 2
  // break one rule ("N" for the number of chunks).
  EXPECT_EQ(e.pruned.at("invalid: pipeline_schedule: runs one model chunk per stage, but there "
                        "are N (virtual pipeline); use \"interleaved\" or \"auto\""),
            2);
  EXPECT_EQ(e.pruned.at("invalid: pipeline_schedule: fills a pipeline's bubble and needs "
                        "pipeline_model_parallel_size ≥ N; use \"none\" or \"auto\" at N"),
            1);
}

// Megatron-Core's combined 1F1B is a dimension for a mixture of experts (false and true;
// the validator prunes where its rules refuse it), the base's value for a dense model; its
// short name varies it, and the label says so.
TEST(SearchSpace, CombinedOneFOneBIsADimensionForAMixtureOfExperts) {
  const Scenario dense = small_model();
  EXPECT_EQ(default_space(dense, 8).values.at("overlap_moe_expert_parallel_comm"),
            std::vector<std::string>{"false"});
  Scenario moe = dense;
  moe.model.num_experts = 8;
  moe.model.moe_token_dispatcher_type = "alltoall";
  SearchSpace space = default_space(moe, 8);
  EXPECT_EQ(space.values.at("overlap_moe_expert_parallel_comm"),
            (std::vector<std::string>{"false", "true"}));
  fix(space, "moe_overlap=true");
  EXPECT_EQ(space.values.at("overlap_moe_expert_parallel_comm"), std::vector<std::string>{"true"});
  moe.parallelism.overlap_moe_expert_parallel_comm = true;
  EXPECT_NE(candidate_label(moe).find("moe-overlap"), std::string::npos) << candidate_label(moe);
}

TEST(SearchSpace, RejectsUnknownFieldsAndEmptyLists) {
  SearchSpace space = default_space(small_model(), 16);
  EXPECT_THROW(vary(space, "tensor_paralel=2"), ConfigError);
  EXPECT_THROW(vary(space, "tp="), ConfigError);
  EXPECT_THROW(fix(space, "tp=1,2"), ConfigError);
  EXPECT_THROW(vary(space, "tp"), ConfigError);
}

// --only: the listed fields keep their search values, every other field is the base's, so
// the candidates differ only there (validate's searched knobs: the published layout, with
// what its authors tuned but did not state).
TEST(SearchSpace, OnlyTheListedFieldsAreSearched) {
  Scenario s = small_model();
  s.parallelism.tensor_model_parallel_size = 2;
  s.parallelism.pipeline_model_parallel_size = 2;
  s.parallelism.sequence_parallel = true;
  s.training.recompute_granularity = "selective";
  SearchSpace space = default_space(s, 16);
  only(space, s, {"mbs", "recompute_granularity"});
  EXPECT_EQ(space.values.at("micro_batch_size"), (std::vector<std::string>{"1", "2", "4", "8"}));
  EXPECT_EQ(space.values.at("recompute_granularity"),
            (std::vector<std::string>{"none", "selective", "full"}));
  EXPECT_EQ(space.values.at("tensor_model_parallel_size"), std::vector<std::string>{"2"});
  EXPECT_EQ(space.values.at("pipeline_model_parallel_size"), std::vector<std::string>{"2"});
  EXPECT_EQ(space.values.at("num_layers_per_virtual_pipeline_stage"),
            std::vector<std::string>{"none"});
  EXPECT_EQ(space.values.at("sequence_parallel"), std::vector<std::string>{"true"});
  const Enumeration e = enumerate(s, 16, space);
  // dp 4 and global batch 32: micro batches 1, 2, 4 and 8 all divide 8 per rank; 4 × 3 = 12
  // layouts, one of them the baseline's (mbs 1, selective) counted twice.
  EXPECT_EQ(e.enumerated, 13);
  ASSERT_EQ(e.valid.size(), 12u);
  for (const auto& c : e.valid) {
    EXPECT_EQ(c.scenario.parallelism.tensor_model_parallel_size, 2) << c.label;
    EXPECT_EQ(c.scenario.parallelism.pipeline_model_parallel_size, 2) << c.label;
    EXPECT_TRUE(c.scenario.parallelism.sequence_parallel) << c.label;
    EXPECT_FALSE(c.scenario.parallelism.num_layers_per_virtual_pipeline_stage) << c.label;
  }
  EXPECT_EQ(value_of(s, "recompute_granularity"), "selective");
  EXPECT_EQ(value_of(s, "num_layers_per_virtual_pipeline_stage"), "none");
  try {
    only(space, s, {"mbs", "microbatch"});
    FAIL() << "an unknown field was accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("--only"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("microbatch"), std::string::npos) << err.what();
  }
}

// --vary precision: each value is Megatron's flag set (bf16; bf16 + --fp8-format hybrid +
// --fp8-recipe), the base's own precision by default, and the GPU's FP8 rules prune what it
// lacks (MXFP8 needs Blackwell, FP8 at all needs compute capability 8.9).
TEST(SearchSpace, ComparesPrecisionsWhenVariedAndPrunesWhatTheGpuLacks) {
  Scenario s = small_model();  // fp16
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=1");
  EXPECT_EQ(space.values.at("precision"), std::vector<std::string>{"base"});
  vary(space, "precision=bf16,fp8,fp8-tensorwise,mxfp8");
  auto on = [](const char* topology) {
    const GpuSpec gpu = load_topology(topology).gpu;
    return [gpu](const Scenario& c) { check_fp8_gpu(c, gpu); };
  };
  const Enumeration h100 = enumerate(s, 16, space, on("dgx-h100"));
  std::vector<std::string> got;
  for (const auto& c : h100.valid)
    got.push_back(c.label + " | " + precision_of(c.scenario) + " " +
                  (c.scenario.training.bf16 ? "bf16" : "") + " " + c.scenario.training.fp8.format);
  EXPECT_EQ(got, (std::vector<std::string>{
                     "tp1 pp1 mbs1 none tp-cp-ep-dp-pp | fp16  ",  // the baseline
                     "tp1 pp1 mbs1 none tp-cp-ep-dp-pp | bf16 bf16 ",
                     "tp1 pp1 mbs1 none tp-cp-ep-dp-pp fp8-delayed | fp8-delayed bf16 hybrid",
                     "tp1 pp1 mbs1 none tp-cp-ep-dp-pp fp8-tensorwise | fp8-tensorwise bf16 "
                     "hybrid"}));
  std::int64_t mx = 0;
  for (const auto& [rule, n] : h100.pruned)
    if (rule.rfind("invalid: fp8_recipe: MXFP8 needs a Blackwell GPU", 0) == 0) mx += n;
  EXPECT_EQ(mx, 1);
  // On Blackwell MXFP8 runs (E4M3 in 32-element blocks); on an A100 no FP8 recipe does.
  const Enumeration b200 = enumerate(s, 16, space, on("dgx-b200"));
  ASSERT_EQ(b200.valid.size(), 5u);
  EXPECT_EQ(b200.valid.back().scenario.training.fp8.recipe, "mxfp8");
  EXPECT_EQ(b200.valid.back().scenario.training.fp8.format, "e4m3");
  const Enumeration a100 = enumerate(s, 16, space, on("dgx-a100-80g"));
  EXPECT_EQ(a100.valid.size(), 2u);
  EXPECT_THROW(vary(space, "precision=fp4"), ConfigError);
}

// A bare --vary FIELD takes every value a switch or a named choice has; a size (tp, pp, cp,
// mbs) has no such list and is refused with the field named.
TEST(SearchSpace, BareVaryTakesEveryValueOfTheField) {
  Scenario s = small_model();  // fp16
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=1");
  vary(space, "sp");
  EXPECT_EQ(space.values.at("sequence_parallel"), (std::vector<std::string>{"false", "true"}));
  vary(space, "--recompute-granularity");
  EXPECT_EQ(space.values.at("recompute_granularity"),
            (std::vector<std::string>{"none", "selective", "full"}));
  fix(space, "recompute=none");
  vary(space, "precision");
  // Each recipe once: "fp8" is another word for fp8-delayed.
  EXPECT_EQ(space.values.at("precision"),
            (std::vector<std::string>{"bf16", "fp8-blockwise", "fp8-delayed", "fp8-tensorwise",
                                      "mxfp8"}));
  const GpuSpec h100 = load_topology("dgx-h100").gpu;
  const Enumeration e = enumerate(s, 16, space, [&](const Scenario& c) { check_fp8_gpu(c, h100); });
  // The fp16 baseline, then bf16 and the three Hopper recipes; MXFP8 pruned on Hopper.
  std::vector<std::string> got;
  for (const auto& c : e.valid) got.push_back(precision_of(c.scenario));
  EXPECT_EQ(got, (std::vector<std::string>{"fp16", "bf16", "fp8-blockwise", "fp8-delayed",
                                           "fp8-tensorwise"}));
  try {
    vary(space, "mbs");
    FAIL() << "a bare size was accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("mbs"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("FIELD=V1,V2"), std::string::npos) << err.what();
  }
  EXPECT_THROW(vary(space, "precison"), ConfigError);
}

// A base with FP8 parameters (--fp8-param-gather, delayed) keeps them for the per-tensor
// recipes; the block recipes, whose weights the step gathers in bf16, drop them instead of
// being refused.
TEST(SearchSpace, BlockRecipesDropTheBasesFp8Parameters) {
  Scenario s = small_model();
  s.training.fp16 = false;
  s.training.bf16 = true;
  s.training.fp8.format = "hybrid";
  s.training.fp8.param_gather = true;
  s.parallelism.use_distributed_optimizer = true;
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=1");
  fix(space, "distopt=true");
  vary(space, "precision=fp8,fp8-tensorwise,fp8-blockwise");
  const GpuSpec gpu = load_topology("dgx-h100").gpu;
  const Enumeration e =
      enumerate(s, 16, space, [gpu](const Scenario& c) { check_fp8_gpu(c, gpu); });
  std::map<std::string, bool> gather;
  for (const auto& c : e.valid)
    gather[precision_of(c.scenario)] = c.scenario.training.fp8.param_gather;
  EXPECT_EQ(gather,
            (std::map<std::string, bool>{
                {"fp8-delayed", true}, {"fp8-tensorwise", true}, {"fp8-blockwise", false}}));
  for (const auto& [rule, n] : e.pruned)  // the fp8 candidate is the baseline again
    EXPECT_EQ(rule.rfind("duplicate", 0), 0u) << rule;
}

// A base whose distributed optimizer all-reduces its gradients (Megatron-DeepSpeed's
// BF16_Optimizer) keeps that for the distopt candidates; the others, which have no sharded
// optimizer to say it of, all-reduce plainly instead of being refused.
TEST(SearchSpace, TheBasesAllReducedShardedOptimizerGoesWithIt) {
  Scenario s = small_model();
  s.parallelism.use_distributed_optimizer = true;
  s.parallelism.distributed_optimizer_grad_reduce = "all_reduce";
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=1");
  vary(space, "distopt=true,false");
  const Enumeration e = enumerate(s, 16, space);
  std::map<bool, std::string> reduce;
  for (const auto& c : e.valid)
    reduce[c.scenario.parallelism.use_distributed_optimizer] =
        c.scenario.parallelism.distributed_optimizer_grad_reduce;
  EXPECT_EQ(reduce, (std::map<bool, std::string>{{false, "reduce_scatter"}, {true, "all_reduce"}}));
}

// An FP8 candidate's GEMMs are priced at the GPU's FP8 tensor rate (1979 TFLOP/s on an H100,
// twice bf16's 989): a GEMM-bound layout (one GPU, hidden 4096, two 4096-token sequences a
// microbatch) is bounded lower with FP8 than without. (A small model at tp 8 is bound by the
// host's issue instead, where FP8's extra quantize and amax ops make it slower.)
TEST(DryRun, AnFp8CandidateIsBoundedBelowItsBf16Twin) {
  Scenario s = small_model();
  s.model.hidden_size = 4096;
  s.model.num_attention_heads = 32;
  s.model.seq_length = 4096;
  s.model.num_layers = 2;
  s.cluster.topology = "dgx-h100";
  s.cluster.world_size = 1;
  s.training.global_batch_size = 4;
  SearchSpace space = fixed_space(s);
  fix(space, "tp=1");
  fix(space, "pp=1");
  fix(space, "mbs=2");
  vary(space, "precision=bf16,fp8");
  const Enumeration e = enumerate(s, 1, space);
  std::vector<Scenario> picked;
  for (const auto& c : e.valid)
    if (!c.baseline) picked.push_back(c.scenario);
  ASSERT_EQ(picked.size(), 2u);
  const nlohmann::json dry = h100_bounds(picked);
  ASSERT_FALSE(dry.is_object()) << dry.dump();
  EXPECT_FALSE(picked[0].training.fp8.enabled());
  EXPECT_TRUE(picked[1].training.fp8.enabled());
  EXPECT_LT(dry[1].get<double>(), 0.9 * dry[0].get<double>());
}

// Many candidates of the default space of a small model on 16 GPUs (tp, pp, interleaving,
// micro batch, recomputation, sp, distributed optimizer, overlaps): the dry run's memory
// equals the simulation's high-water mark, and its bound is below the simulated time.
TEST(DryRun, MemoryEqualsTheSimulatedHighWaterMarkAndTheBoundHolds) {
  const Scenario base = small_model();
  SearchSpace space = default_space(base, 16);
  fix(space, "order=tp-cp-ep-dp-pp");
  vary(space, "mbs=1,2");
  const Enumeration e = enumerate(base, 16, space);
  ASSERT_GT(e.valid.size(), 200u);
  // A spread of the valid candidates (every k-th), 48 of them.
  std::vector<Scenario> picked;
  const std::size_t step = e.valid.size() / 48;
  for (std::size_t i = 0; i < e.valid.size() && picked.size() < 48; i += step)
    picked.push_back(e.valid[i].scenario);
  const nlohmann::json dry = in_child([&] {
    const Topology t = load_topology("dgx-a100-80g");
    nlohmann::json out = nlohmann::json::array();
    for (const auto& d : dry_run(picked, t, pricer_for(t)))
      out.push_back({{"peak", d.peak_memory_bytes},
                     {"bound", d.lower_bound_seconds},
                     {"busy", d.busy_lower_bound}});
    return out;
  });
  ASSERT_FALSE(dry.contains("error")) << dry.dump();
  ASSERT_EQ(dry.size(), picked.size());
  int pipelined = 0;
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const auto sim = in_child([&] {
      const Topology t = load_topology("dgx-a100-80g");
      SimulateOptions o;
      o.mode = SimMode::symmetric;
      o.pricer = pricer_for(t);
      auto j = to_json(simulate(picked[i], t, o));
      j.erase("ranks");
      return j;
    });
    ASSERT_FALSE(sim.contains("error")) << sim.dump();
    const std::string label = candidate_label(picked[i]);
    EXPECT_EQ(dry[i]["peak"].get<std::int64_t>(), sim["max_peak_memory_bytes"].get<std::int64_t>())
        << label;
    const double bound = dry[i]["bound"].get<double>();
    const double simulated = sim["iteration_seconds"].get<double>();
    EXPECT_LE(bound, simulated * (1 + 1e-9)) << label;
    EXPECT_GE(bound, dry[i]["busy"].get<double>()) << label;
    // The bound is not vacuous: it holds at least 40 % of the simulated time. (Since the
    // issuing host is modelled, host time enters the bound through each stage's host span
    // but not yet through the pipeline part: at pp 8 with 2-sample microbatches the bound
    // holds 44 % of the simulated time, the loosest of these candidates.)
    EXPECT_GT(bound, 0.4 * simulated) << label;
    if (picked[i].parallelism.pipeline_model_parallel_size > 1) ++pipelined;
  }
  EXPECT_GT(pipelined, 10);
}

// The dry run's shortcut: each stage stepped at two short microbatch counts and extended to
// m along the line through them gives what stepping all m microbatches gives. Over a spread
// of a small model's default space on 16 H100s (NCCL's tuner prices the groups) with m from
// 8 to 128: 1F1B, zb-h1, interleaved (groups of pp), no pipelining, recomputation,
// sequence parallelism, the distributed optimizer and both overlaps. The memory high-water
// mark is equal to the byte; the seconds within 1e-9 relative: the extended line sums the
// same prices in another order (the short steps agree to ~1e-15).
TEST(DryRun, TwoShortStepsExtendedToMEqualEveryMicrobatchStepped) {
  Scenario base = small_model();
  base.cluster.topology = "dgx-h100";
  base.training.fp16 = false;
  base.training.bf16 = true;
  base.training.global_batch_size = 256;
  SearchSpace space = default_space(base, 16);
  fix(space, "order=tp-cp-ep-dp-pp");
  vary(space, "mbs=1,4");
  const Enumeration e = enumerate(base, 16, space);
  std::vector<Scenario> picked;
  const std::size_t step = std::max<std::size_t>(1, e.valid.size() / 40);
  for (std::size_t i = 0; i < e.valid.size() && picked.size() < 40; i += step)
    if (short_steps(e.valid[i].scenario, 0)) picked.push_back(e.valid[i].scenario);
  std::map<std::string, int> kinds;
  for (const auto& s : picked) ++kinds[effective_pipeline_schedule(s)];
  EXPECT_GE(picked.size(), 25u);
  for (const char* kind : {"none", "1f1b", "zb-h1", "interleaved"})
    EXPECT_GT(kinds[kind], 0) << kind;
  const nlohmann::json out = in_child([&] {
    const Topology t = load_topology("dgx-h100");
    nlohmann::json j = nlohmann::json::array();
    const auto fast = dry_run(picked, t, pricer_for(t));
    const auto all = dry_run(picked, t, pricer_for(t), std::numeric_limits<std::int64_t>::max(),
                             DryRunSteps::all);
    for (std::size_t i = 0; i < picked.size(); ++i) {
      nlohmann::json stages = nlohmann::json::array();
      for (std::size_t k = 0; k < all[i].stages.size(); ++k) {
        const auto &f = fast[i].stages.at(k), &a = all[i].stages[k];
        stages.push_back(
            {{"busy", {f.busy_seconds, a.busy_seconds}},
             {"host", {f.host_seconds, a.host_seconds}},
             {"first_recv", {f.before_first_recv, a.before_first_recv}},
             {"first_send", {f.at_first_send, a.at_first_send}},
             {"since_busy", {f.since_first_recv.busy, a.since_first_recv.busy}},
             {"since_first_send",
              {f.since_first_recv.at_first_send, a.since_first_recv.at_first_send}},
             {"last_recv", {f.since_first_recv.at_last_recv, a.since_first_recv.at_last_recv}},
             {"last_send", {f.since_first_recv.at_last_send, a.since_first_recv.at_last_send}}});
      }
      j.push_back({{"extrapolated", {fast[i].extrapolated, all[i].extrapolated}},
                   {"peak", {fast[i].peak_memory_bytes, all[i].peak_memory_bytes}},
                   {"bound", {fast[i].lower_bound_seconds, all[i].lower_bound_seconds}},
                   {"stages", stages}});
    }
    return j;
  });
  ASSERT_FALSE(out.is_object()) << out.dump();
  ASSERT_EQ(out.size(), picked.size());
  auto near = [](const nlohmann::json& pair) {
    const double f = pair[0].get<double>(), a = pair[1].get<double>();
    return std::abs(f - a) <= 1e-9 * std::max(1e-6, std::abs(a));
  };
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const std::string label = candidate_label(picked[i]);
    EXPECT_TRUE(out[i]["extrapolated"][0].get<bool>()) << label;
    EXPECT_FALSE(out[i]["extrapolated"][1].get<bool>()) << label;
    EXPECT_EQ(out[i]["peak"][0], out[i]["peak"][1]) << label;
    EXPECT_TRUE(near(out[i]["bound"])) << label << " " << out[i]["bound"].dump();
    for (const auto& st : out[i]["stages"])
      for (const auto& [field, pair] : st.items())
        EXPECT_TRUE(near(pair)) << label << " " << field << " " << pair.dump();
  }
}

// tandem search probes every candidate on its last pipeline stage and steps in full only
// those whose probe bound is under the K-th best time: the probe must be the full dry run's
// last stage (the same step, so its high-water mark and clock are lower bounds on the
// candidate's), flagged a probe only where other stages exist.
TEST(DryRun, AProbeIsTheFullDryRunsLastStage) {
  Scenario base = small_model();
  base.cluster.topology = "dgx-h100";
  base.training.fp16 = false;
  base.training.bf16 = true;
  base.training.global_batch_size = 64;
  SearchSpace space = default_space(base, 16);
  fix(space, "order=tp-cp-ep-dp-pp");
  const Enumeration e = enumerate(base, 16, space);
  std::vector<Scenario> picked;
  const std::size_t step = std::max<std::size_t>(1, e.valid.size() / 30);
  for (std::size_t i = 0; i < e.valid.size() && picked.size() < 30; i += step)
    picked.push_back(e.valid[i].scenario);
  const nlohmann::json out = in_child([&] {
    const Topology t = load_topology("dgx-h100");
    const auto probes = dry_run(picked, t, pricer_for(t), std::numeric_limits<std::int64_t>::max(),
                                DryRunSteps::extrapolated, DryRunStages::last);
    const auto full = dry_run(picked, t, pricer_for(t));
    nlohmann::json j = nlohmann::json::array();
    for (std::size_t i = 0; i < picked.size(); ++i) {
      const auto &p = probes[i], &f = full[i];
      j.push_back({{"probe", p.probe},
                   {"stages", p.stages.size()},
                   {"stage", {p.stages.at(0).stage, f.stages.back().stage}},
                   {"busy", {p.stages[0].busy_seconds, f.stages.back().busy_seconds}},
                   {"host", {p.stages[0].host_seconds, f.stages.back().host_seconds}},
                   {"peak", {p.stages[0].peak_memory_bytes, f.stages.back().peak_memory_bytes}},
                   {"bound", {p.lower_bound_seconds, f.lower_bound_seconds}},
                   {"max_peak", {p.peak_memory_bytes, f.peak_memory_bytes}}});
    }
    return j;
  });
  ASSERT_FALSE(out.is_object()) << out.dump();
  ASSERT_EQ(out.size(), picked.size());
  int pipelined = 0;
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const std::string label = candidate_label(picked[i]);
    const int pp = picked[i].parallelism.pipeline_model_parallel_size;
    pipelined += pp > 1;
    EXPECT_EQ(out[i]["probe"].get<bool>(), pp > 1) << label;
    EXPECT_EQ(out[i]["stages"], 1) << label;
    EXPECT_EQ(out[i]["stage"][0], pp - 1) << label;
    EXPECT_EQ(out[i]["stage"][1], pp - 1) << label;
    EXPECT_EQ(out[i]["peak"][0], out[i]["peak"][1]) << label;
    for (const char* k : {"busy", "host"}) {
      const double a = out[i][k][0].get<double>(), b = out[i][k][1].get<double>();
      EXPECT_NEAR(a, b, 1e-9 * b) << label << " " << k;
    }
    EXPECT_LE(out[i]["bound"][0].get<double>(), out[i]["bound"][1].get<double>() * (1 + 1e-9))
        << label;
    EXPECT_LE(out[i]["max_peak"][0], out[i]["max_peak"][1]) << label;
  }
  EXPECT_GE(pipelined, 10);
}

// The bound prices each group where the rank order puts it (pipeline sends inside a node
// or over a NIC, NCCL's shape of the dp group), so it differs between orders that place
// alike in memory but not on the nodes, and holds for each (tandem search keys its dry
// runs by placement for this reason).
TEST(DryRun, TheBoundFollowsTheRankOrderAndHoldsForEach) {
  std::vector<Scenario> picked;
  for (const char* order : {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}) {
    Scenario s = small_model();
    s.cluster.topology = "dgx-h100";
    s.parallelism.tensor_model_parallel_size = 2;
    s.parallelism.pipeline_model_parallel_size = 2;
    s.parallelism.use_distributed_optimizer = true;
    s.parallelism.overlap_grad_reduce = true;
    s.parallelism.order = order;
    picked.push_back(s);
  }
  const nlohmann::json dry = h100_bounds(picked);
  ASSERT_FALSE(dry.is_object()) << dry.dump();
  ASSERT_EQ(dry.size(), 2u);
  EXPECT_NE(dry[0].get<double>(), dry[1].get<double>());
  expect_bounds_hold(dry, picked);
}

Scenario with_layout(Scenario s, int world, int tp, int pp, const std::string& order) {
  s.cluster.world_size = world;
  s.parallelism.tensor_model_parallel_size = tp;
  s.parallelism.pipeline_model_parallel_size = pp;
  s.parallelism.order = order;
  return s;
}

// Off the first pipeline stage Megatron-Core gathers a stage's parameters as one bucket,
// launched as the step begins (overlap_param_gather, its zero_grad); a later stage waits for
// it only once its first forward's input has come, so the gather runs during the pipeline
// fill. A GPT of 16 × 4096 at sequence 256 on 32 H100s (4 nodes), tp 1 × pp 4 × dp 8 with
// dp across the nodes: each later stage's gather takes longer than its forward, and a bound
// that put it after the fill on every stage came to 1.04 × the simulated time (at pp 8 on
// 64 GPUs, 1.49 ×), so the search could set aside a candidate that belonged in its top K.
TEST(DryRun, TheFirstParameterGatherRunsDuringThePipelineFill) {
  std::vector<Scenario> picked;
  for (bool overlap_param_gather : {true, false}) {
    Scenario s = with_layout(small_model(), 32, 1, 4, "tp-cp-ep-pp-dp");
    s.model.num_layers = 16;
    s.model.hidden_size = 4096;
    s.model.num_attention_heads = 32;
    s.training.fp16 = false;
    s.training.bf16 = true;
    s.training.global_batch_size = 32;
    s.cluster.topology = "dgx-h100";
    s.parallelism.use_distributed_optimizer = true;
    s.parallelism.overlap_grad_reduce = true;
    s.parallelism.overlap_param_gather = overlap_param_gather;
    picked.push_back(s);
  }
  expect_bounds_hold(h100_bounds(picked), picked, 0.7);
}

TEST(PlacementKey, OrdersThatOnlyRenumberNodesShareAKey) {
  const Scenario m = small_model();
  const std::string a = "tp-cp-ep-dp-pp", b = "tp-cp-ep-pp-dp";
  // tp 8 fills each 8-GPU node; dp and pp only say which node is which.
  EXPECT_EQ(placement_key(with_layout(m, 32, 8, 2, a), 8), "tp | nodes by dp pp");
  EXPECT_EQ(placement_key(with_layout(m, 32, 8, 2, b), 8), "tp | nodes by dp pp");
  // tp 4: the second dimension shares each node with tp (dp pairs or pp pairs on a node).
  EXPECT_EQ(placement_key(with_layout(m, 32, 4, 2, a), 8), "tp-dp | nodes by pp");
  EXPECT_EQ(placement_key(with_layout(m, 32, 4, 2, b), 8), "tp-pp | nodes by dp");
  // All on one node: nothing renumbers, the whole order counts (size-1 dimensions left out).
  EXPECT_EQ(placement_key(with_layout(m, 8, 2, 2, a), 8), "tp-dp-pp");
  EXPECT_EQ(placement_key(with_layout(m, 8, 2, 2, b), 8), "tp-pp-dp");
  // dp 1: the two orders are one placement.
  EXPECT_EQ(placement_key(with_layout(m, 16, 8, 2, a), 8), "tp | nodes by pp");
  EXPECT_EQ(placement_key(with_layout(m, 16, 8, 2, b), 8), "tp | nodes by pp");
  // tp 2 · dp 4 = 8 fills a node in the first order; tp 2 · pp 2 · dp 4 in the second.
  EXPECT_EQ(placement_key(with_layout(m, 16, 2, 2, a), 8), "tp-dp | nodes by pp");
  EXPECT_EQ(placement_key(with_layout(m, 16, 2, 2, b), 8), "tp-pp-dp");
  // Expert parallelism: the whole order.
  Scenario moe = with_layout(m, 32, 8, 2, a);
  moe.parallelism.expert_model_parallel_size = 2;
  EXPECT_EQ(placement_key(moe, 8), a);
}

// What lets the search simulate one of two twins: their simulations agree exactly.
TEST(PlacementKey, TwinsSimulateToTheSameTime) {
  Scenario m = small_model();
  m.training.global_batch_size = 64;
  m.parallelism.overlap_grad_reduce = true;
  for (const auto& [world, tp, pp] : {std::tuple{32, 8, 2}, std::tuple{64, 8, 4}}) {
    std::vector<double> times;
    for (const std::string order : {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}) {
      const Scenario s = with_layout(m, world, tp, pp, order);
      validate(s);
      const auto sim = in_child([&] {
        const Topology t = load_topology("dgx-a100-80g");
        SimulateOptions o;
        o.mode = SimMode::symmetric;
        o.pricer = pricer_for(t);
        auto j = to_json(simulate(s, t, o));
        j.erase("ranks");
        return j;
      });
      ASSERT_FALSE(sim.contains("error")) << sim.dump();
      times.push_back(sim["iteration_seconds"].get<double>());
    }
    EXPECT_EQ(placement_key(with_layout(m, world, tp, pp, "tp-cp-ep-dp-pp"), 8),
              placement_key(with_layout(m, world, tp, pp, "tp-cp-ep-pp-dp"), 8));
    EXPECT_DOUBLE_EQ(times[0], times[1]) << "world " << world << ", tp " << tp << ", pp " << pp;
  }
}

// Two rank orders whose dimensions of size > 1 come in the same sequence give every rank
// the same coordinates (tp-cp-ep-dp-pp and tp-cp-ep-pp-dp at pp 1, or at dp 1): one
// candidate, the other counted as a duplicate order.
TEST(SearchSpace, OrdersThatPlaceEveryRankAlikeAreOneCandidate) {
  Scenario s = small_model();
  SearchSpace space = fixed_space(s);
  fix(space, "tp=2");
  fix(space, "pp=1");
  vary(space, "order=tp-cp-ep-dp-pp,tp-cp-ep-pp-dp");
  s.training.global_batch_size = 64;
  const Enumeration e = enumerate(s, 16, space);
  const std::vector<std::string> labels = searched_labels(e);
  EXPECT_EQ(labels, std::vector<std::string>{"tp2 pp1 mbs1 none tp-cp-ep-dp-pp"});
  EXPECT_EQ(e.pruned.at("duplicate: order places the ranks as an order already tried (the "
                        "same sequence of dimensions of size > 1)"),
            1);
  // Where dp and pp both exceed 1 the orders differ, and both are candidates.
  EXPECT_NE(placement_key(with_layout(s, 16, 2, 2, "tp-cp-ep-dp-pp"), 0),
            placement_key(with_layout(s, 16, 2, 2, "tp-cp-ep-pp-dp"), 0));
}

}  // namespace
}  // namespace tandem::sim::search
