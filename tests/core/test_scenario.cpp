// Tests of scenario input: the field registry, JSON parsing and its errors, flag overrides,
// the derived sizes, and one test per validation rule that feeds a bad scenario and checks
// that the ConfigError names the field and the value. Fixture paths come from
// TANDEM_SOURCE_DIR; temporary files go under ::testing::TempDir().
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace tandem {
namespace {

using nlohmann::json;

const std::filesystem::path kScenarios = std::filesystem::path(TANDEM_SOURCE_DIR) / "scenarios";

// The violations `f` throws as a ConfigError; empty when it does not throw.
std::vector<Violation> violations_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.violations();
  }
  return {};
}

std::string listed(const std::vector<Violation>& vs) {
  std::string out;
  for (const auto& v : vs) out += "\n  " + format_violation(v);
  return vs.empty() ? " (none)" : out;
}

// Some violation names `field`, its value contains `value`, and its rule contains `rule`.
::testing::AssertionResult Names(const std::vector<Violation>& vs, const std::string& field,
                                 const std::string& value, const std::string& rule = "") {
  for (const auto& v : vs)
    if (v.field == field && v.value.find(value) != std::string::npos &&
        v.rule.find(rule) != std::string::npos)
      return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no violation of " << field << " = " << value << " with rule containing \"" << rule
         << "\"; got:" << listed(vs);
}

std::vector<Violation> invalid(const Scenario& s) {
  return violations_of([&] { validate(s); });
}

std::vector<Violation> unparsable(const std::string& text) {
  return violations_of([&] { parse_scenario(json::parse(text)); });
}

std::vector<Violation> rejected(Scenario s, std::vector<std::pair<std::string, std::string>> kv) {
  return violations_of([&] { apply_overrides(s, kv); });
}

// The default scenario with interleaving: 24 layers on pp 2 as 2 chunks of 6 layers.
Scenario interleaved() {
  Scenario s = default_scenario();
  s.parallelism.num_layers_per_virtual_pipeline_stage = 6;
  return s;
}

// A file under a directory of this process's own, so runs by other users or in parallel
// never meet each other's leftovers.
std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("tandem-scenario-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// --- defaults, derived sizes ----------------------------------------------------------

TEST(Scenario, DefaultsValidate) {
  EXPECT_NO_THROW(validate(default_scenario()));
  EXPECT_NO_THROW(validate(Scenario{}));
  const Scenario s = default_scenario();
  EXPECT_EQ(s.name, "default");
  EXPECT_EQ(s.model.num_layers, 24);
  EXPECT_EQ(s.model.hidden_size, 1024);
  EXPECT_EQ(s.model.vocab_size, 50257);
  EXPECT_EQ(s.cluster.world_size, 8);
  EXPECT_EQ(s.training.global_batch_size, 16);
}

TEST(Scenario, DataParallelSizeIsWorldOverModelParallel) {
  Scenario s = default_scenario();
  EXPECT_EQ(data_parallel_size(s), 2);  // 8 / (2 · 2 · 1)
  s.cluster.world_size = 64;
  s.parallelism.context_parallel_size = 2;
  EXPECT_EQ(data_parallel_size(s), 8);  // 64 / (2 · 2 · 2)
  const ParallelSizes sizes = parallel_sizes(s);
  EXPECT_EQ(sizes.tp, 2);
  EXPECT_EQ(sizes.pp, 2);
  EXPECT_EQ(sizes.cp, 2);
  EXPECT_EQ(sizes.dp, 8);
  EXPECT_EQ(sizes.vpp, 1);
  EXPECT_EQ(sizes.world(), 64);
}

TEST(Scenario, PaddedVocabMatchesMegatron) {
  Scenario s = default_scenario();
  s.parallelism.tensor_model_parallel_size = 1;
  EXPECT_EQ(padded_vocab_size(s), 50304);  // next multiple of 128
  s.parallelism.tensor_model_parallel_size = 8;
  EXPECT_EQ(padded_vocab_size(s), 51200);  // next multiple of 1024
  s.model.vocab_size = 51200;
  EXPECT_EQ(padded_vocab_size(s), 51200);  // already a multiple
  s.model.make_vocab_size_divisible_by = 1;
  s.model.vocab_size = 50257;
  s.parallelism.tensor_model_parallel_size = 1;
  EXPECT_EQ(padded_vocab_size(s), 50257);
}

TEST(Scenario, FfnHiddenDefaultsToFourHidden) {
  Scenario s = default_scenario();
  EXPECT_EQ(ffn_hidden_size(s), 4096);
  s.model.ffn_hidden_size = 2816;
  EXPECT_EQ(ffn_hidden_size(s), 2816);
}

TEST(Scenario, VirtualPipelineSizeFromEitherField) {
  Scenario s = default_scenario();
  EXPECT_EQ(virtual_pipeline_size(s), 1);
  s.parallelism.num_layers_per_virtual_pipeline_stage = 4;  // 12 layers per stage / 4
  EXPECT_EQ(virtual_pipeline_size(s), 3);
  s.parallelism.num_layers_per_virtual_pipeline_stage.reset();
  s.parallelism.virtual_pipeline_model_parallel_size = 2;
  EXPECT_EQ(virtual_pipeline_size(s), 2);
}

TEST(Scenario, EffectiveSchedule) {
  Scenario s = default_scenario();
  EXPECT_EQ(effective_pipeline_schedule(s), "1f1b");
  s.parallelism.pipeline_model_parallel_size = 1;
  s.cluster.world_size = 4;
  EXPECT_EQ(effective_pipeline_schedule(s), "none");
  EXPECT_EQ(effective_pipeline_schedule(interleaved()), "interleaved");
  Scenario forced = default_scenario();
  forced.parallelism.pipeline_schedule = "gpipe";
  EXPECT_EQ(effective_pipeline_schedule(forced), "gpipe");
}

TEST(Scenario, ZbH1AndDelayWgradComputeRules) {
  Scenario zb = default_scenario();  // pp 2, one chunk a stage
  zb.parallelism.pipeline_schedule = "zb-h1";
  EXPECT_NO_THROW(validate(zb));
  EXPECT_EQ(effective_pipeline_schedule(zb), "zb-h1");
  // auto never picks it.
  EXPECT_NE(effective_pipeline_schedule(default_scenario()), "zb-h1");
  Scenario one = zb;
  one.parallelism.pipeline_model_parallel_size = 1;
  one.cluster.world_size = 4;
  EXPECT_TRUE(Names(invalid(one), "pipeline_schedule", "zb-h1", "≥ 2"));
  Scenario chunks = interleaved();
  chunks.parallelism.pipeline_schedule = "zb-h1";
  EXPECT_TRUE(Names(invalid(chunks), "pipeline_schedule", "zb-h1", "one model chunk per stage"));
  Scenario both = zb;
  both.parallelism.delay_wgrad_compute = true;
  EXPECT_TRUE(Names(invalid(both), "delay_wgrad_compute", "true", "zb-h1"));
  Scenario delay = interleaved();
  delay.parallelism.delay_wgrad_compute = true;
  EXPECT_NO_THROW(validate(delay));
  // Megatron's flag sets the field; an unknown schedule is refused with the choices.
  EXPECT_TRUE(rejected(default_scenario(), {{"--pipeline-schedule", "zb-h2"}}).size() == 1);
}

// Megatron-Core's rules for --overlap-moe-expert-parallel-comm (pp > 1 only interleaved),
// and tandem's (no split backward): each refusal names the field and the rule.
TEST(Scenario, CombinedOneFOneBRules) {
  Scenario moe = default_scenario();
  moe.parallelism.pipeline_model_parallel_size = 1;
  moe.parallelism.tensor_model_parallel_size = 1;
  moe.parallelism.expert_model_parallel_size = 4;
  moe.cluster.world_size = 8;
  moe.model.num_experts = 8;
  moe.model.moe_token_dispatcher_type = "alltoall";
  moe.parallelism.overlap_moe_expert_parallel_comm = true;
  EXPECT_NO_THROW(validate(moe));
  const char* f = "overlap_moe_expert_parallel_comm";
  Scenario dense = default_scenario();
  dense.parallelism.overlap_moe_expert_parallel_comm = true;
  EXPECT_TRUE(Names(invalid(dense), f, "true", "expert parallelism"));
  Scenario one_rank_of_experts = moe;
  one_rank_of_experts.parallelism.expert_model_parallel_size = 1;
  EXPECT_TRUE(Names(invalid(one_rank_of_experts), f, "true", "expert_model_parallel_size > 1"));
  Scenario allgather = moe;
  allgather.model.moe_token_dispatcher_type = "allgather";
  EXPECT_TRUE(Names(invalid(allgather), f, "true", "alltoall"));
  Scenario full = moe;
  full.training.recompute_granularity = "full";
  EXPECT_TRUE(Names(invalid(full), f, "true", "recompute_granularity full"));
  Scenario piped = moe;
  piped.parallelism.pipeline_model_parallel_size = 2;
  piped.parallelism.expert_model_parallel_size = 2;
  EXPECT_TRUE(Names(invalid(piped), f, "true", "needs the interleaved schedule"));
  Scenario interleaved_moe = piped;  // 24 layers: 2 stages of 6 chunks of 2
  interleaved_moe.parallelism.num_layers_per_virtual_pipeline_stage = 2;
  EXPECT_NO_THROW(validate(interleaved_moe));
  Scenario split = moe;
  split.parallelism.delay_wgrad_compute = true;
  EXPECT_TRUE(Names(invalid(split), f, "true", "delay_wgrad_compute"));
  Scenario mtp = moe;
  mtp.model.mtp_num_layers = 2;
  EXPECT_TRUE(Names(invalid(mtp), f, "true", "mtp_num_layers = 2"));
}

TEST(Scenario, ClosestMatch) {
  const std::vector<std::string> known = {"tensor_model_parallel_size",
                                          "pipeline_model_parallel_size", "seq_length", "lr"};
  EXPECT_EQ(closest_match("tensor_model_paralel_size", known), "tensor_model_parallel_size");
  EXPECT_EQ(closest_match("--pipeline-model-parallel-szie", known), "pipeline_model_parallel_size");
  EXPECT_EQ(closest_match("seq_len", known), "seq_length");  // a prefix, 3 edits away
  EXPECT_EQ(closest_match("seq", known), "seq_length");
  EXPECT_EQ(closest_match("lx", known), "lr");
  EXPECT_EQ(closest_match("banana", known), "");
  EXPECT_EQ(closest_match("anything", {}), "");
}

TEST(Scenario, RegistryIsConsistent) {
  for (const auto& f : scenario_fields()) {
    EXPECT_TRUE(f.section == "model" || f.section == "parallelism" || f.section == "training" ||
                f.section == "cluster")
        << f.name;
    EXPECT_TRUE(f.flag.starts_with("--")) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.type.empty()) << f.name;
  }
  // Every field of to_json is in the registry and vice versa.
  const json j = to_json(default_scenario());
  std::size_t emitted = 0;
  for (const auto& section : {"model", "parallelism", "training", "cluster"})
    emitted += j[section].size();
  // Unset optionals are left out: ffn_hidden_size, kv_channels, max_position_embeddings,
  // num_experts, moe_ffn_hidden_size, moe_shared_expert_intermediate_size,
  // moe_expert_capacity_factor, moe_router_num_groups, moe_router_group_topk,
  // moe_router_topk_scaling_factor, expert_tensor_parallel_size, the two interleaving fields,
  // the microbatch group size, lr_decay_iters, ddp_bucket_size and ddp_num_buckets, the
  // first and last pipeline stages' layer counts, the pipeline layout string, MLA's
  // q_lora_rank and rope_type, mtp_num_layers and mtp_loss_scaling_factor, and loss_scale.
  EXPECT_EQ(emitted + 25, scenario_fields().size());
}

