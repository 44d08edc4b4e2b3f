// The tandem command line: one file per subcommand, each adding itself to the app.
// Subcommands that read a scenario share the scenario options (a file plus every
// Megatron argument as a --kebab-case flag) defined in cli_scenario.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/scenario.hpp"

namespace tandem::cli {

// A scenario file (optional positional) and flag overrides, attached to a subcommand.
struct ScenarioOptions {
  std::string file;
  std::vector<std::pair<std::string, std::string>> overrides;  // filled after parsing
  std::vector<std::pair<std::string, CLI::Option*>> flags;     // field name → option
  std::vector<std::string> values;                             // storage for flag values
};

// Registers SCENARIO and every scenario field's flag on `cmd`.
void add_scenario_options(CLI::App& cmd, ScenarioOptions& opts);
// The scenario the user asked for: the file (or the built-in default) with overrides
// applied, validated. Throws ConfigError.
Scenario resolve_scenario(ScenarioOptions& opts, bool validate_it = true);

void add_layout_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_scenario_command(CLI::App& app);
void add_trace_command(CLI::App& app);
void add_preprocess_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_checkpoint_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_nccl_tests_command(CLI::App& app);

// Write `text` to `path` via a temporary file and rename (never a half-written output).
void write_file(const std::string& path, const std::string& text);

}  // namespace tandem::cli
