// Scenario input: the field registry, JSON decoding, --flag overrides and Megatron's
// argument checks. One descriptor per field (name, section, flag, help, the member it
// reads and writes, and the range its value must lie in) drives JSON parsing, overrides,
// help text and unknown-key suggestions, so the four cannot disagree. Every reader
// collects all broken rules and throws them together as one ConfigError, so a user fixes
// a scenario in one pass instead of one error per run.
#include "core/scenario.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "core/error.hpp"

namespace tandem {
namespace {

using nlohmann::json;
using Violations = std::vector<Violation>;

template <class... A>
std::string cat(const A&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// A value for an error message, cut to one line: as the user wrote it in JSON (strings
// quoted, so "24" reads as the string it is), or unquoted for values tandem holds.
std::string one_line(std::string text) {
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}
std::string as_written(const json& v) {
  return one_line(v.dump());
}
std::string shown(const json& v) {
  return one_line(v.is_string() ? v.get<std::string>() : v.dump());
}

// ---------------------------------------------------------------------------------------
// Per-field rules: what a value must satisfy on its own. Cross-field rules live in
// validate(). A rule sees the value as JSON so one checker serves every C++ type.

struct Rule {
  std::optional<double> min{};  // value ≥ min (value > min when min_open)
  bool min_open = false;
  std::optional<double> max_open{};   // value < max_open
  std::vector<std::string> one_of{};  // allowed strings
  std::string (*custom)(const json&) = nullptr;
};

std::string number_text(double x) {
  if (x == std::trunc(x) && std::abs(x) < 1e15) return std::to_string(std::llround(x));
  return cat(x);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : std::string(sep)) + item;
  return out;
}

std::string broken_number_rule(const Rule& r, double x) {
  const bool low = r.min && (r.min_open ? x <= *r.min : x < *r.min);
  const bool high = r.max_open && x >= *r.max_open;
  if (!low && !high) return "";
  if (r.min && r.max_open)
    return cat("must lie in ", r.min_open ? "(" : "[", number_text(*r.min), ", ",
               number_text(*r.max_open), ")");
  if (r.min) return cat("must be ", r.min_open ? "> " : "≥ ", number_text(*r.min));
  return cat("must be < ", number_text(*r.max_open));
}

// "" when `v` satisfies `r`, else the rule it breaks. Unset optionals (null) always pass.
std::string broken_rule(const Rule& r, const json& v) {
  if (v.is_null()) return "";
  if (r.custom) return r.custom(v);
  if (v.is_number()) return broken_number_rule(r, v.get<double>());
  if (v.is_string() && !r.one_of.empty() &&
      std::find(r.one_of.begin(), r.one_of.end(), v.get<std::string>()) == r.one_of.end())
    return "must be one of " + join(r.one_of, " | ");
  return "";
}

Rule at_least(double min) {
  return Rule{.min = min};
}
Rule positive() {
  return at_least(1);
}
Rule non_negative() {
  return at_least(0);
}
Rule above(double min) {
  return Rule{.min = min, .min_open = true};
}
Rule unit_interval() {
  return Rule{.min = 0.0, .max_open = 1.0};
}
Rule choices(std::vector<std::string> allowed) {
  return Rule{.one_of = std::move(allowed)};
}

// Megatron's --rampup-batch-size <start> <increment> <samples>.
std::string broken_rampup(const json& v) {
  if (v.empty()) return "";
  if (v.size() != 3) return "must be empty or exactly 3 integers: start increment samples";
  if (v[0].get<std::int64_t>() < 1) return "start batch size must be ≥ 1";
  if (v[1].get<std::int64_t>() < 1) return "batch size increment must be ≥ 1";
  // Megatron divides by the samples per increment: a zero-sample ramp crashes it.
  if (v[2].get<std::int64_t>() < 1) return "ramp-up samples must be ≥ 1";
  return "";
}

// ---------------------------------------------------------------------------------------
// Decoding a value, from JSON or from flag text, into each C++ type a field may have.
// Each returns "" on success or the type rule the input broke.

std::string decode_integer(const json& j, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(kMax))
    return "is too large";
  if (j.is_number_integer()) {
    out = j.get<std::int64_t>();
  } else if (j.is_number_float()) {
    // 4e7 is an integer written in exponent notation; 2.5 is not an integer.
    const double d = j.get<double>();
    if (d != std::trunc(d) || std::abs(d) > 9e15) return "must be an integer";
    out = static_cast<std::int64_t>(d);
  } else {
    return cat("must be an integer, not a JSON ", j.type_name());
  }
  if (out < lo || out > hi) return "is out of range for a 32-bit integer";
  return "";
}

std::string decode(const json& j, std::int64_t& out) {
  return decode_integer(j, std::numeric_limits<std::int64_t>::min(),
                        std::numeric_limits<std::int64_t>::max(), out);
}

std::string decode(const json& j, int& out) {
  std::int64_t wide = 0;
  auto err =
      decode_integer(j, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), wide);
  if (err.empty()) out = static_cast<int>(wide);
  return err;
}

std::string decode(const json& j, double& out) {
  if (!j.is_number()) return cat("must be a number, not a JSON ", j.type_name());
  out = j.get<double>();
  return "";
}

std::string decode(const json& j, bool& out) {
  if (!j.is_boolean()) return cat("must be true or false, not a JSON ", j.type_name());
  out = j.get<bool>();
  return "";
}

std::string decode(const json& j, std::string& out) {
  if (!j.is_string()) return cat("must be a string, not a JSON ", j.type_name());
  out = j.get<std::string>();
  return "";
}

template <class T>
std::string decode(const json& j, std::optional<T>& out) {
  if (j.is_null()) {
    out.reset();
    return "";
  }
  T value{};
  auto err = decode(j, value);
  if (err.empty()) out = value;
  return err;
}

std::string decode(const json& j, std::vector<std::int64_t>& out) {
  if (j.is_null()) {
    out.clear();
    return "";
  }
  if (!j.is_array()) return cat("must be a list of integers, not a JSON ", j.type_name());
  std::vector<std::int64_t> items;
  for (const auto& item : j) {
    std::int64_t x = 0;
    if (!decode(item, x).empty()) return "must be a list of integers";
    items.push_back(x);
  }
  out = std::move(items);
  return "";
}

// Flag text → the JSON value it denotes for a field of type T; nullopt when it denotes
// none. The JSON then goes through decode(), so flags and files obey the same rules.
std::string_view trimmed(std::string_view t) {
  const auto first = t.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return t.substr(first, t.find_last_not_of(" \t\r\n") - first + 1);
}

std::optional<json> number_from_text(std::string_view text) {
  text = trimmed(text);
  const char* end = text.data() + text.size();
  std::int64_t i = 0;
  auto [pi, ei] = std::from_chars(text.data(), end, i);
  if (ei == std::errc() && pi == end && !text.empty()) return json(i);
  double d = 0;
  auto [pd, ed] = std::from_chars(text.data(), end, d);
  if (ed == std::errc() && pd == end && !text.empty() && std::isfinite(d)) return json(d);
  return std::nullopt;
}

std::string lower(std::string_view t) {
  std::string out(t);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <class T>
std::optional<json> text_to_json(std::string_view text, const T*) {
  if constexpr (std::is_same_v<T, bool>) {
    const std::string t = lower(trimmed(text));
    if (t == "true" || t == "1") return json(true);
    if (t == "false" || t == "0") return json(false);
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return json(std::string(text));
  } else {
    return number_from_text(text);
  }
}

template <class T>
std::optional<json> text_to_json(std::string_view text, const std::optional<T>*) {
  const std::string t = lower(trimmed(text));
  if (t.empty() || t == "none" || t == "null") return json(nullptr);
  return text_to_json(text, static_cast<const T*>(nullptr));
}

// "16,16,1000", "16 16 1000" (as Megatron's nargs flags are written), or "" for none.
std::optional<json> text_to_json(std::string_view text, const std::vector<std::int64_t>*) {
  json items = json::array();
  std::string token;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) {
    std::istringstream parts(word);
    while (std::getline(parts, token, ',')) {
      if (token.empty()) continue;
      auto n = number_from_text(token);
      if (!n) return std::nullopt;
      items.push_back(*n);
    }
  }
  return items;
}

template <class T>
const char* text_rule(const T*) {
  if constexpr (std::is_same_v<T, bool>) return "must be true, false, 1 or 0";
  if constexpr (std::is_same_v<T, double>) return "must be a number";
  return "must be an integer";
}
template <class T>
const char* text_rule(const std::optional<T>*) {
  return text_rule(static_cast<const T*>(nullptr));
}
const char* text_rule(const std::vector<std::int64_t>*) {
  return "must be a list of integers, e.g. \"16,16,1000\" or \"16 16 1000\"";
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, double>) return "float";
  if constexpr (std::is_same_v<T, std::string>) return "string";
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "int list";
  return "int";
}
template <class T>
struct Unoptional {
  using type = T;
};
template <class T>
struct Unoptional<std::optional<T>> {
  using type = T;
};