// --- JSON -----------------------------------------------------------------------------

TEST(ScenarioJson, RoundTripsDefault) {
  const Scenario s = default_scenario();
  EXPECT_EQ(parse_scenario(to_json(s)), s);
  EXPECT_EQ(parse_scenario(json::parse(to_json(s).dump())), s);
}

TEST(ScenarioJson, RoundTripsEveryKindOfField) {
  Scenario s = default_scenario();
  s.name = "rich";
  s.description = "all kinds";
  s.source = "a test";
  s.model.ffn_hidden_size = 2816;
  s.model.kv_channels = 80;
  s.parallelism.virtual_pipeline_model_parallel_size = 3;
  s.parallelism.pipeline_schedule = "interleaved";
  s.parallelism.sequence_parallel = true;
  s.training.rampup_batch_size = {4, 4, 1000};
  s.training.lr = 3.0e-4 / 7.0;  // not a short decimal
  s.training.lr_decay_iters = 123;
  s.training.lr_decay_style = "linear";
  s.cluster.topology = "dgx-h100";
  const Scenario back = parse_scenario(json::parse(to_json(s).dump()));
  EXPECT_EQ(back, s);
  EXPECT_EQ(back.training.lr, s.training.lr);
}

TEST(ScenarioJson, AbsentFieldsKeepDefaults) {
  const Scenario s = parse_scenario(json::parse(R"({"model": {"num_layers": 12}})"));
  Scenario expected;
  expected.model.num_layers = 12;
  EXPECT_EQ(s, expected);
}

TEST(ScenarioJson, IntegralFloatsAndNullsAreAccepted) {
  const Scenario s = parse_scenario(json::parse(
      R"({"parallelism": {"ddp_bucket_size": 4e7}, "model": {"ffn_hidden_size": null}})"));
  EXPECT_EQ(s.parallelism.ddp_bucket_size, 40000000);
  EXPECT_FALSE(s.model.ffn_hidden_size);
}

TEST(ScenarioJson, MegatronAliasesAreAccepted) {
  const Scenario s = parse_scenario(json::parse(
      R"({"parallelism": {"num_virtual_stages_per_pipeline_rank": 2,
                          "microbatch_group_size_per_virtual_pipeline_stage": 4}})"));
  EXPECT_EQ(s.parallelism.virtual_pipeline_model_parallel_size, 2);
  EXPECT_EQ(s.parallelism.microbatch_group_size_per_vp_stage, 4);
  EXPECT_TRUE(Names(unparsable(R"({"parallelism": {"num_virtual_stages_per_pipeline_rank": 2,
                                   "virtual_pipeline_model_parallel_size": 2}})"),
                    "parallelism.virtual_pipeline_model_parallel_size", "2", "given twice"));
}

TEST(ScenarioJson, UnknownKeySuggestsClosest) {
  const auto vs = unparsable(R"({"parallelism": {"tensor_model_paralel_size": 8}})");
  ASSERT_EQ(vs.size(), 1u) << listed(vs);
  EXPECT_TRUE(Names(vs, "parallelism.tensor_model_paralel_size", "8",
                    "did you mean \"tensor_model_parallel_size\""));
  // The closest key may live in another section; the hint says which.
  EXPECT_TRUE(Names(unparsable(R"({"model": {"micro_batch_sise": 2}})"), "model.micro_batch_sise",
                    "2", "\"micro_batch_size\" (in section \"training\")"));
  EXPECT_TRUE(
      Names(unparsable(R"({"model": {"zzzzzzzz": 1}})"), "model.zzzzzzzz", "1", "unknown key"));
}

TEST(ScenarioJson, KeyInWrongSectionNamesItsSection) {
  EXPECT_TRUE(Names(unparsable(R"({"model": {"tensor_model_parallel_size": 8}})"),
                    "model.tensor_model_parallel_size", "8", "section \"parallelism\""));
  EXPECT_TRUE(Names(unparsable(R"({"num_layers": 24})"), "num_layers", "24", "\"model\""));
  EXPECT_TRUE(Names(unparsable(R"({"modle": {}})"), "modle", "{}", "did you mean \"model\""));
}

