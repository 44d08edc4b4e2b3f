#include "core/error.hpp"

namespace tandem {

std::string format_violation(const Violation& v) {
  if (v.value.empty()) return v.field + ": " + v.rule;
  return v.field + " = " + v.value + ": " + v.rule;
}

namespace {
std::string join_violations(const std::vector<Violation>& vs, const std::string& source) {
  std::string out = "invalid configuration";
  if (!source.empty()) out += " in " + source;
  out += vs.size() == 1 ? ": " : ":";
  for (const auto& v : vs) {
    if (vs.size() > 1) out += "\n  - ";
    out += format_violation(v);
  }
  return out;
}
}  // namespace

ConfigError::ConfigError(std::vector<Violation> violations)
    : ConfigError(std::move(violations), std::string()) {}

ConfigError::ConfigError(std::string field, std::string value, std::string rule)
    : ConfigError(std::vector<Violation>{{std::move(field), std::move(value), std::move(rule)}}) {}

ConfigError::ConfigError(std::vector<Violation> violations, std::string source)
    : std::runtime_error(join_violations(violations, source)),
      violations_(std::move(violations)),
      source_(std::move(source)) {}

}  // namespace tandem
