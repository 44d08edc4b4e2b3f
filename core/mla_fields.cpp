// The multi-latent attention fields under Megatron's argument names (dest names, so
// core/megatron_args.cpp finds --multi-latent-attention, --q-lora-rank, … by them) with
// Megatron's defaults, and the rules megatron/training/arguments.py and Megatron-Core's
// MLATransformerConfig / TransformerConfig check (NVIDIA/Megatron-LM d98e8a64, Aug 2026).
#include "core/mla_fields.hpp"

#include "core/scenario_values.hpp"

namespace tandem::scenario_detail {
namespace {

struct MlaFieldSpec {
  std::string name;
  std::string help;
  Rule rule{};
};

// A descriptor for a member of ModelConfig::mla (make_field of scenario_fields.cpp, one
// struct deeper).
template <class T>
FieldDef mla_field(T MlaConfig::*member, MlaFieldSpec spec) {
  FieldDef f;
  f.meta = {"model", spec.name, kebab_flag(spec.name), type_name<T>(), spec.help, {}};
  f.rule = spec.rule;
  f.get = [=](const Scenario& s) { return encode(s.model.mla.*member); };
  f.set = [=, rule = spec.rule](Scenario& s, const json& j) {
    T value{};
    if (auto err = decode(j, value); !err.empty()) return err;
    if (auto err = broken_rule(rule, encode(value)); !err.empty()) return err;
    s.model.mla.*member = std::move(value);
    return std::string();
  };
  f.set_text = [set = f.set](Scenario& s, std::string_view text) {
    auto j = text_to_json(text, static_cast<const T*>(nullptr));
    if (!j) return std::string(text_rule(static_cast<const T*>(nullptr)));
    return set(s, *j);
  };
  return f;
}

}  // namespace

std::vector<FieldDef> mla_fields() {
  using A = MlaConfig;
  const Rule positive{.min = 1.0};
  return {
      mla_field(&A::multi_latent_attention,
                {"multi_latent_attention",
                 "DeepSeek's multi-latent attention: queries through a latent of q_lora_rank, "
                 "keys and values through one of kv_lora_rank, decoupled RoPE"}),
      mla_field(&A::q_lora_rank, {"q_lora_rank",
                                  "MLA: the queries' latent width (absent: one projection "
                                  "from the hidden size, linear_q_proj)",
                                  positive}),
      mla_field(&A::kv_lora_rank,
                {"kv_lora_rank", "MLA: the keys' and values' shared latent width", positive}),
      mla_field(&A::qk_head_dim,
                {"qk_head_dim", "MLA: a query or key head's features without RoPE", positive}),
      mla_field(&A::qk_pos_emb_head_dim,
                {"qk_pos_emb_head_dim",
                 "MLA: a query head's and the shared positional key's RoPE features", positive}),
      mla_field(&A::v_head_dim, {"v_head_dim", "MLA: a value head's features", positive}),
      mla_field(&A::rope_type,
                {"rope_type",
                 "rope | yarn (absent: yarn with multi_latent_attention, else rope; YaRN is "
                 "modelled at rotary_scaling_factor ≤ 1, where it is RoPE)",
                 Rule{.one_of = {"rope", "yarn"}}}),
      mla_field(&A::rotary_scaling_factor,
                {"rotary_scaling_factor", "YaRN's scaling factor (1: none)",
                 Rule{.min = 0.0, .min_open = true}}),
      mla_field(&A::mscale, {"mscale", "YaRN's concentration factor (mscale)"}),
      mla_field(&A::mscale_all_dim, {"mscale_all_dim", "YaRN's mscale over all dimensions"}),
  };
}

void check_mla(const Scenario& s, Violations& out) {
  const MlaConfig& a = s.model.mla;
  if (a.rope_type == "yarn" && !a.enabled())
    out.push_back({"rope_type", "yarn",
                   "needs multi_latent_attention (Megatron: common attention only supports "
                   "rope_type \"rope\")"});
  if (!a.enabled()) return;
  if (s.model.group_query_attention)
    out.push_back({"group_query_attention", "true",
                   "not with multi_latent_attention (Megatron: group query attention is "
                   "mutually exclusive with multi latent attention)"});
  if (a.qk_pos_emb_head_dim % 2 != 0)
    out.push_back({"qk_pos_emb_head_dim", std::to_string(a.qk_pos_emb_head_dim),
                   "must be even: RoPE rotates its features in pairs"});
  if (a.yarn() && a.rotary_scaling_factor > 1.0)
    out.push_back({"rotary_scaling_factor", cat(a.rotary_scaling_factor),
                   "YaRN's frequency interpolation (rotary_scaling_factor > 1) is not modelled: "
                   "use 1 (YaRN is then RoPE exactly) or rope_type rope"});
  if (!a.yarn()) {
    const auto rotated = static_cast<int>(a.qk_pos_emb_head_dim * s.model.rotary_percent) / 2 * 2;
    if (rotated < 2)
      out.push_back({"rotary_percent", cat(s.model.rotary_percent),
                     cat("rotates no pair of the ", a.qk_pos_emb_head_dim,
                         " positional features (qk_pos_emb_head_dim)")});
  }
}

}  // namespace tandem::scenario_detail