TEST(ScenarioJson, WrongTypesNameFieldAndValue) {
  const auto vs = unparsable(R"({
      "name": 3,
      "model": {"num_layers": "24", "hidden_size": 2.5, "seq_length": true},
      "parallelism": {"sequence_parallel": "yes", "order": 5},
      "training": {"lr": "0.1", "rampup_batch_size": 16},
      "cluster": []})");
  EXPECT_EQ(vs.size(), 9u) << listed(vs);
  EXPECT_TRUE(Names(vs, "name", "3", "string"));
  // The value as written: quoted, so the message shows it is a string.
  EXPECT_TRUE(Names(vs, "model.num_layers", "\"24\"", "must be an integer, not a JSON string"));
  EXPECT_TRUE(Names(vs, "model.hidden_size", "2.5", "must be an integer"));
  EXPECT_TRUE(Names(vs, "model.seq_length", "true", "integer"));
  EXPECT_TRUE(Names(vs, "parallelism.sequence_parallel", "yes", "true or false"));
  EXPECT_TRUE(Names(vs, "parallelism.order", "5", "string"));
  EXPECT_TRUE(Names(vs, "training.lr", "0.1", "number"));
  EXPECT_TRUE(Names(vs, "training.rampup_batch_size", "16", "list of integers"));
  EXPECT_TRUE(Names(vs, "cluster", "[]", "JSON object"));
  EXPECT_TRUE(Names(unparsable("[1, 2]"), "scenario", "[1,2]", "JSON object"));
  EXPECT_TRUE(Names(unparsable(R"({"model": {"vocab_size": 3000000000}})"), "model.vocab_size",
                    "3000000000", "32-bit"));
}

TEST(ScenarioJson, OutOfRangeValuesNameFieldAndRule) {
  const auto vs = unparsable(R"({
      "model": {"num_layers": 0},
      "parallelism": {"tensor_model_parallel_size": -2, "pipeline_schedule": "zb-v"},
      "training": {"lr": -1, "adam_beta1": 1.0, "adam_beta2": -0.1, "adam_eps": 0,
                   "lr_decay_style": "exponential", "recompute_granularity": "some",
                   "rampup_batch_size": [16, 16]},
      "cluster": {"world_size": 0}})");
  EXPECT_EQ(vs.size(), 11u) << listed(vs);
  EXPECT_TRUE(Names(vs, "model.num_layers", "0", "≥ 1"));
  EXPECT_TRUE(Names(vs, "parallelism.tensor_model_parallel_size", "-2", "≥ 1"));
  EXPECT_TRUE(Names(vs, "parallelism.pipeline_schedule", "zb-v", "one of auto | none"));
  EXPECT_TRUE(Names(vs, "training.lr", "-1", "≥ 0"));
  EXPECT_TRUE(Names(vs, "training.adam_beta1", "1.0", "[0, 1)"));
  EXPECT_TRUE(Names(vs, "training.adam_beta2", "-0.1", "[0, 1)"));
  EXPECT_TRUE(Names(vs, "training.adam_eps", "0", "> 0"));
  EXPECT_TRUE(Names(vs, "training.lr_decay_style", "exponential", "constant | linear | cosine"));
  EXPECT_TRUE(Names(vs, "training.recompute_granularity", "some", "none | selective | full"));
  EXPECT_TRUE(Names(vs, "training.rampup_batch_size", "[16,16]", "exactly 3"));
  EXPECT_TRUE(Names(vs, "cluster.world_size", "0", "≥ 1"));
  EXPECT_TRUE(Names(unparsable(R"({"training": {"rampup_batch_size": [16, 0, 100]}})"),
                    "training.rampup_batch_size", "[16,0,100]", "increment"));
  EXPECT_TRUE(Names(unparsable(R"({"training": {"rampup_batch_size": [16, 16, 0]}})"),
                    "training.rampup_batch_size", "[16,16,0]", "samples"));
}

TEST(ScenarioJson, ErrorMessageNamesTheSource) {
  try {
    parse_scenario(json::parse(R"({"model": {"num_layers": "24"}})"), "my.json");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.source(), "my.json");
    EXPECT_NE(std::string(e.what()).find("my.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.num_layers = \"24\""), std::string::npos)
        << e.what();
  }
}

// --- files ----------------------------------------------------------------------------

TEST(ScenarioFile, DefaultFileEqualsDefaultScenario) {
  const Scenario s = load_scenario(kScenarios / "default.json");
  EXPECT_EQ(s, default_scenario());
}

TEST(ScenarioFile, Gpt3175bValidatesWithPublishedLayout) {
  const Scenario s = load_scenario(kScenarios / "gpt3-175b-1536gpu.json");
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(s.model.num_layers, 96);
  EXPECT_EQ(s.model.hidden_size, 12288);
  EXPECT_EQ(s.model.num_attention_heads, 96);
  EXPECT_EQ(s.cluster.world_size, 1536);
  const ParallelSizes sizes = parallel_sizes(s);
  EXPECT_EQ(sizes.tp, 8);
  EXPECT_EQ(sizes.pp, 16);
  EXPECT_EQ(sizes.dp, 12);
  EXPECT_GT(sizes.vpp, 1);
  EXPECT_EQ(effective_pipeline_schedule(s), "interleaved");
  EXPECT_EQ(padded_vocab_size(s), 51200);
  EXPECT_FALSE(s.source.empty());
}

TEST(ScenarioFile, MissingFileNamesPath) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "no-such-scenario.json";
  const auto vs = violations_of([&] { load_scenario(path); });
  EXPECT_TRUE(Names(vs, path.string(), "", "no such file"));
}

TEST(ScenarioFile, DirectoryIsRejected) {
  const auto vs = violations_of([&] { load_scenario(::testing::TempDir()); });
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_NE(vs[0].rule.find("directory"), std::string::npos) << vs[0].rule;
}

TEST(ScenarioFile, SyntaxErrorGivesLineAndColumn) {
  const auto path =
      write_temp("broken.json", "{\n  \"model\": {\n    \"num_layers\": 24,\n  }\n}\n");
  const auto vs = violations_of([&] { load_scenario(path); });
  ASSERT_EQ(vs.size(), 1u) << listed(vs);
  EXPECT_EQ(vs[0].field, path.string());
  EXPECT_EQ(vs[0].value, "line 4, column 3");
  EXPECT_NE(vs[0].rule.find("not valid JSON"), std::string::npos) << vs[0].rule;
}

TEST(ScenarioFile, FieldErrorsNameThePath) {
  const auto path = write_temp("typo.json", R"({"model": {"num_layer": 24}})");
  try {
    load_scenario(path);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.source(), path.string());
    EXPECT_TRUE(Names(e.violations(), "model.num_layer", "24", "did you mean \"num_layers\""));
  }
}

// --- overrides ------------------------------------------------------------------------

TEST(ScenarioOverrides, BothSpellingsAndEveryType) {
  Scenario s = default_scenario();
  apply_overrides(s, {{"tensor_model_parallel_size", "4"},
                      {"--pipeline-model-parallel-size", "1"},
                      {"--sequence-parallel", "true"},
                      {"use_distributed_optimizer", "1"},
                      {"--bf16", "TRUE"},
                      {"--overlap-grad-reduce", "0"},
                      {"--lr", "0.5"},
                      {"--min-lr", "1e-6"},
                      {"--lr-decay-style", "linear"},
                      {"--rampup-batch-size", "16,16,1000"},
                      {"--ffn-hidden-size", "2816"},
                      {"--topology", "dgx-h100"},
                      {"name", "renamed"}});
  EXPECT_EQ(s.parallelism.tensor_model_parallel_size, 4);
  EXPECT_EQ(s.parallelism.pipeline_model_parallel_size, 1);
  EXPECT_TRUE(s.parallelism.sequence_parallel);
  EXPECT_TRUE(s.parallelism.use_distributed_optimizer);
  EXPECT_TRUE(s.training.bf16);
  EXPECT_FALSE(s.parallelism.overlap_grad_reduce);
  EXPECT_DOUBLE_EQ(s.training.lr, 0.5);
  EXPECT_DOUBLE_EQ(s.training.min_lr, 1e-6);
  EXPECT_EQ(s.training.lr_decay_style, "linear");
  EXPECT_EQ(s.training.rampup_batch_size, (std::vector<std::int64_t>{16, 16, 1000}));
  EXPECT_EQ(s.model.ffn_hidden_size, 2816);
  EXPECT_EQ(s.cluster.topology, "dgx-h100");
  EXPECT_EQ(s.name, "renamed");
  apply_overrides(s, {{"--rampup-batch-size", "32 32 2000"}, {"--ffn-hidden-size", "none"}});
  EXPECT_EQ(s.training.rampup_batch_size, (std::vector<std::int64_t>{32, 32, 2000}));
  EXPECT_FALSE(s.model.ffn_hidden_size);
}

