// The errors tandem's libraries throw. Libraries never exit(); main decides.
// ConfigError carries every rule a scenario or flag broke, each naming the field,
// the value and the rule, so a user fixes all of them in one pass.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tandem {

// One broken rule: `field` is the Megatron argument name (or a flag / file field),
// `value` the offending value as the user wrote it, `rule` what it must satisfy.
struct Violation {
  std::string field;
  std::string value;
  std::string rule;
};

// "field = value: rule", or "field: rule" when there is no value (a missing file).
std::string format_violation(const Violation& v);

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<Violation> violations);
  ConfigError(std::string field, std::string value, std::string rule);
  // `source` names where the input came from (a file path, "command line"); what() starts
  // with it so a message read out of context still says which input to fix.
  ConfigError(std::vector<Violation> violations, std::string source);
  const std::vector<Violation>& violations() const { return violations_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<Violation> violations_;
  std::string source_;
};

// A schedule that cannot be built or played (deadlock, unmatched p2p).
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem
