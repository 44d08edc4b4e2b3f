// The FP8 fields under Megatron's argument names (dest names, so core/megatron_args.cpp
// finds --fp8-format, --fp8-recipe, …, --no-fp8-wgrad by them) and their cross-field rules,
// from megatron/training/arguments.py and Megatron-Core's fp8_utils.py (Aug 2026).
#include "core/fp8_fields.hpp"

#include "core/scenario_values.hpp"

namespace tandem::scenario_detail {
namespace {

struct Fp8FieldSpec {
  std::string name;
  std::string help;
  Rule rule{};
  std::string flag{};
  std::vector<std::string> aliases{};  // fp8_format: the flag's own name
};

// A descriptor for a member of TrainingConfig::fp8 (make_field of scenario_fields.cpp, one
// struct deeper).
template <class T>
FieldDef fp8_field(T Fp8Config::*member, Fp8FieldSpec spec) {
  FieldDef f;
  f.meta = {"training",     spec.name, spec.flag.empty() ? kebab_flag(spec.name) : spec.flag,
            type_name<T>(), spec.help, spec.aliases};
  f.rule = spec.rule;
  f.get = [=](const Scenario& s) { return encode(s.training.fp8.*member); };
  f.set = [=, rule = spec.rule](Scenario& s, const json& j) {
    T value{};
    if (auto err = decode(j, value); !err.empty()) return err;
    if (auto err = broken_rule(rule, encode(value)); !err.empty()) return err;
    s.training.fp8.*member = std::move(value);
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

std::vector<FieldDef> fp8_fields() {
  using F = Fp8Config;
  return {
      // Megatron stores --fp8-format in args.fp8; unset means no FP8.
      fp8_field(&F::format, {"fp8",
                             "FP8 linear layers: e4m3 (everywhere) or hybrid (E4M3 forward, "
                             "E5M2 gradients); empty: off",
                             Rule{.one_of = {"", "e4m3", "hybrid"}},
                             "--fp8-format",
                             {"fp8_format"}}),
      fp8_field(&F::recipe, {"fp8_recipe",
                             "FP8 scaling: delayed (amax history), tensorwise (current "
                             "scaling), blockwise (1x128 / 128x128 blocks), mxfp8 (32-element "
                             "blocks, E8M0 scales)",
                             Rule{.one_of = {"delayed", "tensorwise", "blockwise", "mxfp8"}}}),
      fp8_field(&F::margin, {"fp8_margin", "delayed scaling: scale = fp8_max / amax / 2^margin",
                             Rule{.min = 0.0}}),
      fp8_field(
          &F::amax_history_len,
          {"fp8_amax_history_len", "delayed scaling: amaxes kept per tensor", Rule{.min = 1.0}}),
      fp8_field(&F::amax_compute_algo,
                {"fp8_amax_compute_algo",
                 "delayed scaling: the amax the scale uses, the history's max or most_recent",
                 Rule{.one_of = {"max", "most_recent"}}}),
      fp8_field(&F::param_gather,
                {"fp8_param_gather",
                 "keep the linear layers' weights in FP8 and all-gather them in FP8 (with the "
                 "distributed optimizer)"}),
      fp8_field(&F::wgrad, {"fp8_wgrad",
                            "weight-gradient GEMMs in FP8 (Megatron's default); false: in the "
                            "compute dtype (--no-fp8-wgrad)"}),
      fp8_field(&F::first_last_layers_bf16,
                {"first_last_layers_bf16",
                 "the first num_layers_at_start_in_bf16 and last num_layers_at_end_in_bf16 "
                 "transformer layers stay in bf16"}),
      fp8_field(&F::num_layers_at_start_in_bf16,
                {"num_layers_at_start_in_bf16", "with first_last_layers_bf16: layers at the start",
                 Rule{.min = 0.0}}),
      fp8_field(&F::num_layers_at_end_in_bf16,
                {"num_layers_at_end_in_bf16", "with first_last_layers_bf16: layers at the end",
                 Rule{.min = 0.0}}),
  };
}

void check_fp8(const Scenario& s, Violations& out) {
  const auto& f = s.training.fp8;
  const auto& t = s.training;
  if (f.enabled() && !t.bf16 && !t.fp16)
    out.push_back({"fp8", f.format,
                   "needs bf16 or fp16 (Transformer Engine's FP8 GEMMs take and give 16-bit "
                   "activations): add --bf16"});
  if (f.param_gather && !f.enabled())
    out.push_back({"fp8_param_gather", "true", "needs fp8 (--fp8-format e4m3 or hybrid)"});
  if (f.param_gather && !s.parallelism.use_distributed_optimizer)
    out.push_back({"fp8_param_gather", "true",
                   "needs use_distributed_optimizer (Megatron: FP8 parameters are gathered from "
                   "the optimizer's shards)"});
  if (f.first_last_layers_bf16 && f.enabled()) {
    if (f.recipe == "delayed")
      out.push_back({"first_last_layers_bf16", "true",
                     "not with fp8_recipe delayed (Megatron-Core: delayed scaling does not "
                     "support first / last layers in bf16, its amax reduction would be wrong): "
                     "use tensorwise, blockwise or mxfp8"});
    const int layers = s.model.num_layers;
    if (f.num_layers_at_start_in_bf16 + f.num_layers_at_end_in_bf16 > layers)
      out.push_back({"num_layers_at_start_in_bf16", std::to_string(f.num_layers_at_start_in_bf16),
                     cat("plus num_layers_at_end_in_bf16 = ", f.num_layers_at_end_in_bf16,
                         " must be at most num_layers = ", layers)});
  }
  // Megatron-Core's MoE layers run their experts' GEMMs in FP8 with padding we do not model.
  if (f.enabled() && s.model.num_experts && *s.model.num_experts > 0)
    out.push_back({"fp8", f.format,
                   "not with num_experts: the training step runs FP8 in the dense layers' linear "
                   "layers only (not modelled: FP8 grouped expert GEMMs)"});
}

}  // namespace tandem::scenario_detail