TEST(ScenarioOverrides, MegatronFlagsAndSectionQualifiedNames) {
  Scenario s = default_scenario();
  apply_overrides(s, {{"--num-virtual-stages-per-pipeline-rank", "2"},
                      {"--microbatch-group-size-per-virtual-pipeline-stage", "4"},
                      {"training.global_batch_size", "32"}});
  EXPECT_EQ(s.parallelism.virtual_pipeline_model_parallel_size, 2);
  EXPECT_EQ(s.parallelism.microbatch_group_size_per_vp_stage, 4);
  EXPECT_EQ(s.training.global_batch_size, 32);
  EXPECT_TRUE(Names(rejected(s, {{"model.global_batch_size", "32"}}), "model.global_batch_size",
                    "32", "section \"training\""));
}

TEST(ScenarioOverrides, UnknownFlagSuggestsClosestInTheSameSpelling) {
  const Scenario s = default_scenario();
  EXPECT_TRUE(Names(rejected(s, {{"--tensor-model-paralel-size", "8"}}),
                    "--tensor-model-paralel-size", "8",
                    "did you mean \"--tensor-model-parallel-size\""));
  EXPECT_TRUE(Names(rejected(s, {{"micro_batch_sise", "2"}}), "micro_batch_sise", "2",
                    "did you mean \"micro_batch_size\""));
  EXPECT_TRUE(Names(rejected(s, {{"--frobnicate", "2"}}), "--frobnicate", "2", "unknown"));
}

TEST(ScenarioOverrides, BadValueNamesTheFlag) {
  const Scenario s = default_scenario();
  EXPECT_TRUE(
      Names(rejected(s, {{"--num-layers", "twelve"}}), "--num-layers", "twelve", "integer"));
  EXPECT_TRUE(Names(rejected(s, {{"--num-layers", "2.5"}}), "--num-layers", "2.5", "integer"));
  EXPECT_TRUE(Names(rejected(s, {{"--sequence-parallel", "maybe"}}), "--sequence-parallel", "maybe",
                    "true, false, 1 or 0"));
  EXPECT_TRUE(Names(rejected(s, {{"--lr", "fast"}}), "--lr", "fast", "number"));
  EXPECT_TRUE(Names(rejected(s, {{"--lr", "nan"}}), "--lr", "nan", "number"));
  EXPECT_TRUE(Names(rejected(s, {{"--rampup-batch-size", "16,x,1000"}}), "--rampup-batch-size",
                    "16,x,1000", "list of integers"));
  EXPECT_TRUE(Names(rejected(s, {{"--rampup-batch-size", "16 16"}}), "--rampup-batch-size", "16 16",
                    "exactly 3"));
  EXPECT_TRUE(Names(rejected(s, {{"--adam-beta2", "1"}}), "--adam-beta2", "1", "[0, 1)"));
  EXPECT_TRUE(Names(rejected(s, {{"--lr-decay-style", "cosin"}}), "--lr-decay-style", "cosin",
                    "one of constant | linear | cosine"));
}

TEST(ScenarioOverrides, AllOrNothingAndEveryErrorReported) {
  Scenario s = default_scenario();
  const auto vs = rejected(s, {{"--num-layers", "12"}, {"--hidden-size", "x"}, {"--nope", "1"}});
  EXPECT_EQ(vs.size(), 2u) << listed(vs);
  EXPECT_THROW(apply_overrides(s, {{"--num-layers", "12"}, {"--hidden-size", "x"}}), ConfigError);
  EXPECT_EQ(s, default_scenario());
}

// --- validation: one test per rule --------------------------------------------------------

TEST(ScenarioValidate, FieldRangesOfAScenarioBuiltInCode) {
  Scenario s = default_scenario();
  s.parallelism.tensor_model_parallel_size = 0;
  s.training.adam_beta1 = 1.0;
  s.training.lr = -0.1;
  s.training.recompute_granularity = "partial";
  const auto vs = invalid(s);
  EXPECT_TRUE(Names(vs, "tensor_model_parallel_size", "0", "≥ 1"));
  EXPECT_TRUE(Names(vs, "adam_beta1", "1.0", "[0, 1)"));
  EXPECT_TRUE(Names(vs, "lr", "-0.1", "≥ 0"));
  EXPECT_TRUE(Names(vs, "recompute_granularity", "partial", "none | selective | full"));
}

TEST(ScenarioValidate, WorldDivisibleByModelParallelSizes) {
  Scenario s = default_scenario();
  s.cluster.world_size = 10;
  EXPECT_TRUE(Names(invalid(s), "world_size", "10",
                    "tensor_model_parallel_size × pipeline_model_parallel_size × "
                    "context_parallel_size = 2 × 2 × 1 = 4"));
}

TEST(ScenarioValidate, ExpertParallelDividesDataParallel) {
  Scenario s = default_scenario();
  s.model.num_experts = 6;                 // divisible by both expert parallel sizes below
  s.parallelism.sequence_parallel = true;  // MoE with tp 2
  s.parallelism.expert_model_parallel_size = 3;
  EXPECT_TRUE(Names(invalid(s), "expert_model_parallel_size", "3", "8 / 4 = 2"));
  s.parallelism.expert_model_parallel_size = 2;
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, HeadsDivisibleByTensorParallel) {
  Scenario s = default_scenario();
  s.model.num_attention_heads = 6;
  s.model.hidden_size = 1536;
  s.parallelism.tensor_model_parallel_size = 4;
  s.parallelism.pipeline_model_parallel_size = 1;
  s.cluster.world_size = 4;
  s.training.global_batch_size = 1;
  EXPECT_TRUE(Names(invalid(s), "num_attention_heads", "6", "tensor_model_parallel_size = 4"));
}

TEST(ScenarioValidate, FfnHiddenDivisibleByTensorParallel) {
  Scenario s = default_scenario();
  s.model.ffn_hidden_size = 4097;
  EXPECT_TRUE(Names(invalid(s), "ffn_hidden_size", "4097", "tensor_model_parallel_size = 2"));
}

TEST(ScenarioValidate, HiddenDivisibleByHeadsUnlessKvChannels) {
  Scenario s = default_scenario();
  s.model.hidden_size = 1000;
  EXPECT_TRUE(Names(invalid(s), "hidden_size", "1000", "num_attention_heads = 16"));
  s.model.kv_channels = 64;
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, LayersDivisibleByPipeline) {
  Scenario s = default_scenario();
  s.model.num_layers = 25;
  EXPECT_TRUE(Names(invalid(s), "num_layers", "25", "pipeline_model_parallel_size = 2"));
}

TEST(ScenarioValidate, InterleavingGivenOnce) {
  Scenario s = interleaved();
  EXPECT_NO_THROW(validate(s));
  s.parallelism.virtual_pipeline_model_parallel_size = 2;
  EXPECT_TRUE(Names(invalid(s), "num_layers_per_virtual_pipeline_stage", "6", "not both"));
}

TEST(ScenarioValidate, LayersPerStageDivisibleByLayersPerVirtualStage) {
  Scenario s = default_scenario();
  s.parallelism.num_layers_per_virtual_pipeline_stage = 5;
  EXPECT_TRUE(Names(invalid(s), "num_layers_per_virtual_pipeline_stage", "5", "24 / 2 = 12"));
}

TEST(ScenarioValidate, InterleavingNeedsPipeline) {
  Scenario s = default_scenario();
  s.parallelism.pipeline_model_parallel_size = 1;
  s.cluster.world_size = 4;
  s.parallelism.virtual_pipeline_model_parallel_size = 2;
  EXPECT_TRUE(Names(invalid(s), "virtual_pipeline_model_parallel_size", "2",
                    "pipeline_model_parallel_size > 1"));
}

TEST(ScenarioValidate, LayersDivisibleByPipelineTimesVirtual) {
  Scenario s = default_scenario();
  s.parallelism.virtual_pipeline_model_parallel_size = 5;
  EXPECT_TRUE(Names(invalid(s), "num_layers", "24", "2 × 5 = 10"));
}

TEST(ScenarioValidate, GlobalBatchDivisibleByMicroTimesDp) {
  Scenario s = default_scenario();
  s.cluster.world_size = 32;  // dp 8
  s.training.micro_batch_size = 4;
  s.training.global_batch_size = 100;
  const auto vs = invalid(s);
  ASSERT_EQ(vs.size(), 1u) << listed(vs);
  EXPECT_EQ(format_violation(vs[0]),
            "global_batch_size = 100: must be divisible by micro_batch_size × data-parallel size "
            "= 4 × 8 = 32");
}

