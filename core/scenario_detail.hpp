// Internals shared by the scenario's three parts, not part of the public API: the field
// descriptor (FieldDef) and the registry of them (scenario_fields.cpp), read by the
// decoders (scenario.cpp) and the cross-field rules (scenario_rules.cpp).
#pragma once

#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace tandem::scenario_detail {

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
inline std::string one_line(std::string text) {
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}
inline std::string as_written(const json& v) {
  return one_line(v.dump());
}
inline std::string shown(const json& v) {
  return one_line(v.is_string() ? v.get<std::string>() : v.dump());
}

json encode(const auto& v) {
  return json(v);
}
template <class T>
json encode(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Per-field rules: what a value must satisfy on its own. Cross-field rules live in
// validate(). A rule sees the value as JSON so one checker serves every C++ type.
struct Rule {
  std::optional<double> min{};  // value ≥ min (value > min when min_open)
  bool min_open = false;
  std::optional<double> max_open{};   // value < max_open
  std::optional<double> max{};        // value ≤ max
  std::vector<std::string> one_of{};  // allowed strings
  std::string (*custom)(const json&) = nullptr;
};
// "" when `v` satisfies `r`, else the rule it breaks. Unset optionals (null) always pass.
std::string broken_rule(const Rule& r, const json& v);

// One field: its public description, its own rule, and how to read and write it.
struct FieldDef {
  ScenarioField meta;
  Rule rule;
  std::function<json(const Scenario&)> get;
  // Each returns "" when the value was stored, else the rule it broke (nothing stored).
  std::function<std::string(Scenario&, const json&)> set;
  std::function<std::string(Scenario&, std::string_view)> set_text;
};

inline constexpr std::array<std::string_view, 4> kSections = {"model", "parallelism", "training",
                                                              "cluster"};

const std::vector<FieldDef>& registry();
// The field named `name` (snake case, canonical name or alias), or nullptr.
const FieldDef* find_field(std::string_view name);
// Every canonical name and alias, for suggestions.
std::vector<std::string> all_field_names();

// "num_layers" → "--num-layers".
std::string kebab_flag(std::string_view name);
// "--tensor-model-parallel-size", "tensor-model-parallel-size" → "tensor_model_parallel_size".
std::string snake_key(std::string_view key);
std::string lower(std::string_view t);

}  // namespace tandem::scenario_detail
