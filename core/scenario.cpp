// Decoding a scenario: a JSON document (sections, unknown keys with suggestions, duplicate
// keys) or --flag overrides into the Scenario struct, through the field registry
// (scenario_fields.cpp); and the struct back to JSON. Every reader collects all broken
// rules and throws them together as one ConfigError, so a user fixes a scenario in one
// pass instead of one error per run. Cross-field rules are scenario_rules.cpp's.
#include "core/scenario.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "core/scenario_detail.hpp"

namespace tandem {
using namespace scenario_detail;
namespace {

// Reading a JSON document.

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
// Public: JSON and overrides.

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

}  // namespace tandem