TEST(ScenarioValidate, MicrobatchGroupWithinPipelineAndMicrobatches) {
  Scenario s = interleaved();  // pp 2, m = 16 / (1 · 2) = 8
  s.parallelism.microbatch_group_size_per_vp_stage = 1;
  EXPECT_TRUE(Names(invalid(s), "microbatch_group_size_per_vp_stage", "1", "2 ≤ 1 ≤ 8"));
  s.parallelism.microbatch_group_size_per_vp_stage = 9;
  EXPECT_TRUE(Names(invalid(s), "microbatch_group_size_per_vp_stage", "9", "2 ≤ 9 ≤ 8"));
  s.parallelism.microbatch_group_size_per_vp_stage = 3;  // 8 mod 3 = 2 ≥ pp
  EXPECT_NO_THROW(validate(s));
  s.parallelism.microbatch_group_size_per_vp_stage.reset();
  s.training.global_batch_size = 2;  // m = 1 < pp
  EXPECT_TRUE(Names(invalid(s), "global_batch_size", "2", "2 ≤ 2 ≤ 1"));
}

TEST(ScenarioValidate, MicrobatchGroupRemainderZeroOrAtLeastPipeline) {
  Scenario s = default_scenario();
  s.parallelism.tensor_model_parallel_size = 2;
  s.parallelism.pipeline_model_parallel_size = 4;  // dp 1
  s.parallelism.num_layers_per_virtual_pipeline_stage = 3;
  s.training.global_batch_size = 10;  // m = 10; default group 4 leaves 2
  EXPECT_TRUE(Names(invalid(s), "global_batch_size", "10", "10 mod 4 = 2"));
  s.parallelism.microbatch_group_size_per_vp_stage = 7;  // leaves 3 < 4
  EXPECT_TRUE(Names(invalid(s), "microbatch_group_size_per_vp_stage", "7", "10 mod 7 = 3"));
  s.parallelism.microbatch_group_size_per_vp_stage = 6;  // leaves 4
  EXPECT_NO_THROW(validate(s));
  s.parallelism.microbatch_group_size_per_vp_stage = 5;  // leaves 0
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, MicrobatchGroupCheckedThroughRampup) {
  Scenario s = interleaved();                  // pp 2, dp 2, micro 1: m = batch / 2
  s.training.rampup_batch_size = {2, 2, 100};  // batch 2 → m = 1 < pp
  EXPECT_TRUE(Names(invalid(s), "rampup_batch_size", "[2,2,100]", "ramp-up"));
  s.training.rampup_batch_size = {4, 2, 100};  // batch 6 → m = 3: a last group of 1 < pp
  EXPECT_TRUE(Names(invalid(s), "rampup_batch_size", "[4,2,100]", "3 mod 2 = 1"));
  s.training.rampup_batch_size = {4, 4, 100};  // m = 2, 4, 6, 8
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, RampupIncrementsEvenly) {
  Scenario s = default_scenario();  // global 16, micro · dp = 2
  s.training.rampup_batch_size = {2, 2, 1000};
  EXPECT_NO_THROW(validate(s));
  s.training.rampup_batch_size = {4, 8, 1000};  // 16 − 4 = 12 not a multiple of 8
  EXPECT_TRUE(Names(invalid(s), "rampup_batch_size", "[4,8,1000]", "16 − 4 = 12"));
  s.training.rampup_batch_size = {16, 2, 1000};
  EXPECT_TRUE(Names(invalid(s), "rampup_batch_size", "[16,2,1000]", "< global_batch_size"));
}

TEST(ScenarioValidate, RampupStartAndIncrementDivisibleByMicroTimesDp) {
  Scenario s = default_scenario();
  s.training.rampup_batch_size = {3, 1, 1000};
  const auto vs = invalid(s);
  EXPECT_TRUE(Names(vs, "rampup_batch_size", "[3,1,1000]", "start batch size 3"));
  EXPECT_TRUE(Names(vs, "rampup_batch_size", "[3,1,1000]", "increment 1"));
}

TEST(ScenarioValidate, SequenceDivisibleByTwiceContextParallel) {
  Scenario s = default_scenario();
  s.parallelism.context_parallel_size = 2;  // dp 1
  s.model.seq_length = 1026;
  s.model.max_position_embeddings = 2048;
  EXPECT_TRUE(Names(invalid(s), "seq_length", "1026", "2 × 2 = 4"));
  s.model.seq_length = 1028;
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, SequenceParallelNeedsSequenceDivisibleByTp) {
  Scenario s = default_scenario();
  s.parallelism.sequence_parallel = true;
  s.model.seq_length = 1023;
  s.model.max_position_embeddings = 1024;
  EXPECT_TRUE(Names(invalid(s), "seq_length", "1023", "tensor_model_parallel_size = 2"));
  s.parallelism.sequence_parallel = false;
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, SequenceParallelAtTp1IsAccepted) {
  // Megatron disables it with a warning at tp 1; nothing to shard, nothing to reject.
  Scenario s = default_scenario();
  s.parallelism.tensor_model_parallel_size = 1;
  s.cluster.world_size = 4;
  s.parallelism.sequence_parallel = true;
  s.model.seq_length = 1023;
  s.model.max_position_embeddings = 1024;
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, PositionEmbeddingsCoverSequence) {
  Scenario s = default_scenario();
  s.model.max_position_embeddings = 512;
  EXPECT_TRUE(Names(invalid(s), "max_position_embeddings", "512", "seq_length = 1024"));
}

TEST(ScenarioValidate, OverlapParamGatherNeedsDistributedOptimizerAndGradOverlap) {
  Scenario s = default_scenario();
  s.parallelism.overlap_param_gather = true;
  const auto vs = invalid(s);
  EXPECT_TRUE(Names(vs, "overlap_param_gather", "true", "use_distributed_optimizer"));
  EXPECT_TRUE(Names(vs, "overlap_param_gather", "true", "overlap_grad_reduce"));
  s.parallelism.use_distributed_optimizer = true;
  s.parallelism.overlap_grad_reduce = true;
  EXPECT_NO_THROW(validate(s));
}

// Megatron-DeepSpeed's BF16_Optimizer all-reduces where Megatron-Core reduce-scatters; the
// choice belongs to the sharded optimizer, and a name outside the two is refused on parsing.
TEST(ScenarioValidate, AllReducedGradientsNeedTheDistributedOptimizer) {
  Scenario s = default_scenario();
  s.parallelism.distributed_optimizer_grad_reduce = "all_reduce";
  EXPECT_TRUE(Names(invalid(s), "distributed_optimizer_grad_reduce", "all_reduce",
                    "requires use_distributed_optimizer"));
  s.parallelism.use_distributed_optimizer = true;
  EXPECT_NO_THROW(validate(s));
  EXPECT_TRUE(
      Names(unparsable(R"({"parallelism": {"distributed_optimizer_grad_reduce": "allreduce"}})"),
            "parallelism.distributed_optimizer_grad_reduce", "\"allreduce\"",
            "one of reduce_scatter | all_reduce"));
}

TEST(ScenarioValidate, Bf16AndFp16Exclusive) {
  Scenario s = default_scenario();
  s.training.bf16 = true;
  s.training.fp16 = true;
  EXPECT_TRUE(Names(invalid(s), "fp16", "true", "bf16"));
}

TEST(ScenarioValidate, MinLrAtMostLr) {
  Scenario s = default_scenario();
  s.training.min_lr = 1e-3;
  EXPECT_TRUE(Names(invalid(s), "min_lr", "0.001", "lr = 0.00015"));
}

// Megatron's loss-scale flags: each scale positive, the floor not above the start, the
// window and the hysteresis at least one step.
TEST(ScenarioValidate, LossScalerSettings) {
  Scenario s = default_scenario();
  apply_overrides(s, {{"--loss-scale", "4096"},
                      {"--initial-loss-scale", "65536"},
                      {"--min-loss-scale", "2"},
                      {"--loss-scale-window", "500"},
                      {"--hysteresis", "3"}});
  EXPECT_EQ(s.training.loss_scale, 4096.0);
  EXPECT_EQ(s.training.initial_loss_scale, 65536.0);
  EXPECT_EQ(s.training.min_loss_scale, 2.0);
  EXPECT_EQ(s.training.loss_scale_window, 500);
  EXPECT_EQ(s.training.hysteresis, 3);
  EXPECT_NO_THROW(validate(s));
  s.training.min_loss_scale = 131072;
  EXPECT_TRUE(Names(invalid(s), "min_loss_scale", "131072", "initial_loss_scale = 65536"));
  s.training.min_loss_scale = 1;
  s.training.hysteresis = 0;
  EXPECT_TRUE(Names(invalid(s), "hysteresis", "0", ""));
  s.training.hysteresis = 2;
  s.training.loss_scale = 0.0;
  EXPECT_TRUE(Names(invalid(s), "loss_scale", "0", ""));
}