json encode(const auto& v) {
  return json(v);
}
template <class T>
json encode(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// ---------------------------------------------------------------------------------------
// The registry.

struct FieldDef {
  ScenarioField meta;
  Rule rule;
  std::function<json(const Scenario&)> get;
  // Each returns "" when the value was stored, else the rule it broke (nothing stored).
  std::function<std::string(Scenario&, const json&)> set;
  std::function<std::string(Scenario&, std::string_view)> set_text;
};

template <class Sec>
constexpr const char* section_name();
template <>
constexpr const char* section_name<ModelConfig>() {
  return "model";
}
template <>
constexpr const char* section_name<ParallelismConfig>() {
  return "parallelism";
}
template <>
constexpr const char* section_name<TrainingConfig>() {
  return "training";
}
template <>
constexpr const char* section_name<ClusterConfig>() {
  return "cluster";
}

constexpr std::array<std::string_view, 4> kSections = {"model", "parallelism", "training",
                                                       "cluster"};

std::string kebab_flag(std::string_view name) {
  std::string flag = "--" + std::string(name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

struct FieldSpec {
  std::string name;
  std::string help;
  Rule rule{};
  std::vector<std::string> aliases{};
  std::string flag{};  // Megatron's flag when it is not the kebab-case name
};

// One descriptor from pointers to the section and the member: the type, section name and
// both directions of conversion all follow from the two pointers.
template <class Sec, class T>
FieldDef make_field(Sec Scenario::*section, T Sec::*member, FieldSpec spec) {
  FieldDef f;
  f.meta = {section_name<Sec>(),
            spec.name,
            spec.flag.empty() ? kebab_flag(spec.name) : spec.flag,
            type_name<typename Unoptional<T>::type>(),
            spec.help,
            spec.aliases};
  f.rule = spec.rule;
  f.get = [=](const Scenario& s) { return encode(s.*section.*member); };
  f.set = [=, rule = spec.rule](Scenario& s, const json& j) {
    T value{};
    if (auto err = decode(j, value); !err.empty()) return err;
    if (auto err = broken_rule(rule, encode(value)); !err.empty()) return err;
    s.*section.*member = std::move(value);
    return std::string();
  };
  f.set_text = [set = f.set](Scenario& s, std::string_view text) {
    auto j = text_to_json(text, static_cast<const T*>(nullptr));
    if (!j) return std::string(text_rule(static_cast<const T*>(nullptr)));
    return set(s, *j);
  };
  return f;
}

std::vector<FieldDef> model_fields() {
  using M = ModelConfig;
  constexpr auto m = &Scenario::model;
  return {
      make_field(m, &M::num_layers, {"num_layers", "number of transformer layers", positive()}),
      make_field(m, &M::hidden_size, {"hidden_size", "hidden size h", positive()}),
      make_field(m, &M::num_attention_heads,
                 {"num_attention_heads", "number of attention heads", positive()}),
      make_field(m, &M::ffn_hidden_size,
                 {"ffn_hidden_size", "MLP hidden width (default 4 × hidden_size)", positive()}),
      make_field(
          m, &M::kv_channels,
          {"kv_channels", "per-head projection width (default hidden_size / heads)", positive()}),
      make_field(m, &M::seq_length, {"seq_length", "sequence length in tokens", positive()}),
      make_field(
          m, &M::max_position_embeddings,
          {"max_position_embeddings", "position table size (default seq_length)", positive()}),
      make_field(m, &M::vocab_size, {"vocab_size", "tokenizer vocabulary size", positive()}),
      make_field(
          m, &M::make_vocab_size_divisible_by,
          {"make_vocab_size_divisible_by",
           "pad the vocabulary to a multiple of this × tensor_model_parallel_size", positive()}),
  };
}

std::vector<FieldDef> parallelism_fields() {
  using P = ParallelismConfig;
  constexpr auto p = &Scenario::parallelism;
  return {
      make_field(p, &P::tensor_model_parallel_size,
                 {"tensor_model_parallel_size", "tensor-parallel size tp", positive()}),
      make_field(p, &P::pipeline_model_parallel_size,
                 {"pipeline_model_parallel_size", "pipeline-parallel size pp", positive()}),
      make_field(p, &P::context_parallel_size,
                 {"context_parallel_size", "context-parallel size cp", positive()}),
      make_field(
          p, &P::expert_model_parallel_size,
          {"expert_model_parallel_size", "expert-parallel size ep (divides dp)", positive()}),
      make_field(p, &P::num_layers_per_virtual_pipeline_stage,
                 {"num_layers_per_virtual_pipeline_stage",
                  "layers per virtual pipeline stage (interleaved schedule)", positive()}),
      make_field(p, &P::virtual_pipeline_model_parallel_size,
                 {"virtual_pipeline_model_parallel_size",
                  "model chunks per pipeline stage vpp (interleaved schedule)",
                  positive(),
                  {"num_virtual_stages_per_pipeline_rank"},
                  "--num-virtual-stages-per-pipeline-rank"}),
      make_field(p, &P::microbatch_group_size_per_vp_stage,
                 {"microbatch_group_size_per_vp_stage",
                  "contiguous microbatches per virtual stage (default pp)",
                  positive(),
                  {"microbatch_group_size_per_virtual_pipeline_stage"},
                  "--microbatch-group-size-per-virtual-pipeline-stage"}),
      make_field(p, &P::pipeline_schedule,
                 {"pipeline_schedule", "auto | none | gpipe | 1f1b | interleaved",
                  choices({"auto", "none", "gpipe", "1f1b", "interleaved"})}),
      make_field(p, &P::order,
                 {"order", "rank-generator order, tp fastest varying (e.g. tp-cp-ep-dp-pp)"}),
      make_field(p, &P::sequence_parallel,
                 {"sequence_parallel", "shard layer norm and dropout along the sequence"}),
      make_field(p, &P::use_distributed_optimizer,
                 {"use_distributed_optimizer", "shard optimizer state across dp"}),
      make_field(p, &P::overlap_grad_reduce,
                 {"overlap_grad_reduce", "overlap dp gradient reduction with backward"}),
      make_field(p, &P::overlap_param_gather,
                 {"overlap_param_gather", "overlap parameter all-gather with forward"}),
      make_field(p, &P::ddp_bucket_size,
                 {"ddp_bucket_size", "elements per dp gradient bucket", positive()}),
      make_field(p, &P::variable_seq_lengths,
                 {"variable_seq_lengths",
                  "send each pipeline tensor's shape before it (shapes may vary per microbatch)"}),
      make_field(p, &P::scatter_gather_tensors_in_pipeline,
                 {"scatter_gather_tensors_in_pipeline",
                  "without sequence parallelism, send 1/tp of each pipeline tensor per tp rank "
                  "and all-gather it over tp on arrival"}),
  };
}

std::vector<FieldDef> training_fields_batch() {
  using T = TrainingConfig;
  constexpr auto t = &Scenario::training;
  return {
      make_field(t, &T::micro_batch_size,
                 {"micro_batch_size", "samples per microbatch per dp rank", positive()}),
      make_field(t, &T::global_batch_size,
                 {"global_batch_size", "samples per iteration over all dp ranks", positive()}),
      make_field(t, &T::rampup_batch_size,
                 {"rampup_batch_size", "start increment samples: batch-size ramp-up",
                  Rule{.custom = broken_rampup}}),
      make_field(t, &T::train_iters, {"train_iters", "iterations to train", positive()}),
      make_field(t, &T::lr, {"lr", "peak learning rate", non_negative()}),
      make_field(t, &T::min_lr, {"min_lr", "learning rate floor of the decay", non_negative()}),
      make_field(t, &T::lr_warmup_iters,
                 {"lr_warmup_iters", "iterations of linear warmup", non_negative()}),
      make_field(t, &T::lr_decay_iters,
                 {"lr_decay_iters", "iterations to decay over (default train_iters)", positive()}),
      make_field(t, &T::lr_decay_style,
                 {"lr_decay_style", "constant | linear | cosine",
                  choices({"constant", "linear", "cosine"})}),
  };
}

std::vector<FieldDef> training_fields_rest() {
  using T = TrainingConfig;
  constexpr auto t = &Scenario::training;
  return {
      make_field(t, &T::weight_decay,
                 {"weight_decay", "decoupled (AdamW) weight decay", non_negative()}),
      make_field(t, &T::clip_grad,
                 {"clip_grad", "gradient clipping by global norm (0: off)", non_negative()}),
      make_field(t, &T::adam_beta1, {"adam_beta1", "Adam beta1", unit_interval()}),
      make_field(t, &T::adam_beta2, {"adam_beta2", "Adam beta2", unit_interval()}),
      make_field(t, &T::adam_eps, {"adam_eps", "Adam epsilon", above(0)}),
      make_field(t, &T::seed, {"seed", "random seed", non_negative()}),
      make_field(t, &T::recompute_granularity,
                 {"recompute_granularity", "activation recomputation: none | selective | full",
                  choices({"none", "selective", "full"})}),
      make_field(t, &T::recompute_method,
                 {"recompute_method", "uniform | block (with full recomputation)",
                  choices({"uniform", "block"})}),
      make_field(t, &T::recompute_num_layers,
                 {"recompute_num_layers",
                  "full: layers per checkpointed group (uniform) or recomputed per stage (block)",
                  positive()}),
      make_field(t, &T::log_interval, {"log_interval", "iterations per log line", positive()}),
      make_field(t, &T::eval_interval,
                 {"eval_interval", "iterations between evaluations", positive()}),
      make_field(t, &T::eval_iters, {"eval_iters", "iterations per evaluation", non_negative()}),
      make_field(t, &T::save_interval,
                 {"save_interval", "iterations between checkpoints (0: none)", non_negative()}),
      make_field(t, &T::bf16, {"bf16", "bf16 mixed precision"}),
      make_field(t, &T::fp16, {"fp16", "fp16 mixed precision"}),
  };
}

std::vector<FieldDef> cluster_fields() {
  using C = ClusterConfig;
  constexpr auto c = &Scenario::cluster;
  return {
      make_field(c, &C::world_size, {"world_size", "number of ranks (GPUs)", positive()}),
      make_field(c, &C::gpus_per_node, {"gpus_per_node", "ranks per node", positive()}),
      make_field(c, &C::topology,
                 {"topology", "topology preset for the simulator, e.g. dgx-a100-80g"}),
  };
}

const std::vector<FieldDef>& registry() {
  static const std::vector<FieldDef> fields = [] {
    std::vector<FieldDef> all;
    for (auto part : {model_fields(), parallelism_fields(), training_fields_batch(),
                      training_fields_rest(), cluster_fields()})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  }();
  return fields;
}

// The field named `name` (snake case, canonical name or alias), or nullptr.
const FieldDef* find_field(std::string_view name) {
  for (const auto& f : registry()) {
    if (f.meta.name == name) return &f;
    for (const auto& alias : f.meta.aliases)
      if (alias == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> all_field_names() {
  std::vector<std::string> names;
  for (const auto& f : registry()) {
    names.push_back(f.meta.name);
    names.insert(names.end(), f.meta.aliases.begin(), f.meta.aliases.end());
  }
  return names;
}

// ---------------------------------------------------------------------------------------
// JSON reading.

constexpr std::array<std::pair<std::string_view, std::string Scenario::*>, 3> kTextKeys = {{
    {"name", &Scenario::name},
    {"description", &Scenario::description},
    {"source", &Scenario::source},
}};

// "unknown key", with the closest known key (and its section when it is not `section`).
std::string suggestion_rule(std::string_view key, std::string_view section,
                            std::vector<std::string> extra = {}) {
  auto known = all_field_names();
  known.insert(known.end(), extra.begin(), extra.end());
  const std::string best = closest_match(key, known);
  if (best.empty()) return "unknown key";
  const FieldDef* f = find_field(best);
  const bool elsewhere = f && f->meta.section != section;
  return cat("unknown key; did you mean \"", best, "\"",
             elsewhere ? cat(" (in section \"", f->meta.section, "\")") : "", "?");
}

Violation unknown_section_key(std::string_view section, const std::string& key, const json& value) {
  const std::string field = cat(section, ".", key);
  if (const FieldDef* f = find_field(key))
    return {field, as_written(value),
            cat("belongs in section \"", f->meta.section, "\", not \"", section, "\"")};
  return {field, as_written(value), suggestion_rule(key, section)};
}

Violation unknown_top_level_key(const std::string& key, const json& value) {
  if (const FieldDef* f = find_field(key))
    return {key, as_written(value),
            cat("is not a top-level key; it belongs in section \"", f->meta.section, "\": {\"",
                f->meta.section, "\": {\"", key, "\": ...}}")};
  std::vector<std::string> top = {"name", "description", "source"};
  top.insert(top.end(), kSections.begin(), kSections.end());
  return {key, as_written(value), suggestion_rule(key, "", top)};
}

void read_section(Scenario& s, std::string_view section, const json& body, Violations& out) {
  if (!body.is_object()) {
    out.push_back({std::string(section), as_written(body),
                   cat("must be a JSON object of field: value, not a JSON ", body.type_name())});
    return;
  }
  std::map<std::string, std::string> seen;  // canonical name → key as written
  for (const auto& [key, value] : body.items()) {
    const FieldDef* f = find_field(key);
    if (!f || f->meta.section != section) {
      out.push_back(unknown_section_key(section, key, value));
      continue;
    }
    const std::string field = cat(section, ".", key);
    if (auto [it, fresh] = seen.emplace(f->meta.name, key); !fresh) {
      out.push_back(
          {field, as_written(value), cat("is given twice (also as \"", it->second, "\")")});
      continue;
    }
    if (auto rule = f->set(s, value); !rule.empty())
      out.push_back({field, as_written(value), rule});
  }
}

void read_top_level(Scenario& s, const std::string& key, const json& value, Violations& out) {
  for (const auto& [text_key, member] : kTextKeys) {
    if (key != text_key) continue;
    if (value.is_string())
      s.*member = value.get<std::string>();
    else
      out.push_back(
          {key, as_written(value), cat("must be a string, not a JSON ", value.type_name())});
    return;
  }
  if (std::find(kSections.begin(), kSections.end(), key) != kSections.end())
    read_section(s, key, value, out);
  else
    out.push_back(unknown_top_level_key(key, value));
}

// Line and column (1-based) of byte offset `byte` (1-based, as nlohmann reports it).
std::string line_column(const std::string& text, std::size_t byte) {
  const std::size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < end; ++i) {
    column = text[i] == '\n' ? 1 : column + 1;
    if (text[i] == '\n') ++line;
  }
  return cat("line ", line, ", column ", column);
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at …: "
// prefix, whose position we report in our own words.
std::string parse_error_reason(const std::string& what) {
  const auto at = what.find("parse error");
  const auto colon = at == std::string::npos ? at : what.find(": ", at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// ---------------------------------------------------------------------------------------
// Overrides.

// "--tensor-model-parallel-size", "tensor-model-parallel-size" → "tensor_model_parallel_size".
std::string snake_key(std::string_view key) {
  while (!key.empty() && key.front() == '-') key.remove_prefix(1);
  std::string name(key);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string unknown_flag_rule(std::string_view key, std::string_view name) {
  const std::string best = closest_match(name, all_field_names());
  if (best.empty()) return "unknown scenario field";
  const bool as_flag = key.starts_with("--");
  return cat("unknown scenario field; did you mean \"", as_flag ? kebab_flag(best) : best, "\"?");
}

// Applies one override to `s`; returns "" or the rule it broke. Accepts
// "section.name" too, and then insists the section is right.
std::string apply_override(Scenario& s, const std::string& key, const std::string& text) {
  std::string name = snake_key(key);
  std::string section;
  if (const auto dot = name.find('.'); dot != std::string::npos) {
    section = name.substr(0, dot);
    name = name.substr(dot + 1);
  }
  if (name == "name" && section.empty()) {
    s.name = text;
    return "";
  }
  const FieldDef* f = find_field(name);
  if (!f) return unknown_flag_rule(key, name);
  if (!section.empty() && section != f->meta.section)
    return cat("belongs in section \"", f->meta.section, "\", not \"", section, "\"");
  return f->set_text(s, text);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Public: registry, defaults, JSON, overrides.

const std::vector<ScenarioField>& scenario_fields() {
  static const std::vector<ScenarioField> fields = [] {
    std::vector<ScenarioField> out;
    for (const auto& f : registry()) out.push_back(f.meta);
    return out;
  }();
  return fields;
}

Scenario default_scenario() {
  Scenario s;
  s.name = "default";
  s.description = "GPT-2 medium shape on one 8-GPU node: TP 2 x PP 2 x DP 2";
  s.model.num_layers = 24;
  s.model.hidden_size = 1024;
  s.model.num_attention_heads = 16;
  s.model.seq_length = 1024;
  s.model.vocab_size = 50257;
  s.parallelism.tensor_model_parallel_size = 2;
  s.parallelism.pipeline_model_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 16;
  s.cluster.world_size = 8;
  s.cluster.gpus_per_node = 8;
  return s;
}

Scenario parse_scenario(const nlohmann::json& j, std::string_view source) {
  if (!j.is_object())
    throw ConfigError({{std::string(source), as_written(j),
                        "a scenario is a JSON object: {\"name\": ..., \"model\": {...}, "
                        "\"parallelism\": {...}, \"training\": {...}, \"cluster\": {...}}"}},
                      std::string(source));
  Scenario s;
  Violations out;
  for (const auto& [key, value] : j.items()) read_top_level(s, key, value, out);
  if (!out.empty()) throw ConfigError(std::move(out), std::string(source));
  return s;
}

Scenario load_scenario(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (ec) throw ConfigError(where, "", "cannot be accessed: " + ec.message());
  if (!exists) throw ConfigError(where, "", "no such file");
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(where, "", "is a directory, not a scenario file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(where, "", cat("cannot be read: ", std::strerror(errno)));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw ConfigError(where, "", "cannot be read: I/O error");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError(where, line_column(text, e.byte),
                      "is not valid JSON: " + parse_error_reason(e.what()));
  } catch (const json::out_of_range& e) {  // a number beyond double, as 1e309
    throw ConfigError(where, "", "is not valid JSON: " + parse_error_reason(e.what()));
  }
  return parse_scenario(j, where);
}

nlohmann::json to_json(const Scenario& s) {
  json j = json::object();
  for (const auto& [key, member] : kTextKeys)
    if (key == "name" || !(s.*member).empty()) j[std::string(key)] = s.*member;
  for (auto section : kSections) j[std::string(section)] = json::object();
  for (const auto& f : registry())
    if (auto v = f.get(s); !v.is_null()) j[f.meta.section][f.meta.name] = std::move(v);
  return j;
}

void apply_overrides(Scenario& s, const std::vector<std::pair<std::string, std::string>>& kv) {
  Scenario updated = s;  // all or nothing: a rejected override leaves `s` untouched
  Violations out;
  for (const auto& [key, text] : kv)
    if (auto rule = apply_override(updated, key, text); !rule.empty())
      out.push_back({key, text.empty() ? "\"\"" : text, rule});
  if (!out.empty()) throw ConfigError(std::move(out), "command-line overrides");
  s = std::move(updated);
}

// ---------------------------------------------------------------------------------------
// Derived quantities. They tolerate an unvalidated scenario (returning 0 or 1 rather than
// dividing by zero) because validate() itself uses them.

int data_parallel_size(const Scenario& s) {
  const auto& p = s.parallelism;
  const std::int64_t model = std::int64_t{p.tensor_model_parallel_size} *
                             p.pipeline_model_parallel_size * p.context_parallel_size;
  return model > 0 ? static_cast<int>(s.cluster.world_size / model) : 0;
}

int virtual_pipeline_size(const Scenario& s) {
  const auto& p = s.parallelism;
  if (p.virtual_pipeline_model_parallel_size) return *p.virtual_pipeline_model_parallel_size;
  if (!p.num_layers_per_virtual_pipeline_stage || *p.num_layers_per_virtual_pipeline_stage < 1 ||
      p.pipeline_model_parallel_size < 1)
    return 1;
  const int per_stage = s.model.num_layers / p.pipeline_model_parallel_size;
  return std::max(1, per_stage / *p.num_layers_per_virtual_pipeline_stage);
}

// Megatron's _vocab_size_with_padding: round up to a multiple of divisible_by · tp so the
// vocab-parallel embedding splits evenly and each shard keeps GEMM-friendly widths.
int padded_vocab_size(const Scenario& s) {
  const std::int64_t multiple =
      std::int64_t{s.model.make_vocab_size_divisible_by} * s.parallelism.tensor_model_parallel_size;
  if (multiple <= 0) return s.model.vocab_size;
  return static_cast<int>((s.model.vocab_size + multiple - 1) / multiple * multiple);
}

int ffn_hidden_size(const Scenario& s) {
  if (s.model.ffn_hidden_size) return *s.model.ffn_hidden_size;
  // In 64 bits and clamped: an absurd --hidden-size must be reported, not overflow.
  const std::int64_t four_h = std::int64_t{4} * s.model.hidden_size;
  return static_cast<int>(std::min<std::int64_t>(four_h, std::numeric_limits<int>::max()));
}

ParallelSizes parallel_sizes(const Scenario& s) {
  const auto& p = s.parallelism;
  return {.tp = p.tensor_model_parallel_size,
          .pp = p.pipeline_model_parallel_size,
          .dp = data_parallel_size(s),
          .cp = p.context_parallel_size,
          .ep = p.expert_model_parallel_size,
          .vpp = virtual_pipeline_size(s)};
}

std::string effective_pipeline_schedule(const Scenario& s) {
  const auto& p = s.parallelism;
  if (p.pipeline_schedule != "auto") return p.pipeline_schedule;
  if (p.pipeline_model_parallel_size == 1) return "none";
  return virtual_pipeline_size(s) > 1 ? "interleaved" : "1f1b";
}

// ---------------------------------------------------------------------------------------
// Validation: Megatron-LM's argument checks (arguments.py, the microbatch calculator,
// the interleaved schedule and the rank generator), each a function that appends what it
// finds. A check returns early when a size it divides by is not positive: check_fields
// has already reported that size.

namespace {

using I64 = std::int64_t;

bool all_positive(std::initializer_list<I64> values) {
  return std::all_of(values.begin(), values.end(), [](I64 v) { return v >= 1; });
}

// world / (tp · pp · cp), or 0 when the sizes are not positive or do not divide.
I64 valid_dp(const Scenario& s) {
  const auto& p = s.parallelism;
  const I64 model =
      I64{p.tensor_model_parallel_size} * p.pipeline_model_parallel_size * p.context_parallel_size;
  if (model < 1 || s.cluster.world_size < 1 || s.cluster.world_size % model != 0) return 0;
  return s.cluster.world_size / model;
}

// Per-field ranges again: a Scenario built in code never went through the decoders.
void check_fields(const Scenario& s, Violations& out) {
  for (const auto& f : registry()) {
    const json v = f.get(s);
    if (auto rule = broken_rule(f.rule, v); !rule.empty())
      out.push_back({f.meta.name, shown(v), rule});
  }
}

void check_world(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const I64 tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size,
            cp = p.context_parallel_size, ep = p.expert_model_parallel_size,
            world = s.cluster.world_size;
  if (!all_positive({tp, pp, cp, ep, world})) return;
  const I64 model = tp * pp * cp;
  if (world % model != 0) {
    out.push_back({"world_size", cat(world),
                   cat("must be divisible by tensor_model_parallel_size × "
                       "pipeline_model_parallel_size × context_parallel_size = ",
                       tp, " × ", pp, " × ", cp, " = ", model)});
    return;
  }
  const I64 dp = world / model;
  if (dp % ep != 0)
    out.push_back({"expert_model_parallel_size", cat(ep),
                   cat("must divide the data-parallel size world_size / (tp × pp × cp) = ", world,
                       " / ", model, " = ", dp)});
}

void check_model_split(const Scenario& s, Violations& out) {
  const auto& m = s.model;
  const I64 tp = s.parallelism.tensor_model_parallel_size;
  const I64 pp = s.parallelism.pipeline_model_parallel_size;
  if (!all_positive({tp, pp, m.num_attention_heads, m.hidden_size, m.num_layers})) return;
  if (m.num_attention_heads % tp != 0)
    out.push_back({"num_attention_heads", cat(m.num_attention_heads),
                   cat("must be divisible by tensor_model_parallel_size = ", tp)});
  const I64 ffn = ffn_hidden_size(s);
  if (ffn >= 1 && ffn % tp != 0)
    out.push_back({"ffn_hidden_size", cat(ffn),
                   cat("must be divisible by tensor_model_parallel_size = ", tp,
                       m.ffn_hidden_size ? "" : " (ffn_hidden_size defaults to 4 × hidden_size)")});
  if (!m.kv_channels && m.hidden_size % m.num_attention_heads != 0)
    out.push_back({"hidden_size", cat(m.hidden_size),
                   cat("must be divisible by num_attention_heads = ", m.num_attention_heads,
                       " (or set kv_channels)")});
  if (m.num_layers % pp != 0)
    out.push_back({"num_layers", cat(m.num_layers),
                   cat("must be divisible by pipeline_model_parallel_size = ", pp)});
}

// Megatron accepts the interleaving as layers per virtual stage or as virtual stages per
// rank (vpp), never both; either way every stage holds vpp chunks of equal depth. (Megatron
// also asks for pp > 2 unless p2p communication is overlapped, a limit of torch's batched
// p2p between the same two ranks; we keep only pp > 1, which the schedule itself needs.)
void check_interleaving(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const auto& per_vstage = p.num_layers_per_virtual_pipeline_stage;
  const auto& vstages = p.virtual_pipeline_model_parallel_size;
  const I64 pp = p.pipeline_model_parallel_size, layers = s.model.num_layers;
  if (!per_vstage && !vstages) return;
  if (!all_positive({pp, layers, per_vstage.value_or(1), vstages.value_or(1)})) return;
  if (per_vstage && vstages) {
    out.push_back(
        {"num_layers_per_virtual_pipeline_stage", cat(*per_vstage),
         cat("give it or virtual_pipeline_model_parallel_size (", *vstages, "), not both")});
    return;
  }
  const std::string field =
      per_vstage ? "num_layers_per_virtual_pipeline_stage" : "virtual_pipeline_model_parallel_size";
  const I64 given = per_vstage ? *per_vstage : *vstages;
  const I64 vpp = virtual_pipeline_size(s);
  if (per_vstage && layers % pp == 0 && (layers / pp) % *per_vstage != 0)
    out.push_back({field, cat(given),
                   cat("must divide the layers per pipeline stage num_layers / "
                       "pipeline_model_parallel_size = ",
                       layers, " / ", pp, " = ", layers / pp)});
  if (vpp > 1 && pp == 1)
    out.push_back({field, cat(given),
                   cat("interleaving (", vpp,
                       " model chunks per stage) requires pipeline_model_parallel_size > 1")});
  if (vstages && vpp > 1 && layers % (pp * vpp) != 0)
    out.push_back({"num_layers", cat(layers),
                   cat("must be divisible by pipeline_model_parallel_size × "
                       "virtual_pipeline_model_parallel_size = ",
                       pp, " × ", vpp, " = ", pp * vpp)});
}

// Megatron's microbatch calculator: with a ramp-up every intermediate batch size must
// split into whole microbatches on every dp rank, and the ramp must end on the global batch.
void check_rampup(const Scenario& s, I64 dp, Violations& out) {
  const auto& t = s.training;
  const auto& r = t.rampup_batch_size;
  if (r.size() != 3 || r[0] < 1 || r[1] < 1) return;  // its shape is check_fields' business
  const std::string value = shown(encode(r));
  const I64 start = r[0], increment = r[1], global = t.global_batch_size;
  const I64 unit = t.micro_batch_size * dp;
  const std::string unit_text =
      cat("micro_batch_size × data-parallel size = ", t.micro_batch_size, " × ", dp, " = ", unit);
  if (start >= global)
    out.push_back({"rampup_batch_size", value,
                   cat("start batch size ", start, " must be < global_batch_size = ", global)});
  else if ((global - start) % increment != 0)
    out.push_back({"rampup_batch_size", value,
                   cat("global_batch_size − start = ", global, " − ", start, " = ", global - start,
                       " must be divisible by the increment ", increment)});
  if (start % unit != 0)
    out.push_back({"rampup_batch_size", value,
                   cat("start batch size ", start, " must be divisible by ", unit_text)});
  if (increment % unit != 0)
    out.push_back({"rampup_batch_size", value,
                   cat("increment ", increment, " must be divisible by ", unit_text)});
}

void check_batch(const Scenario& s, Violations& out) {
  const auto& t = s.training;
  const I64 dp = valid_dp(s);
  if (dp == 0 || !all_positive({t.micro_batch_size, t.global_batch_size})) return;
  const I64 unit = t.micro_batch_size * dp;
  if (t.global_batch_size % unit != 0)
    out.push_back({"global_batch_size", cat(t.global_batch_size),
                   cat("must be divisible by micro_batch_size × data-parallel size = ",
                       t.micro_batch_size, " × ", dp, " = ", unit)});
  check_rampup(s, dp, out);
}

// Every global batch size a run goes through: the ramp-up's steps, then the target.
std::vector<I64> batch_sizes(const Scenario& s) {
  const auto& r = s.training.rampup_batch_size;
  const I64 global = s.training.global_batch_size;
  std::vector<I64> sizes;
  if (r.size() == 3 && r[0] >= 1 && r[1] >= 1 && r[0] < global)
    for (I64 b = r[0]; b < global; b += r[1]) sizes.push_back(b);
  sizes.push_back(global);
  return sizes;
}

// Megatron-Core's interleaved schedule walks microbatches in groups of
// microbatch_group_size_per_vp_stage (default pp) per model chunk: a group smaller than pp
// or larger than m cannot fill the pipeline, and a short last group would deadlock the
// p2p pairing, so m mod group must be 0 or at least pp.
std::string broken_group_rule(I64 pp, I64 group, I64 m) {
  if (group < pp || group > m)
    return cat("the interleaved schedule needs pipeline_model_parallel_size ≤ microbatch group ",
               "size ≤ number of microbatches, i.e. ", pp, " ≤ ", group, " ≤ ", m);
  if (m % group != 0 && m % group < pp)
    return cat("the last microbatch group, m mod group = ", m, " mod ", group, " = ", m % group,
               ", must be 0 or ≥ pipeline_model_parallel_size = ", pp);
  return "";
}

void check_microbatch_groups(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const I64 pp = p.pipeline_model_parallel_size, dp = valid_dp(s);
  const I64 micro = s.training.micro_batch_size;
  if (virtual_pipeline_size(s) <= 1 || pp <= 1 || dp == 0 || micro < 1) return;
  const I64 group = p.microbatch_group_size_per_vp_stage.value_or(static_cast<int>(pp));
  for (const I64 batch : batch_sizes(s)) {
    if (batch % (micro * dp) != 0) continue;  // check_batch / check_rampup report it
    const I64 m = batch / (micro * dp);
    std::string rule = broken_group_rule(pp, group, m);
    if (rule.empty()) continue;
    const bool ramp = batch != s.training.global_batch_size;
    rule += cat(" (m = ", batch, " / (micro_batch_size × dp) = ", m,
                ramp ? " during the batch-size ramp-up" : "", ")");
    if (p.microbatch_group_size_per_vp_stage)
      out.push_back({"microbatch_group_size_per_vp_stage", cat(group), rule});
    else
      out.push_back({ramp ? "rampup_batch_size" : "global_batch_size",
                     ramp ? shown(encode(s.training.rampup_batch_size)) : cat(batch),
                     rule + "; microbatch_group_size_per_vp_stage defaults to pp"});
    return;
  }
}

void check_sequence(const Scenario& s, Violations& out) {
  const I64 seq = s.model.seq_length, tp = s.parallelism.tensor_model_parallel_size,
            cp = s.parallelism.context_parallel_size;
  if (!all_positive({seq, tp, cp})) return;
  if (cp > 1 && seq % (2 * cp) != 0)
    out.push_back({"seq_length", cat(seq),
                   cat("must be divisible by 2 × context_parallel_size = 2 × ", cp, " = ", 2 * cp,
                       " (context parallelism cuts the sequence into 2·cp chunks to balance "
                       "the causal mask)")});
  // At tp 1 Megatron switches sequence parallelism off with a warning rather than failing;
  // we accept it the same way (it has nothing to shard) and check only where it acts.
  if (s.parallelism.sequence_parallel && tp > 1 && seq % (tp * cp) != 0)
    out.push_back(
        {"seq_length", cat(seq),
         cp > 1 ? cat("must be divisible by tensor_model_parallel_size × context_parallel_size = ",
                      tp, " × ", cp, " = ", tp * cp, " with sequence_parallel")
                : cat("must be divisible by tensor_model_parallel_size = ", tp,
                      " with sequence_parallel")});
  const I64 max_positions = s.model.max_position_embeddings.value_or(s.model.seq_length);
  if (max_positions < seq)
    out.push_back(
        {"max_position_embeddings", cat(max_positions), cat("must be ≥ seq_length = ", seq)});
}

void check_optimizer(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const auto& t = s.training;
  if (t.fp16 && t.bf16)
    out.push_back({"fp16", "true", "fp16 and bf16 exclude each other, and bf16 is true too"});
  if (p.overlap_param_gather && !p.use_distributed_optimizer)
    out.push_back({"overlap_param_gather", "true",
                   "requires use_distributed_optimizer (it gathers the optimizer's shards)"});
  if (p.overlap_param_gather && !p.overlap_grad_reduce)
    out.push_back({"overlap_param_gather", "true", "requires overlap_grad_reduce"});
  if (t.min_lr > t.lr) out.push_back({"min_lr", cat(t.min_lr), cat("must be ≤ lr = ", t.lr)});
  const I64 decay = t.lr_decay_iters.value_or(t.train_iters);
  if (t.lr_warmup_iters > decay)
    out.push_back({"lr_warmup_iters", cat(t.lr_warmup_iters),
                   cat("must be ≤ lr_decay_iters = ", decay,
                       t.lr_decay_iters ? "" : " (lr_decay_iters defaults to train_iters)")});
}

// Full recomputation checkpoints groups of layers inside one model chunk (a stage, or a
// virtual stage when interleaved), so a group cannot be deeper than the chunk.
void check_recompute(const Scenario& s, Violations& out) {
  const auto& t = s.training;
  const I64 pp = s.parallelism.pipeline_model_parallel_size, layers = s.model.num_layers;
  const I64 vpp = virtual_pipeline_size(s);
  if (t.recompute_granularity != "full" || !all_positive({pp, layers, vpp})) return;
  if (layers % (pp * vpp) != 0) return;
  const I64 per_chunk = layers / (pp * vpp);
  if (t.recompute_num_layers <= per_chunk) return;
  out.push_back({"recompute_num_layers", cat(t.recompute_num_layers),
                 vpp > 1 ? cat("must be ≤ the layers of one model chunk num_layers / (pp × vpp) = ",
                               layers, " / (", pp, " × ", vpp, ") = ", per_chunk)
                         : cat("must be ≤ the layers per pipeline stage num_layers / "
                               "pipeline_model_parallel_size = ",
                               layers, " / ", pp, " = ", per_chunk)});
}

void check_schedule(const Scenario& s, Violations& out) {
  const std::string& kind = s.parallelism.pipeline_schedule;
  const I64 pp = s.parallelism.pipeline_model_parallel_size;
  const I64 vpp = virtual_pipeline_size(s);
  if (kind == "none" && pp != 1)
    out.push_back({"pipeline_schedule", kind,
                   cat("\"none\" runs without pipelining and needs pipeline_model_parallel_size "
                       "= 1, not ",
                       pp)});
  if (kind == "interleaved" && vpp <= 1)
    out.push_back({"pipeline_schedule", kind,
                   "needs more than one model chunk per stage: set "
                   "num_layers_per_virtual_pipeline_stage or "
                   "virtual_pipeline_model_parallel_size"});
  if ((kind == "1f1b" || kind == "gpipe") && vpp > 1)
    out.push_back({"pipeline_schedule", kind,
                   cat("runs one model chunk per stage, but there are ", vpp,
                       " (virtual pipeline); use \"interleaved\" or \"auto\"")});
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

// Megatron-Core's RankGenerator: a '-'-joined permutation of tp, cp, ep, dp, pp; a
// dimension of size 1 may be left out (it is appended), and ep splits dp, so the two must
// be neighbours when ep > 1.
void check_order(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const auto tokens = split(p.order, '-');
  auto add = [&](std::string rule) { out.push_back({"order", p.order, std::move(rule)}); };
  auto index_of = [&](std::string_view t) {
    return std::find(tokens.begin(), tokens.end(), t) - tokens.begin();
  };
  const auto absent = static_cast<std::ptrdiff_t>(tokens.size());
  constexpr std::array<std::string_view, 5> kDims = {"tp", "cp", "ep", "dp", "pp"};
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (std::find(kDims.begin(), kDims.end(), tokens[i]) == kDims.end())
      add(cat("has unknown dimension \"", tokens[i],
              "\"; the dimensions are tp, cp, ep, dp, pp joined by '-'"));
    else if (index_of(tokens[i]) != static_cast<std::ptrdiff_t>(i))
      add(cat("names \"", tokens[i], "\" more than once"));
  }
  for (std::string_view need : {"tp", "dp", "pp"})
    if (index_of(need) == absent) add(cat("must contain \"", need, "\""));
  const std::pair<std::string_view, I64> optional_dims[] = {{"cp", p.context_parallel_size},
                                                            {"ep", p.expert_model_parallel_size}};
  for (const auto& [dim, size] : optional_dims)
    if (size > 1 && index_of(dim) == absent)
      add(cat("must contain \"", dim, "\" when its size is ", size, " (only size-1 dimensions ",
              "may be left out)"));
  const auto ep = index_of("ep"), dp = index_of("dp");
  if (p.expert_model_parallel_size > 1 && ep != absent && dp != absent && std::abs(ep - dp) != 1)
    add("must put \"ep\" next to \"dp\" when expert_model_parallel_size > 1 (expert "
        "parallelism splits the data-parallel dimension)");
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), the usual
// typo distance: "paralel" and "parallle" are each one edit from "parallel".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t k = 0; k <= b.size(); ++k) d[0][k] = k;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t k = 1; k <= b.size(); ++k) {
      const std::size_t cost = a[i - 1] == b[k - 1] ? 0 : 1;
      d[i][k] = std::min({d[i - 1][k] + 1, d[i][k - 1] + 1, d[i - 1][k - 1] + cost});
      if (i > 1 && k > 1 && a[i - 1] == b[k - 2] && a[i - 2] == b[k - 1])
        d[i][k] = std::min(d[i][k], d[i - 2][k - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& known) {
  const std::string w = snake_key(lower(word));
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : known) {
    const std::size_t d = edit_distance(w, snake_key(lower(candidate)));
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // Beyond about a third of the word, a "suggestion" is a different word, not a typo...
  const std::size_t limit = std::max<std::size_t>(1, (w.size() + 1) / 3);
  if (best_distance <= limit) return best;
  // ...unless the word is a truncation ("seq_len" for "seq_length"): take the shortest
  // known word it begins.
  best.clear();
  for (const auto& candidate : known)
    if (w.size() >= 3 && snake_key(lower(candidate)).starts_with(w) &&
        (best.empty() || candidate.size() < best.size()))
      best = candidate;
  return best;
}

void validate(const Scenario& s) {
  Violations out;
  for (auto check : {check_fields, check_world, check_model_split, check_interleaving, check_batch,
                     check_microbatch_groups, check_sequence, check_optimizer, check_recompute,
                     check_schedule, check_order})
    check(s, out);
  if (!out.empty()) throw ConfigError(std::move(out), cat("scenario \"", s.name, "\""));
}

}  // namespace tandem
