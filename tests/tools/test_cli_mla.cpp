// Multi-latent attention through the command line: the simulator runs scenarios/mla-small.json
// alone and under tensor (with sequence parallelism) and pipeline parallelism, reporting
// Megatron's MLA FLOPs worked out by hand; DeepSeek-V3 from Megatron's flags and from its
// scenario has the published 671B / 37B parameters; the layouts the step does not build are refused
// before any work, naming the field, the value and the rule.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/tools/run_tandem.hpp"

namespace tandem::testing {
namespace {

const std::string kMlaSmall = std::string(TANDEM_SOURCE_DIR) + "/scenarios/mla-small.json";

nlohmann::json simulate_json(const std::string& flags, const std::string& name) {
  const auto out = std::filesystem::path(::testing::TempDir()) / name;
  const auto r = run("simulate " + kMlaSmall + " --quiet --json " + out.string() + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
  std::ifstream in(out);
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// mla-small: L 4, h 256, 8 heads, q latent 128, kv latent 64, heads of 32 + 16 positional
// features and values of 32, SwiGLU ffn 640, V 50304 (no padding), s 128, B 8. Per token and
// layer Megatron counts the projections 128·(256 + 8·48 + 1) + 64·(256 + 8·64 + 1) + 256·16
// + 8·32·256 (3·2 times), and the causal core 3·2·(8·48/2 + 8·32/2) per token and key.
TEST(CliMla, SimulatesWithMegatronsMlaFlops) {
  const double L = 4, h = 256, V = 50304, s = 128, B = 8;
  const double projections =
      128.0 * (256 + 8 * 48 + 1) + 64.0 * (256 + 8 * 64 + 1) + 256.0 * 16 + 8.0 * 32 * 256;
  const double per_token = 6 * L * projections + 6 * h * 3 * 640 * L + 6 * h * V;
  const double core = 6 * (8.0 * 48 / 2 + 8.0 * 32 / 2) * s * s * L * B;
  const double log_flops = B * s * per_token + core;  // 97,144,799,232
  const auto j = simulate_json("", "tandem_mla_small.json");
  EXPECT_DOUBLE_EQ(j["megatron_log_flops_per_iteration"].get<double>(), log_flops);
  EXPECT_DOUBLE_EQ(j["model_flops_per_iteration"].get<double>(), log_flops + core);
  EXPECT_GT(j["iteration_seconds"].get<double>(), 0.0);
  // tp 2 with sequence parallelism and pp 2: the same model, split, its vocabulary padded to
  // a multiple of 128 · 2 (50432).
  const auto split = simulate_json(
      "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel "
      "--pipeline-model-parallel-size 2",
      "tandem_mla_small_split.json");
  EXPECT_DOUBLE_EQ(split["megatron_log_flops_per_iteration"].get<double>(),
                   log_flops + B * s * 6 * h * (50432 - V));
  EXPECT_GT(split["iteration_seconds"].get<double>(), 0.0);
}

TEST(CliMla, DeepSeekV3FromMegatronFlagsHasThePublishedSize) {
  const auto r = run(
      "scenario --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
      "--num-attention-heads 128 --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 "
      "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm "
      "--normalization RMSNorm --swiglu --disable-bias-linear "
      "--untie-embeddings-and-output-weights --position-embedding-type rope --vocab-size 129280 "
      "--num-experts 256 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
      "--moe-router-topk 8 --moe-layer-freq '([0]*3+[1]*58)' --world-size 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  // The sums of core/test_flops.cpp's hand derivation (671.03B, 37.55B).
  EXPECT_DOUBLE_EQ(j["derived"]["parameters"].get<double>(), 671026404352.0);
  EXPECT_DOUBLE_EQ(j["derived"]["active_parameters"].get<double>(), 37552282624.0);
}

// scenarios/deepseek-v3-1024gpu.json: the same 671.03B / 37.55B as the flags above, and the
// MTP module apart: per depth enorm, hnorm and its final norm (3h), eh_proj 2h², and an MoE
// layer with MLA — router h·256, 256 experts and the shared one of 3·h·2048 each, the MLA
// projections h·1536 + 1536·128·192 + h·(512 + 64) + 512·128·256 + 128·128·h with the two
// latent norms (1536 + 512) and the layer's two norms (2h): 11,610,067,968 (DeepSeek's
// "14B" also counts the module's copies of the embedding and output layer, 2·129280·h).
TEST(CliMla, DeepSeekV3ScenarioHasThePublishedSizeAndItsMtpModuleApart) {
  const auto r =
      run("scenario " + std::string(TANDEM_SOURCE_DIR) + "/scenarios/deepseek-v3-1024gpu.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_DOUBLE_EQ(j["derived"]["parameters"].get<double>(), 671026404352.0);
  EXPECT_DOUBLE_EQ(j["derived"]["active_parameters"].get<double>(), 37552282624.0);
  const double h = 7168;
  const double attention = h * 1536 + 1536.0 * 128 * 192 + h * (512 + 64) + 512.0 * 128 * 256 +
                           128.0 * 128 * h + 1536 + 512;
  const double moe_layer = attention + 2 * h + h * 256 + 257 * 3 * h * 2048;
  EXPECT_DOUBLE_EQ(j["derived"]["mtp_parameters"].get<double>(), 3 * h + 2 * h * h + moe_layer);
  EXPECT_DOUBLE_EQ(j["derived"]["mtp_parameters"].get<double>(), 11610067968.0);
}

TEST(CliMla, LayoutsTheStepDoesNotBuildAreRefusedBeforeWork) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      // Megatron's own layers without --use-flash-attn run unfused attention.
      {"--use-flash-attn false --transformer-impl local",
       {"multi_latent_attention = true", "use_flash_attn"}},
      {"--world-size 2 --context-parallel-size 2", {"context_parallel_size = 2", "not built"}},
      {"--bf16 --fp8-format hybrid", {"fp8 = hybrid", "not built in FP8"}},
      // Megatron's rules: not with grouped-query attention; YaRN's interpolation.
      {"--group-query-attention --num-query-groups 2",
       {"group_query_attention = true", "mutually exclusive"}},
      {"--rope-type yarn --rotary-scaling-factor 40",
       {"rotary_scaling_factor = 40", "not modelled"}},
  };
  for (const auto& [flags, expect] : cases) {
    const auto r = run("simulate " + kMlaSmall + " --quiet " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    for (const auto& text : expect)
      EXPECT_NE(r.output.find(text), std::string::npos) << flags << "\n" << r.output;
  }
}

}  // namespace
}  // namespace tandem::testing