TEST(ScenarioValidate, WarmupWithinDecay) {
  Scenario s = default_scenario();  // train_iters 10
  s.training.lr_warmup_iters = 11;
  EXPECT_TRUE(Names(invalid(s), "lr_warmup_iters", "11", "defaults to train_iters"));
  s.training.lr_decay_iters = 20;
  EXPECT_NO_THROW(validate(s));
  s.training.lr_decay_iters = 5;
  EXPECT_TRUE(Names(invalid(s), "lr_warmup_iters", "11", "lr_decay_iters = 5"));
}

TEST(ScenarioValidate, RecomputeLayersWithinStage) {
  Scenario s = default_scenario();  // 12 layers per stage
  s.training.recompute_num_layers = 13;
  EXPECT_NO_THROW(validate(s));  // only full recomputation uses it
  s.training.recompute_granularity = "full";
  EXPECT_TRUE(Names(invalid(s), "recompute_num_layers", "13", "24 / 2 = 12"));
  Scenario chunked = interleaved();  // 6 layers per model chunk
  chunked.training.recompute_granularity = "full";
  chunked.training.recompute_num_layers = 7;
  EXPECT_TRUE(Names(invalid(chunked), "recompute_num_layers", "7", "= 6"));
}

TEST(ScenarioValidate, ScheduleMatchesPipeline) {
  Scenario s = default_scenario();
  s.parallelism.pipeline_schedule = "none";
  EXPECT_TRUE(Names(invalid(s), "pipeline_schedule", "none", "pipeline_model_parallel_size"));
  s.parallelism.pipeline_schedule = "interleaved";
  EXPECT_TRUE(Names(invalid(s), "pipeline_schedule", "interleaved", "model chunk"));
  Scenario chunked = interleaved();
  chunked.parallelism.pipeline_schedule = "1f1b";
  EXPECT_TRUE(Names(invalid(chunked), "pipeline_schedule", "1f1b", "interleaved"));
  chunked.parallelism.pipeline_schedule = "gpipe";
  EXPECT_TRUE(Names(invalid(chunked), "pipeline_schedule", "gpipe", "interleaved"));
  chunked.parallelism.pipeline_schedule = "interleaved";
  EXPECT_NO_THROW(validate(chunked));
}

TEST(ScenarioValidate, OrderIsAPermutationOfKnownDimensions) {
  Scenario s = default_scenario();
  s.parallelism.order = "tp-dp-pp";  // cp and ep have size 1: may be left out
  EXPECT_NO_THROW(validate(s));
  s.parallelism.order = "tp-xp-dp-pp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-xp-dp-pp", "unknown dimension \"xp\""));
  s.parallelism.order = "tp-dp-pp-tp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-dp-pp-tp", "more than once"));
  s.parallelism.order = "tp-dp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-dp", "\"pp\""));
}

TEST(ScenarioValidate, OrderNamesNonTrivialDimensions) {
  Scenario s = default_scenario();
  s.cluster.world_size = 16;
  s.parallelism.context_parallel_size = 2;
  s.parallelism.order = "tp-ep-dp-pp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-ep-dp-pp", "\"cp\" when its size is 2"));
}

TEST(ScenarioValidate, OrderKeepsEpNextToDp) {
  Scenario s = default_scenario();
  s.cluster.world_size = 16;  // dp 4
  s.model.num_experts = 4;
  s.parallelism.sequence_parallel = true;  // MoE with tp 2
  s.parallelism.expert_model_parallel_size = 2;
  EXPECT_NO_THROW(validate(s));  // tp-cp-ep-dp-pp
  s.parallelism.order = "tp-ep-cp-dp-pp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-ep-cp-dp-pp", "next to \"dp\""));
  s.parallelism.order = "tp-cp-dp-pp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-cp-dp-pp", "\"ep\" when its size is 2"));
}

// Megatron-Core's rank generators: with pp not last, the expert grid's dp (dp × cp / ep)
// must equal dp. World 16, tp 2, pp 2, cp 2: dp 2, expert dp 4 without experts.
TEST(ScenarioValidate, OrderEndsWithPpWhenTheExpertGridWouldDiffer) {
  Scenario s = default_scenario();
  s.cluster.world_size = 16;
  s.parallelism.tensor_model_parallel_size = 2;
  s.parallelism.pipeline_model_parallel_size = 2;
  s.parallelism.context_parallel_size = 2;
  s.model.seq_length = 1024;
  s.model.max_position_embeddings = 1024;
  EXPECT_NO_THROW(validate(s));  // tp-cp-ep-dp-pp
  s.parallelism.order = "tp-cp-ep-pp-dp";
  EXPECT_TRUE(Names(invalid(s), "order", "tp-cp-ep-pp-dp", "expert data-parallel size"));
  s.parallelism.context_parallel_size = 1;  // expert dp = dp: Megatron accepts it
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioValidate, CollectsEveryViolation) {
  Scenario s = default_scenario();
  s.parallelism.tensor_model_parallel_size = 3;  // world 8 not divisible by 6; heads 16 % 3
  s.training.bf16 = s.training.fp16 = true;
  s.model.max_position_embeddings = 10;
  const auto vs = invalid(s);
  EXPECT_TRUE(Names(vs, "world_size", "8"));
  EXPECT_TRUE(Names(vs, "num_attention_heads", "16"));
  EXPECT_TRUE(Names(vs, "fp16", "true"));
  EXPECT_TRUE(Names(vs, "max_position_embeddings", "10"));
}

// --- today's dense architectures (GQA, SwiGLU, RMSNorm, RoPE, untied, no bias) ----------

TEST(ScenarioModel, SwigluFfnDefaultIsMegatronsTwoThirdsRoundedTo64) {
  Scenario s = default_scenario();
  s.model.swiglu = true;
  // Megatron: int(4h · 2/3 / 64) · 64. h = 1024: 2730.67 / 64 = 42.67 → 42 · 64 = 2688.
  EXPECT_EQ(ffn_hidden_size(s), 2688);
  s.model.hidden_size = 4096;  // Llama-2 7B's h: 10922.67 → 170 · 64 = 10880 (it passes 11008)
  EXPECT_EQ(ffn_hidden_size(s), 10880);
  s.model.ffn_hidden_size = 11008;
  EXPECT_EQ(ffn_hidden_size(s), 11008);
}

TEST(ScenarioModel, MixtureOfExpertsRules) {
  Scenario s = default_scenario();  // tp 2, pp 2, dp 2 on 8 ranks
  s.parallelism.expert_model_parallel_size = 2;
  EXPECT_TRUE(Names(invalid(s), "expert_model_parallel_size", "2", "needs num_experts"));
  s.model.num_experts = 3;
  EXPECT_TRUE(Names(invalid(s), "num_experts", "3", "divisible by expert_model_parallel_size = 2"));
  s.model.num_experts = 4;
  s.model.moe_router_topk = 5;
  EXPECT_TRUE(Names(invalid(s), "moe_router_topk", "5", "≤ num_experts = 4"));
  s.model.moe_router_topk = 2;
  s.model.moe_ffn_hidden_size = 33;
  EXPECT_TRUE(Names(invalid(s), "moe_ffn_hidden_size", "33", "tensor_model_parallel_size = 2"));
  s.model.moe_ffn_hidden_size = 64;
  s.model.moe_shared_expert_intermediate_size = 31;
  EXPECT_TRUE(Names(invalid(s), "moe_shared_expert_intermediate_size", "31",
                    "tensor_model_parallel_size = 2"));
  s.model.moe_shared_expert_intermediate_size = 32;
  // Megatron: MoE with tensor parallelism needs sequence parallelism.
  EXPECT_TRUE(Names(invalid(s), "sequence_parallel", "false", "tensor_model_parallel_size = 2"));
  s.parallelism.sequence_parallel = true;
  EXPECT_TRUE(invalid(s).empty()) << listed(invalid(s));
  s.model.moe_layer_freq = 0;
  EXPECT_TRUE(Names(invalid(s), "moe_layer_freq", "0"));
  // The fields read from JSON under Megatron's names.
  const Scenario j = parse_scenario(
      json::parse(R"({"model": {"num_experts": 8, "moe_router_topk": 1, "moe_layer_freq": 2}})"));
  EXPECT_EQ(j.model.num_experts, 8);
  EXPECT_EQ(j.model.moe_router_topk, 1);
  EXPECT_EQ(num_moe_layers(j), 12);  // layers 0, 2, …, 22 of 24
}

