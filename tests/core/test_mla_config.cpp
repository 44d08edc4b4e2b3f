// The multi-latent attention fields (core/mla_fields.cpp): Megatron's defaults, JSON
// round-trips, and each rule refused with the field, the value and the rule named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace tandem {
namespace {

std::vector<Violation> mla_violations(const Scenario& s) {
  try {
    validate(s);
  } catch (const ConfigError& e) {
    return e.violations();
  }
  return {};
}

bool mla_refused_for(const std::vector<Violation>& vs, const std::string& field,
                     const std::string& value, const std::string& words) {
  for (const auto& v : vs)
    if (v.field == field && v.value == value && v.rule.find(words) != std::string::npos)
      return true;
  return false;
}

Scenario mla_scenario() {
  Scenario s = default_scenario();
  s.model.mla.multi_latent_attention = true;
  return s;
}

TEST(MlaConfig, MegatronDefaultsAndJsonRoundTrip) {
  const MlaConfig a;
  EXPECT_FALSE(a.enabled());
  EXPECT_FALSE(a.q_lora_rank.has_value());  // None: linear_q_proj
  EXPECT_EQ(a.kv_lora_rank, 32);
  EXPECT_EQ(a.qk_head_dim, 128);
  EXPECT_EQ(a.qk_pos_emb_head_dim, 64);
  EXPECT_EQ(a.v_head_dim, 128);
  EXPECT_TRUE(a.yarn());  // MLATransformerConfig's default rope_type
  Scenario s = mla_scenario();
  s.model.mla.q_lora_rank = 96;
  s.model.mla.kv_lora_rank = 48;
  s.model.mla.rope_type = "rope";
  EXPECT_TRUE(mla_violations(s).empty());
  const auto j = to_json(s);
  EXPECT_EQ(j["model"]["q_lora_rank"], 96);
  EXPECT_EQ(j["model"]["multi_latent_attention"], true);
  EXPECT_EQ(parse_scenario(j).model.mla, s.model.mla);
  Scenario flags = default_scenario();
  apply_overrides(flags, {{"multi_latent_attention", "true"},
                          {"q_lora_rank", "96"},
                          {"kv_lora_rank", "48"},
                          {"rope_type", "rope"}});
  EXPECT_EQ(flags.model.mla, s.model.mla);
}

TEST(MlaConfig, RulesNameFieldValueAndRule) {
  Scenario s = mla_scenario();
  s.model.group_query_attention = true;
  s.model.num_query_groups = 4;
  s.model.mla.qk_pos_emb_head_dim = 63;
  s.model.mla.rotary_scaling_factor = 40;
  auto vs = mla_violations(s);
  EXPECT_TRUE(mla_refused_for(vs, "group_query_attention", "true", "mutually exclusive"))
      << vs.size();
  EXPECT_TRUE(mla_refused_for(vs, "qk_pos_emb_head_dim", "63", "even"));
  EXPECT_TRUE(mla_refused_for(vs, "rotary_scaling_factor", "40", "not modelled"));
  // Under rope_type rope the scaling factor is Megatron's RotaryEmbedding's: none.
  s = mla_scenario();
  s.model.mla.rope_type = "rope";
  s.model.mla.rotary_scaling_factor = 40;
  EXPECT_TRUE(mla_violations(s).empty());
  // rope with a rotary_percent that leaves no pair of the positional features.
  s.model.mla.qk_pos_emb_head_dim = 2;
  s.model.rotary_percent = 0.5;
  EXPECT_TRUE(mla_refused_for(mla_violations(s), "rotary_percent", "0.5", "no pair"));
  // YaRN is MLA's alone (Megatron's assertion for common attention).
  s = default_scenario();
  s.model.mla.rope_type = "yarn";
  EXPECT_TRUE(mla_refused_for(mla_violations(s), "rope_type", "yarn", "multi_latent_attention"));
  // Widths are positive, refused as the field's own rule.
  Scenario bad = mla_scenario();
  EXPECT_THROW(apply_overrides(bad, {{"kv_lora_rank", "0"}}), ConfigError);
  EXPECT_THROW(apply_overrides(bad, {{"q_lora_rank", "-3"}}), ConfigError);
  EXPECT_THROW(apply_overrides(bad, {{"rope_type", "ntk"}}), ConfigError);
}

}  // namespace
}  // namespace tandem
