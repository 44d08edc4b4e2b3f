// Tests of the pipeline partition (core/pipeline_layout.hpp): the layout-string parser
// and every way Megatron asks for a partition, against values worked out by hand from
// Megatron-Core's documented semantics (the interleaved assignment in transformer_block.py's
// comments, PipelineParallelLayerLayout's docstring, the uneven-stage and account-for rules
// of TransformerConfig), checked again against a brute-force walk written here; and one
// test per refusal, naming field, value and rule.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/pipeline_layout.hpp"
#include "core/scenario.hpp"

namespace tandem {
namespace {

// A model of `layers` layers on pp × vpp chunks, with enough ranks and batch for validate().
Scenario scenario(int layers, int pp, int vpp = 1) {
  Scenario s = default_scenario();
  s.model.num_layers = layers;
  s.parallelism.tensor_model_parallel_size = 1;
  s.parallelism.pipeline_model_parallel_size = pp;
  s.parallelism.num_layers_per_virtual_pipeline_stage.reset();
  s.parallelism.virtual_pipeline_model_parallel_size.reset();
  if (vpp > 1) s.parallelism.virtual_pipeline_model_parallel_size = vpp;
  s.cluster.world_size = pp;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 4 * pp;
  return s;
}

// (first layer, layer count, embedding, loss) of every chunk, in virtual-stage order.
std::vector<ChunkPlan> plans(std::initializer_list<ChunkPlan> p) {
  return p;
}

std::vector<Violation> invalid(const Scenario& s) {
  try {
    validate(s);
  } catch (const ConfigError& e) {
    return e.violations();
  }
  return {};
}

::testing::AssertionResult Names(const std::vector<Violation>& vs, const std::string& field,
                                 const std::string& value, const std::string& rule) {
  std::string got;
  for (const auto& v : vs) {
    if (v.field == field && v.value.find(value) != std::string::npos &&
        v.rule.find(rule) != std::string::npos)
      return ::testing::AssertionSuccess();
    got += "\n  " + format_violation(v);
  }
  return ::testing::AssertionFailure()
         << "no violation of " << field << " = " << value << " with rule containing \"" << rule
         << "\"; got:" << (got.empty() ? " (none)" : got);
}

// Brute force, independent of the partition code: a chunk's layers are the layers after
// every earlier virtual stage's, and layer ids run 0 … num_layers − 1 with no gap.
void expect_contiguous(const std::vector<ChunkPlan>& p, int layers) {
  int next = 0;
  for (const auto& c : p) {
    EXPECT_EQ(c.first_layer, next);
    EXPECT_GE(c.num_layers, 0);
    next += c.num_layers;
  }
  EXPECT_EQ(next, layers);
}

TEST(PipelineLayoutParser, UnrollsGroupsThenSymbolsAsMegatron) {
  // Megatron's docstring: "Ettt|(tt|)*29,m|L" is [E,t,t,t] + [t,t]·29 + [m] + [L]; here
  // written with "t*3".
  const ParsedLayout p = parse_pipeline_layout("Et*3|(tt|)*29,m|L");
  ASSERT_EQ(p.error, "");
  ASSERT_EQ(p.stages.size(), 32U);
  EXPECT_EQ(p.stages.front(), "Ettt");
  for (std::size_t i = 1; i <= 29; ++i) EXPECT_EQ(p.stages[i], "tt") << i;
  EXPECT_EQ(p.stages[30], "m");
  EXPECT_EQ(p.stages[31], "L");
}

TEST(PipelineLayoutParser, EmptyStagesAndCosmeticCommas) {
  // "(|ab)*2,cd -> |ab|abcd" in Megatron's comments: a leading empty stage.
  EXPECT_EQ(parse_pipeline_layout("(|tt)*2,t").stages, (std::vector<std::string>{"", "tt", "ttt"}));
  // A trailing '|' ends one more (empty) stage, as Python's split does; t*0 is nothing.
  EXPECT_EQ(parse_pipeline_layout("E|t*0|L|").stages, (std::vector<std::string>{"E", "", "L", ""}));
  EXPECT_EQ(parse_pipeline_layout("E,t,t|t,t,L").stages, (std::vector<std::string>{"Ett", "ttL"}));
}

TEST(PipelineLayoutParser, RefusesUnknownSymbolsNamingTheStage) {
  const ParsedLayout p = parse_pipeline_layout("Et|tx|L");
  EXPECT_TRUE(p.stages.empty());
  EXPECT_NE(p.error.find("'x'"), std::string::npos) << p.error;
  EXPECT_NE(p.error.find("stage 1"), std::string::npos) << p.error;
  // Nested groups are not Megatron's syntax: a '(' is left over.
  EXPECT_NE(parse_pipeline_layout("((t)*2)*2").error.find("'('"), std::string::npos);
}

TEST(PipelinePartition, EvenInterleavedIsMegatronsAssignment) {
  // transformer_block.py: 8 layers, 2 stages, 2 virtual stages: stage 0 holds [0, 1] and
  // [4, 5], stage 1 holds [2, 3] and [6, 7].
  EXPECT_EQ(
      pipeline_partition(scenario(8, 2, 2)),
      plans(
          {{0, 2, true, false}, {2, 2, false, false}, {4, 2, false, false}, {6, 2, false, true}}));
  // … and with 4 model chunks, stage 0 holds [0] [2] [4] [6].
  const Scenario four = scenario(8, 2, 4);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(plan_chunk(four, 0, c).first_layer, 2 * c);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(plan_chunk(four, 1, c).first_layer, 2 * c + 1);
  EXPECT_TRUE(plan_chunk(four, 0, 0).pre_process);
  EXPECT_TRUE(plan_chunk(four, 1, 3).post_process);
  EXPECT_FALSE(plan_chunk(four, 0, 3).post_process);
}

TEST(PipelinePartition, FirstAndLastStagesShorter) {
  // 126 layers on 16 stages with 7 on the first and last: (126 − 14) / 14 = 8 elsewhere.
  Scenario s = scenario(126, 16);
  s.parallelism.decoder_first_pipeline_num_layers = 7;
  s.parallelism.decoder_last_pipeline_num_layers = 7;
  EXPECT_NO_THROW(validate(s));
  const auto p = pipeline_partition(s);
  expect_contiguous(p, 126);
  EXPECT_EQ(p[0], (ChunkPlan{0, 7, true, false}));
  EXPECT_EQ(p[1], (ChunkPlan{7, 8, false, false}));
  EXPECT_EQ(p[14], (ChunkPlan{111, 8, false, false}));
  EXPECT_EQ(p[15], (ChunkPlan{119, 7, false, true}));
}

TEST(PipelinePartition, UnevenWithVirtualStages) {
  // 12 layers, pp 4, vpp 2, 2 on the first and last rank: the middle ranks hold
  // (12 − 4) / 2 = 4, each rank's layers halve into its chunks. Megatron's offsets:
  // total per virtual stage 1 + 4 + 1 = 6; rank 0 chunk 1 starts at 6, rank 2 chunk 1 at
  // 6 + 1 + 1·(4 / 2) = 9, rank 3 chunk 0 at 1 + 2·2 = 5.
  Scenario s = scenario(12, 4, 2);
  s.parallelism.decoder_first_pipeline_num_layers = 2;
  s.parallelism.decoder_last_pipeline_num_layers = 2;
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(pipeline_partition(s), plans({{0, 1, true, false},
                                          {1, 2, false, false},
                                          {3, 2, false, false},
                                          {5, 1, false, false},
                                          {6, 1, false, false},
                                          {7, 2, false, false},
                                          {9, 2, false, false},
                                          {11, 1, false, true}}));
  EXPECT_EQ(stage_num_layers(s, 0), 2);
  EXPECT_EQ(stage_num_layers(s, 1), 4);
}

TEST(PipelinePartition, OnlyTheFirstStageGiven) {
  // 10 layers, pp 4, 1 on the first: the other three split 9.
  Scenario s = scenario(10, 4);
  s.parallelism.decoder_first_pipeline_num_layers = 1;
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(
      pipeline_partition(s),
      plans(
          {{0, 1, true, false}, {1, 3, false, false}, {4, 3, false, false}, {7, 3, false, true}}));
}

TEST(PipelinePartition, EmbeddingAndLossCountedAsLayers) {
  // 6 layers + embedding + loss = 8 on 4 ranks: 2 each, the first and last building one.
  Scenario s = scenario(6, 4);
  s.parallelism.account_for_embedding_in_pipeline_split = true;
  s.parallelism.account_for_loss_in_pipeline_split = true;
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(
      pipeline_partition(s),
      plans(
          {{0, 1, true, false}, {1, 2, false, false}, {3, 2, false, false}, {5, 1, false, true}}));
}

TEST(PipelinePartition, Llama3405bInMetasLayout) {
  // The header's worked example: (126 + 2) / 16 = 8 a rank, 4 a chunk at vpp 2.
  Scenario s = scenario(126, 16, 2);
  s.parallelism.account_for_embedding_in_pipeline_split = true;
  s.parallelism.account_for_loss_in_pipeline_split = true;
  EXPECT_NO_THROW(validate(s));
  const auto p = pipeline_partition(s);
  expect_contiguous(p, 126);
  EXPECT_EQ(p[0], (ChunkPlan{0, 3, true, false}));
  for (std::size_t v = 1; v < 31; ++v)
    EXPECT_EQ(p[v], (ChunkPlan{3 + 4 * (static_cast<int>(v) - 1), 4, false, false})) << v;
  EXPECT_EQ(p[31], (ChunkPlan{123, 3, false, true}));
  EXPECT_EQ(stage_num_layers(s, 0), 7);
  for (int r = 1; r < 15; ++r) EXPECT_EQ(stage_num_layers(s, r), 8) << r;
  EXPECT_EQ(stage_num_layers(s, 15), 7);
  // The same partition as a layout string.
  Scenario l = scenario(126, 16);
  l.parallelism.pipeline_model_parallel_layout = "Ettt|(tttt|)*30tttL";
  EXPECT_NO_THROW(validate(l));
  EXPECT_EQ(virtual_pipeline_size(l), 2);
  EXPECT_EQ(pipeline_partition(l), p);
}

TEST(PipelinePartition, LayoutWithEmbeddingAndLossStages) {
  Scenario s = scenario(4, 4);
  s.parallelism.pipeline_model_parallel_layout = "E|tt|tt|L";
  EXPECT_NO_THROW(validate(s));
  EXPECT_EQ(
      pipeline_partition(s),
      plans(
          {{0, 0, true, false}, {0, 2, false, false}, {2, 2, false, false}, {4, 0, false, true}}));
  // Virtual stages from the string: 4 stages on pp 2 are 2 chunks a rank; stage v is
  // chunk v / 2 of rank v mod 2.
  Scenario v = scenario(4, 2);
  v.parallelism.pipeline_model_parallel_layout = "Et|t|t|tL";
  EXPECT_NO_THROW(validate(v));
  EXPECT_EQ(virtual_pipeline_size(v), 2);
  EXPECT_EQ(plan_chunk(v, 0, 1), (ChunkPlan{2, 1, false, false}));
  EXPECT_EQ(plan_chunk(v, 1, 0), (ChunkPlan{1, 1, false, false}));
  EXPECT_EQ(plan_chunk(v, 1, 1), (ChunkPlan{3, 1, false, true}));
}

TEST(PipelinePartition, MiddleStagesAlike) {
  Scenario s = scenario(6, 4);
  s.parallelism.pipeline_model_parallel_layout = "Et|ttt|t|tL";
  EXPECT_FALSE(middle_stages_alike(s));
  s.parallelism.pipeline_model_parallel_layout = "Et|tt|tt|L";
  EXPECT_TRUE(middle_stages_alike(s));
}

TEST(PipelineRules, LayoutExcludesTheOtherWays) {
  Scenario s = scenario(4, 4);
  s.parallelism.pipeline_model_parallel_layout = "E|tt|tt|L";
  s.parallelism.decoder_first_pipeline_num_layers = 1;
  s.parallelism.account_for_loss_in_pipeline_split = true;
  EXPECT_TRUE(Names(invalid(s), "pipeline_model_parallel_layout", "E|tt|tt|L",
                    "cannot be combined with decoder_first_pipeline_num_layers "
                    "account_for_loss_in_pipeline_split"));
  Scenario v = scenario(4, 2);
  v.parallelism.pipeline_model_parallel_layout = "Et|t|t|tL";
  v.parallelism.virtual_pipeline_model_parallel_size = 2;
  EXPECT_TRUE(Names(invalid(v), "pipeline_model_parallel_layout", "Et|t|t|tL",
                    "virtual_pipeline_model_parallel_size (2), not both"));
}

TEST(PipelineRules, LayoutContents) {
  auto with = [](int layers, int pp, const std::string& layout) {
    Scenario s = scenario(layers, pp);
    s.parallelism.pipeline_model_parallel_layout = layout;
    return invalid(s);
  };
  const std::string field = "pipeline_model_parallel_layout";
  EXPECT_TRUE(Names(with(4, 4, "E|tt|tt|tL"), field, "E|tt|tt|tL",
                    "holds 5 transformer layers ('t'), but num_layers = 4"));
  EXPECT_TRUE(Names(with(4, 4, "E|tt|tt"), field, "E|tt|tt",
                    "has 3 stages, which must be a multiple of pipeline_model_parallel_size = 4"));
  EXPECT_TRUE(Names(with(4, 2, "tE|tttL"), field, "tE|tttL", "must open its first stage"));
  EXPECT_TRUE(Names(with(4, 2, "Ett|tLt"), field, "Ett|tLt", "must close its last stage"));
  EXPECT_TRUE(Names(with(4, 2, "EEtt|ttL"), field, "EEtt|ttL", "'E' 2 times"));
  // An MTP layer in a model without MTP (mtp_num_layers absent).
  EXPECT_TRUE(Names(with(4, 2, "Ett|ttmL"), field, "Ett|ttmL", "but mtp_num_layers = 0"));
  // Named even when the stage count is wrong too (Megatron's example: 32 stages, pp 3).
  EXPECT_TRUE(Names(with(60, 3, "Et*3|(tt|)*29,m|L"), field, "Et*3", "but mtp_num_layers = 0"));
  EXPECT_TRUE(Names(with(4, 2, "Ett|t?L"), field, "Ett|t?L", "unknown symbol '?'"));
  // Layers need not split evenly over pp any more.
  EXPECT_TRUE(with(5, 2, "Ett|tttL").empty());
}

// Multi-token prediction: without a layout its depths sit on the last chunk (Megatron's
// is_pipeline_last_stage); a layout's 'm' puts them where it names them, counted as no
// transformer layer. Megatron's DeepSeek-V3 example "Et*3|(tt|)*29,m|L" on pp 16: 32
// virtual stages, vpp 2; stage 30 (pp rank 14, chunk 1) holds the MTP layer after
// 3 + 2 · 29 = 61 layers, stage 31 (rank 15, chunk 1) the loss alone.
Scenario mtp_scenario(int layers, int pp, int depths, const std::string& layout = "") {
  Scenario s = scenario(layers, pp);
  s.model.position_embedding_type = "rope";
  s.model.mtp_num_layers = depths;
  if (!layout.empty()) s.parallelism.pipeline_model_parallel_layout = layout;
  return s;
}

TEST(PipelinePartition, MultiTokenPrediction) {
  const Scenario even = mtp_scenario(4, 2, 2);
  EXPECT_NO_THROW(validate(even));
  EXPECT_EQ(pipeline_partition(even), plans({{0, 2, true, false, 0}, {2, 2, false, true, 2}}));
  const Scenario local = mtp_scenario(4, 2, 1, "Ett|ttmL");
  EXPECT_NO_THROW(validate(local));
  EXPECT_EQ(pipeline_partition(local), plans({{0, 2, true, false, 0}, {2, 2, false, true, 1}}));
  const Scenario deepseek = mtp_scenario(61, 16, 1, "Et*3|(tt|)*29,m|L");
  EXPECT_NO_THROW(validate(deepseek));
  EXPECT_EQ(virtual_pipeline_size(deepseek), 2);
  EXPECT_EQ(plan_chunk(deepseek, 14, 1), (ChunkPlan{61, 0, false, false, 1}));
  EXPECT_EQ(plan_chunk(deepseek, 15, 1), (ChunkPlan{61, 0, false, true, 0}));
  expect_contiguous(pipeline_partition(deepseek), 61);
  // Megatron's mtp_standalone, and pretrain_gpt.py's embedding ranks: the first stage, the
  // MTP stage (14) and, tied, the last.
  EXPECT_FALSE(mtp_standalone(even));
  EXPECT_FALSE(mtp_standalone(local));
  EXPECT_TRUE(embedding_stages(local).empty());
  EXPECT_TRUE(mtp_standalone(deepseek));
  EXPECT_EQ(embedding_stages(deepseek), (std::vector<int>{0, 14, 15}));
  Scenario untied = deepseek;  // DeepSeek-V3's own: untied, so the last stage is not in it
  untied.model.untie_embeddings_and_output_weights = true;
  EXPECT_EQ(embedding_stages(untied), (std::vector<int>{0, 14}));
}

TEST(PipelineRules, MultiTokenPredictionLayout) {
  const std::string field = "pipeline_model_parallel_layout";
  EXPECT_TRUE(Names(invalid(mtp_scenario(4, 2, 2, "Ett|ttmL")), field, "Ett|ttmL",
                    "names 1 multi-token-prediction layer ('m'), but mtp_num_layers = 2"));
  EXPECT_TRUE(Names(invalid(mtp_scenario(4, 2, 1, "Etm|ttL")), field, "Etm|ttL",
                    "decoder layers must be placed before MTP layers"));
  EXPECT_TRUE(Names(invalid(mtp_scenario(4, 2, 2, "Ettm|ttmL")), field, "Ettm|ttmL",
                    "all of them must be in the same one"));
  // pp 2, 4 stages: stage 1 is pp rank 1's chunk 0, not its last.
  EXPECT_TRUE(Names(invalid(mtp_scenario(2, 2, 1, "Ett|m||L")), field, "Ett|m||L",
                    "virtual stage 0 of pp rank 1: they must be in the last virtual stage"));
  // On pp rank 0's last chunk Megatron lets it stand.
  EXPECT_TRUE(invalid(mtp_scenario(2, 2, 1, "Et|t|m|L")).empty());
}

TEST(PipelineRules, MultiTokenPredictionNeedsRopeOrNoPositions) {
  Scenario s = mtp_scenario(4, 2, 1);
  s.model.position_embedding_type = "learned_absolute";
  EXPECT_TRUE(Names(invalid(s), "position_embedding_type", "learned_absolute",
                    "must be rope or none with mtp_num_layers = 1"));
  s.model.position_embedding_type = "none";
  EXPECT_TRUE(invalid(s).empty());
  // Full uniform recomputation checkpoints each depth alone.
  s.training.recompute_granularity = "full";
  s.training.recompute_num_layers = 2;
  EXPECT_TRUE(Names(invalid(s), "recompute_num_layers", "2",
                    "must be 1 with mtp_num_layers = 1 and full uniform recomputation"));
  s.training.recompute_method = "block";
  EXPECT_TRUE(invalid(s).empty());
  // Megatron's flags reach the fields; 0 builds nothing.
  apply_overrides(s, {{"--mtp-num-layers", "0"}, {"--mtp-loss-scaling-factor", "0.3"}});
  EXPECT_EQ(mtp_depths(s.model), 0);
  EXPECT_EQ(mtp_loss_scaling_factor(s.model), 0.3);
  EXPECT_THROW(apply_overrides(s, {{"--mtp-num-layers", "-1"}}), ConfigError);
}

TEST(PipelineRules, UnevenStages) {
  Scenario s = scenario(12, 4, 2);
  s.parallelism.decoder_first_pipeline_num_layers = 3;  // 3 layers in 2 chunks
  EXPECT_TRUE(Names(invalid(s), "decoder_first_pipeline_num_layers", "3",
                    "must be divisible by virtual_pipeline_model_parallel_size = 2"));
  Scenario m = scenario(12, 4);
  m.parallelism.decoder_first_pipeline_num_layers = 2;  // 10 left for 3 ranks
  EXPECT_TRUE(Names(invalid(m), "num_layers", "12", "must be divisible by the 3 middle"));
  Scenario over = scenario(12, 2);
  over.parallelism.decoder_first_pipeline_num_layers = 8;
  over.parallelism.decoder_last_pipeline_num_layers = 8;
  EXPECT_TRUE(Names(invalid(over), "decoder_first_pipeline_num_layers", "8", "< 0"));
  Scenario both = scenario(12, 2);  // pp 2: no middle stage, so no layer may be left
  both.parallelism.decoder_first_pipeline_num_layers = 5;
  both.parallelism.decoder_last_pipeline_num_layers = 5;
  EXPECT_TRUE(Names(invalid(both), "num_layers", "12", "both must be zero or both positive"));
  Scenario acc = scenario(12, 4);
  acc.parallelism.decoder_last_pipeline_num_layers = 3;
  acc.parallelism.account_for_embedding_in_pipeline_split = true;
  EXPECT_TRUE(Names(invalid(acc), "decoder_last_pipeline_num_layers", "3",
                    "cannot be combined with account_for_embedding_in_pipeline_split"));
  Scenario per = scenario(12, 4);
  per.parallelism.decoder_first_pipeline_num_layers = 2;
  per.parallelism.num_layers_per_virtual_pipeline_stage = 1;
  EXPECT_TRUE(Names(invalid(per), "num_layers_per_virtual_pipeline_stage", "1",
                    "--num-virtual-stages-per-pipeline-rank"));
  Scenario one = scenario(12, 1);
  one.parallelism.decoder_first_pipeline_num_layers = 2;
  EXPECT_TRUE(Names(invalid(one), "decoder_first_pipeline_num_layers", "2",
                    "needs pipeline_model_parallel_size > 1"));
  Scenario zero = scenario(12, 4);
  zero.parallelism.decoder_first_pipeline_num_layers = 0;  // Megatron: must be > 0
  EXPECT_TRUE(Names(invalid(zero), "decoder_first_pipeline_num_layers", "0", "≥ 1"));
}

TEST(PipelineRules, AccountedSplit) {
  Scenario s = scenario(7, 4);
  s.parallelism.account_for_embedding_in_pipeline_split = true;
  s.parallelism.account_for_loss_in_pipeline_split = true;
  EXPECT_TRUE(Names(invalid(s), "num_layers", "7",
                    "7 + 2 = 9 must be divisible by pipeline_model_parallel_size = 4"));
  s.parallelism.account_for_loss_in_pipeline_split = false;  // 8 / 4
  EXPECT_TRUE(invalid(s).empty());
  // Megatron's arguments.py derives vpp from (num_layers + 1) / pp per virtual stage.
  s.parallelism.num_layers_per_virtual_pipeline_stage = 1;
  EXPECT_EQ(virtual_pipeline_size(s), 2);
  EXPECT_EQ(pipeline_partition(s).front(), (ChunkPlan{0, 0, true, false}));
  s.parallelism.num_layers_per_virtual_pipeline_stage.reset();
  s.parallelism.virtual_pipeline_model_parallel_size = 4;  // 2 a rank in 4 chunks
  EXPECT_TRUE(Names(invalid(s), "num_layers", "7",
                    "gives 2 layers per pipeline stage, which must be divisible by "
                    "virtual_pipeline_model_parallel_size = 4"));
}

TEST(PipelineRules, FlagsReachTheFields) {
  Scenario s = scenario(126, 16, 2);
  apply_overrides(s, {{"--account-for-embedding-in-pipeline-split", "true"},
                      {"--account-for-loss-in-pipeline-split", "true"},
                      {"--pipeline-model-parallel-layout", "none"},
                      {"--decoder-first-pipeline-num-layers", "none"}});
  EXPECT_TRUE(s.parallelism.account_for_embedding_in_pipeline_split);
  EXPECT_FALSE(s.parallelism.pipeline_model_parallel_layout.has_value());
  apply_overrides(s, {{"--decoder-last-pipeline-num-layers", "6"}});
  EXPECT_EQ(s.parallelism.decoder_last_pipeline_num_layers, 6);
  apply_overrides(s, {{"--pipeline-model-parallel-layout", "Et*3|(tt|)*29,m|L"}});
  EXPECT_EQ(s.parallelism.pipeline_model_parallel_layout, "Et*3|(tt|)*29,m|L");
}

}  // namespace
}  // namespace tandem