// DeepSeek-V3's router and token dropping, refused as Megatron-Core's TransformerConfig
// refuses them (and group-limited routing that leaves fewer than k experts).
TEST(ScenarioModel, RouterAndTokenDroppingRules) {
  Scenario s = default_scenario();
  s.parallelism.sequence_parallel = true;
  s.model.num_experts = 8;
  s.model.moe_router_topk = 4;
  EXPECT_TRUE(invalid(s).empty()) << listed(invalid(s));
  s.model.moe_router_enable_expert_bias = true;
  EXPECT_TRUE(Names(invalid(s), "moe_router_enable_expert_bias", "true", "sigmoid"));
  s.model.moe_router_score_function = "sigmoid";
  EXPECT_TRUE(invalid(s).empty()) << listed(invalid(s));
  s.model.moe_router_group_topk = 2;
  EXPECT_TRUE(Names(invalid(s), "moe_router_group_topk", "2", "moe_router_num_groups"));
  s.model.moe_router_num_groups = 3;
  EXPECT_TRUE(Names(invalid(s), "moe_router_num_groups", "3", "divide num_experts = 8"));
  s.model.moe_router_num_groups = 4;
  EXPECT_TRUE(invalid(s).empty()) << listed(invalid(s));
  s.model.moe_router_group_topk = 1;  // one group of 2 experts cannot give 4
  EXPECT_TRUE(Names(invalid(s), "moe_router_topk", "4", "= 2"));
  s.model.moe_router_group_topk = 5;
  EXPECT_TRUE(Names(invalid(s), "moe_router_group_topk", "5", "≤ moe_router_num_groups = 4"));
  s.model.moe_router_group_topk = 2;
  s.model.moe_pad_expert_input_to_capacity = true;
  EXPECT_TRUE(
      Names(invalid(s), "moe_pad_expert_input_to_capacity", "true", "moe_expert_capacity_factor"));
  s.model.moe_expert_capacity_factor = 1.0;
  EXPECT_TRUE(invalid(s).empty()) << listed(invalid(s));
  s.model.moe_router_load_balancing_type = "sinkhorn";
  EXPECT_TRUE(Names(invalid(s), "moe_expert_capacity_factor", "1", "aux_loss, seq_aux_loss"));
  s.model.moe_router_load_balancing_type = "aux_loss";
  s.model.moe_router_score_function = "softmax";
  s.model.moe_router_enable_expert_bias = false;
  s.model.moe_router_topk = 1;
  s.model.moe_router_group_topk = std::nullopt;
  EXPECT_TRUE(Names(invalid(s), "moe_router_topk", "1", "moe_router_pre_softmax"));
  const Scenario j = parse_scenario(json::parse(
      R"({"model": {"num_experts": 8, "moe_router_score_function": "sigmoid",
          "moe_token_drop_policy": "position", "moe_router_topk_scaling_factor": 2.5}})"));
  EXPECT_EQ(j.model.moe_router_score_function, "sigmoid");
  EXPECT_EQ(j.model.moe_token_drop_policy, "position");
  EXPECT_EQ(j.model.moe_router_topk_scaling_factor, 2.5);
}

// Megatron's list form of moe_layer_freq: a 0/1 per layer, in JSON or as Megatron's
// Python expression on the command line; one entry per layer, only 0 and 1.
TEST(ScenarioModel, MoeLayerFreqTakesMegatronsListForm) {
  Scenario s = default_scenario();  // 24 layers
  s.model.num_experts = 8;
  s.parallelism.sequence_parallel = true;  // MoE with tp 2
  apply_overrides(s, {{"--moe-layer-freq", "[0]*3+[1]*21"}});
  EXPECT_EQ(num_moe_layers(s), 21);
  EXPECT_FALSE(is_moe_layer(s, 2));
  EXPECT_TRUE(is_moe_layer(s, 3));
  apply_overrides(s, {{"--moe-layer-freq", "([1]*3 + [0]) * 6"}});
  EXPECT_EQ(num_moe_layers(s), 18);
  EXPECT_FALSE(is_moe_layer(s, 3));
  EXPECT_TRUE(is_moe_layer(s, 4));
  EXPECT_TRUE(invalid(s).empty()) << listed(invalid(s));
  // Back to the integer form, which clears the list.
  apply_overrides(s, {{"--moe-layer-freq", "3"}});
  EXPECT_EQ(num_moe_layers(s), 8);  // 0, 3, …, 21
  EXPECT_EQ(to_json(s)["model"]["moe_layer_freq"], 3);
  // JSON lists round-trip.
  s.model.moe_layer_pattern = std::vector<int>(24, 0);
  s.model.moe_layer_pattern[5] = 1;
  const Scenario back = parse_scenario(to_json(s));
  EXPECT_EQ(back.model.moe_layer_pattern, s.model.moe_layer_pattern);
  EXPECT_EQ(num_moe_layers(back), 1);
  // One entry per layer, only 0 and 1, and a well-formed expression.
  s.model.moe_layer_pattern = {1, 0, 1};
  EXPECT_TRUE(Names(invalid(s), "moe_layer_freq", "a list of 3", "num_layers = 24"));
  EXPECT_TRUE(Names(rejected(s, {{"--moe-layer-freq", "[0,2]*12"}}), "--moe-layer-freq", "[0,2]*12",
                    "only 0 and 1"));
  EXPECT_TRUE(Names(rejected(s, {{"--moe-layer-freq", "[1]*"}}), "--moe-layer-freq", "[1]*",
                    "[0]*3+[1]*58"));
  EXPECT_TRUE(Names(rejected(s, {{"--moe-layer-freq", "0"}}), "--moe-layer-freq", "0", "≥ 1"));
}

TEST(ScenarioModel, QueryGroupsOnlyWithGroupQueryAttention) {
  Scenario s = default_scenario();
  s.model.num_query_groups = 4;
  EXPECT_EQ(num_query_groups(s), 16);  // without GQA every head has its own key/value head
  s.model.group_query_attention = true;
  EXPECT_EQ(num_query_groups(s), 4);
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioModel, LlamaFlagsParseUnderMegatronsNames) {
  Scenario s = default_scenario();
  apply_overrides(s, {{"--group-query-attention", "true"},
                      {"--num-query-groups", "8"},
                      {"--swiglu", "1"},
                      {"--normalization", "RMSNorm"},
                      {"--norm-epsilon", "1e-6"},
                      {"--position-embedding-type", "rope"},
                      {"--rotary-base", "500000"},
                      {"--rotary-percent", "0.5"},
                      {"--untie-embeddings-and-output-weights", "true"},
                      {"--disable-bias-linear", "true"},
                      {"--use-flash-attn", "true"}});
  EXPECT_TRUE(s.model.group_query_attention && s.model.swiglu && s.model.use_flash_attn);
  EXPECT_TRUE(s.model.untie_embeddings_and_output_weights && s.model.disable_bias_linear);
  EXPECT_EQ(s.model.num_query_groups, 8);
  EXPECT_EQ(s.model.normalization, "RMSNorm");
  EXPECT_DOUBLE_EQ(s.model.norm_epsilon, 1e-6);
  EXPECT_EQ(s.model.position_embedding_type, "rope");
  EXPECT_EQ(s.model.rotary_base, 500000);
  EXPECT_DOUBLE_EQ(s.model.rotary_percent, 0.5);
  EXPECT_EQ(parse_scenario(to_json(s)), s);  // and they round-trip through JSON
}

