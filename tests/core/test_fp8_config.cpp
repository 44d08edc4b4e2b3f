// The FP8 fields (core/fp8_fields.cpp): Megatron's flags set them, JSON round-trips them,
// and each cross-field rule is refused with the field named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/megatron_args.hpp"
#include "core/scenario.hpp"

namespace tandem {
namespace {

std::vector<Violation> fp8_violations(const Scenario& s) {
  try {
    validate(s);
  } catch (const ConfigError& e) {
    return e.violations();
  }
  return {};
}

bool fp8_refused_for(const std::vector<Violation>& vs, const std::string& field,
                     const std::string& words) {
  for (const auto& v : vs)
    if (v.field == field && v.rule.find(words) != std::string::npos) return true;
  return false;
}

Scenario fp8_scenario() {
  Scenario s = default_scenario();
  s.training.bf16 = true;
  s.training.fp8.format = "hybrid";
  return s;
}

TEST(Fp8Config, MegatronFlagsSetTheFields) {
  const auto cl = parse_megatron_args(
      {"--fp8-format", "e4m3", "--fp8-recipe", "tensorwise", "--fp8-margin", "1",
       "--fp8-amax-history-len", "16", "--fp8-amax-compute-algo", "max", "--fp8-param-gather",
       "--no-fp8-wgrad", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "2",
       "--num-layers-at-end-in-bf16", "3"});
  EXPECT_TRUE(cl.not_modelled.empty());
  Scenario s = default_scenario();
  apply_overrides(s, cl.overrides);
  const auto& f = s.training.fp8;
  EXPECT_EQ(f.format, "e4m3");
  EXPECT_EQ(f.recipe, "tensorwise");
  EXPECT_EQ(f.margin, 1);
  EXPECT_EQ(f.amax_history_len, 16);
  EXPECT_EQ(f.amax_compute_algo, "max");
  EXPECT_TRUE(f.param_gather);
  EXPECT_FALSE(f.wgrad);
  EXPECT_TRUE(f.first_last_layers_bf16);
  EXPECT_EQ(f.num_layers_at_start_in_bf16, 2);
  EXPECT_EQ(f.num_layers_at_end_in_bf16, 3);
  // The JSON form keeps them under the training section and reads back the same.
  const auto j = to_json(s);
  EXPECT_EQ(j["training"]["fp8_recipe"], "tensorwise");
  EXPECT_EQ(parse_scenario(j).training.fp8, f);
}

TEST(Fp8Config, FieldRulesNameTheValue) {
  Scenario s = default_scenario();
  EXPECT_THROW(apply_overrides(s, {{"fp8", "e5m2"}}), ConfigError);
  EXPECT_THROW(apply_overrides(s, {{"fp8_recipe", "nvfp4"}}), ConfigError);
  EXPECT_THROW(apply_overrides(s, {{"fp8_amax_history_len", "0"}}), ConfigError);
  EXPECT_THROW(apply_overrides(s, {{"fp8_amax_compute_algo", "mean"}}), ConfigError);
  EXPECT_THROW(apply_overrides(s, {{"fp8_margin", "-1"}}), ConfigError);
}

TEST(Fp8Config, CrossFieldRules) {
  EXPECT_TRUE(fp8_violations(fp8_scenario()).empty());
  Scenario no16 = fp8_scenario();
  no16.training.bf16 = false;
  EXPECT_TRUE(fp8_refused_for(fp8_violations(no16), "fp8", "needs bf16 or fp16"));

  Scenario gather = fp8_scenario();
  gather.training.fp8.param_gather = true;
  gather.parallelism.use_distributed_optimizer = false;
  EXPECT_TRUE(
      fp8_refused_for(fp8_violations(gather), "fp8_param_gather", "use_distributed_optimizer"));
  gather.parallelism.use_distributed_optimizer = true;
  EXPECT_TRUE(fp8_violations(gather).empty());
  gather.training.fp8.format = "";
  EXPECT_TRUE(fp8_refused_for(fp8_violations(gather), "fp8_param_gather", "needs fp8"));

  Scenario ends = fp8_scenario();
  ends.training.fp8.first_last_layers_bf16 = true;
  EXPECT_TRUE(fp8_refused_for(fp8_violations(ends), "first_last_layers_bf16", "delayed"));
  ends.training.fp8.recipe = "tensorwise";
  EXPECT_TRUE(fp8_violations(ends).empty());
  ends.training.fp8.num_layers_at_start_in_bf16 = ends.model.num_layers;
  EXPECT_TRUE(
      fp8_refused_for(fp8_violations(ends), "num_layers_at_start_in_bf16", "at most num_layers"));
}

TEST(Fp8Config, LayersInBf16) {
  Fp8Config f{.format = "hybrid", .recipe = "tensorwise"};
  f.first_last_layers_bf16 = true;
  f.num_layers_at_start_in_bf16 = 1;
  f.num_layers_at_end_in_bf16 = 2;
  std::vector<bool> in_fp8;
  for (int l = 0; l < 6; ++l) in_fp8.push_back(f.layer_in_fp8(l, 6));
  EXPECT_EQ(in_fp8, (std::vector<bool>{false, true, true, true, false, false}));
  f.first_last_layers_bf16 = false;
  EXPECT_TRUE(f.layer_in_fp8(0, 6));
  EXPECT_FALSE(Fp8Config{}.layer_in_fp8(3, 6));
}

}  // namespace
}  // namespace tandem