TEST(ScenarioModel, AttentionDropoutIsAProbabilityOfTheUnfusedAttention) {
  Scenario s = default_scenario();
  EXPECT_EQ(s.model.attention_dropout, 0.0);  // tandem's default (Megatron's is 0.1)
  apply_overrides(s, {{"--attention-dropout", "0.1"}});
  EXPECT_DOUBLE_EQ(s.model.attention_dropout, 0.1);
  EXPECT_EQ(parse_scenario(to_json(s)), s);
  EXPECT_TRUE(Names(rejected(default_scenario(), {{"--attention-dropout", "1"}}),
                    "--attention-dropout", "1", "[0, 1)"));
  EXPECT_TRUE(Names(unparsable(R"({"model": {"attention_dropout": -0.1}})"),
                    "model.attention_dropout", "-0.1", "0"));
  Scenario flash = s;
  flash.model.use_flash_attn = true;
  EXPECT_TRUE(Names(invalid(flash), "attention_dropout", "0.1", "use_flash_attn"));
  Scenario cp = s;
  cp.parallelism.context_parallel_size = 2;
  EXPECT_TRUE(Names(invalid(cp), "attention_dropout", "0.1", "context_parallel_size"));
}

// Megatron's arguments.py: "--attention-backend local is only supported with --spec local";
// and tandem's fused op has no dropout, so the two TE backends that run it refuse one.
TEST(ScenarioModel, AttentionBackendFollowsMegatronsRules) {
  Scenario s = default_scenario();
  EXPECT_EQ(s.model.attention_backend, "auto");
  apply_overrides(s, {{"--attention-backend", "fused"}});
  EXPECT_EQ(s.model.attention_backend, "fused");
  EXPECT_EQ(parse_scenario(to_json(s)), s);
  EXPECT_TRUE(Names(rejected(default_scenario(), {{"--attention-backend", "sdpa"}}),
                    "--attention-backend", "sdpa", "auto | flash | fused | unfused | local"));
  Scenario te = default_scenario();
  te.model.transformer_impl = "transformer_engine";
  te.model.attention_backend = "local";
  EXPECT_TRUE(Names(invalid(te), "attention_backend", "local", "transformer_impl local"));
  te.model.attention_backend = "flash";
  te.model.attention_dropout = 0.1;
  EXPECT_TRUE(Names(invalid(te), "attention_dropout", "0.1", "attention_backend flash"));
  te.model.attention_backend = "unfused";  // TE's unfused backend applies dropout
  EXPECT_NO_THROW(validate(te));
  Scenario local = default_scenario();
  local.model.attention_backend = "local";
  EXPECT_NO_THROW(validate(local));
}

// Megatron-Core's --cross-entropy-loss-fusion and --cross-entropy-fusion-impl: modelled
// fields, off and "native" by default as in Megatron; the implementation is one of two.
TEST(ScenarioTraining, CrossEntropyLossFusionIsAScenarioField) {
  Scenario s = default_scenario();
  EXPECT_FALSE(s.training.cross_entropy_loss_fusion);
  EXPECT_EQ(s.training.cross_entropy_fusion_impl, "native");
  apply_overrides(s,
                  {{"--cross-entropy-loss-fusion", "true"}, {"--cross-entropy-fusion-impl", "te"}});
  EXPECT_TRUE(s.training.cross_entropy_loss_fusion);
  EXPECT_EQ(s.training.cross_entropy_fusion_impl, "te");
  EXPECT_EQ(parse_scenario(to_json(s)), s);
  EXPECT_TRUE(Names(rejected(default_scenario(), {{"--cross-entropy-fusion-impl", "triton"}}),
                    "--cross-entropy-fusion-impl", "triton", "native | te"));
}

// Megatron-Core's ModelParallelConfig: deferring the output layer's weight gradients needs a
// pipeline and gradient-accumulation fusion, and the limit is a count.
TEST(ScenarioTraining, DeferEmbeddingWgradComputeFollowsMegatronsRules) {
  Scenario s = default_scenario();
  s.parallelism.pipeline_model_parallel_size = 1;
  s.parallelism.tensor_model_parallel_size = 1;
  s.cluster.world_size = 1;
  apply_overrides(s,
                  {{"--defer-embedding-wgrad-compute", "true"}, {"--wgrad-deferral-limit", "4"}});
  EXPECT_TRUE(s.training.defer_embedding_wgrad_compute);
  EXPECT_EQ(s.training.wgrad_deferral_limit, 4);
  EXPECT_EQ(parse_scenario(to_json(s)), s);
  EXPECT_TRUE(Names(invalid(s), "defer_embedding_wgrad_compute", "true",
                    "pipeline_model_parallel_size > 1"));
  Scenario pp = default_scenario();
  pp.training.defer_embedding_wgrad_compute = true;
  EXPECT_NO_THROW(validate(pp));
  pp.training.gradient_accumulation_fusion = false;
  EXPECT_TRUE(
      Names(invalid(pp), "defer_embedding_wgrad_compute", "true", "gradient_accumulation_fusion"));
  EXPECT_TRUE(Names(rejected(default_scenario(), {{"--wgrad-deferral-limit", "-1"}}),
                    "--wgrad-deferral-limit", "-1", "0"));
}

TEST(ScenarioModel, TransformerImplIsLocalOrTransformerEngine) {
  Scenario s = default_scenario();
  EXPECT_EQ(s.model.transformer_impl, "local");  // tandem's scenarios; Megatron's flags: TE
  apply_overrides(s, {{"--transformer-impl", "transformer_engine"}});
  EXPECT_EQ(s.model.transformer_impl, "transformer_engine");
  EXPECT_EQ(parse_scenario(to_json(s)), s);
  EXPECT_TRUE(Names(rejected(default_scenario(), {{"--transformer-impl", "te"}}),
                    "--transformer-impl", "te", "local | transformer_engine"));
  EXPECT_TRUE(Names(unparsable(R"({"model": {"transformer_impl": "inference_optimized"}})"),
                    "model.transformer_impl", "inference_optimized", "local | transformer_engine"));
}

TEST(ScenarioModel, ChoicesAndRangesOfTheNewFields) {
  auto vs = unparsable(R"({"model": {"normalization": "rmsnorm", "position_embedding_type": "alibi",
                           "rotary_percent": 0, "norm_epsilon": 0, "num_query_groups": 0}})");
  EXPECT_TRUE(Names(vs, "model.normalization", "rmsnorm", "LayerNorm | RMSNorm"));
  EXPECT_TRUE(Names(vs, "model.position_embedding_type", "alibi", "learned_absolute | rope"));
  EXPECT_TRUE(Names(vs, "model.rotary_percent", "0", "must lie in (0, 1]"));
  EXPECT_TRUE(Names(vs, "model.norm_epsilon", "0", "> 0"));
  EXPECT_TRUE(Names(vs, "model.num_query_groups", "0", "≥ 1"));
  EXPECT_TRUE(Names(rejected(default_scenario(), {{"--rotary-percent", "1.5"}}), "--rotary-percent",
                    "1.5", "(0, 1]"));
  Scenario s = default_scenario();
  apply_overrides(s, {{"--rotary-percent", "1"}});  // the closed end is allowed
  EXPECT_DOUBLE_EQ(s.model.rotary_percent, 1.0);
}

TEST(ScenarioValidate, QueryGroupsDivideHeads) {
  Scenario s = default_scenario();  // 16 heads, tp 2
  s.model.group_query_attention = true;
  s.model.num_query_groups = 6;
  EXPECT_TRUE(Names(invalid(s), "num_query_groups", "6", "divide num_attention_heads = 16"));
}

TEST(ScenarioValidate, QueryGroupsMultipleOrDivisorOfTp) {
  Scenario s = default_scenario();
  s.model.num_attention_heads = 24;
  s.model.hidden_size = 1536;
  s.model.group_query_attention = true;
  s.model.num_query_groups = 3;  // divides 24, but neither a multiple nor a divisor of tp 2
  EXPECT_TRUE(Names(invalid(s), "num_query_groups", "3",
                    "multiple or a divisor of "
                    "tensor_model_parallel_size = 2"));
  s.model.num_query_groups = 1;  // tp 2 replicates the single key/value head: allowed
  EXPECT_NO_THROW(validate(s));
  s.model.group_query_attention = false;  // without GQA the field is not read
  s.model.num_query_groups = 3;
  EXPECT_NO_THROW(validate(s));
}

}  // namespace
}  // namespace tandem
