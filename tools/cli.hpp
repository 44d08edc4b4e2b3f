// The tandem command line: one file per subcommand, each adding itself to the app.
// Subcommands that read a scenario share the scenario options (a file plus every
// Megatron argument as a --kebab-case flag) defined in cli_scenario.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/megatron_args.hpp"
#include "core/scenario.hpp"

namespace tandem::cli {

// Number checks that state their rule. CLI11's PositiveNumber and NonNegativeNumber print
// their range as 0 to 1.8e308 ("--top: Value 0 not in range 0.000000 to 17976931348…").
// Applied to an option, these print "--top: value 0: must be > 0".
CLI::Validator positive();      // a number > 0
CLI::Validator non_negative();  // a number ≥ 0

// A scenario file (optional positional) and flag overrides, attached to a subcommand; or a
// Megatron-LM command line: pretrain_gpt.py's arguments after `--`, or a launch script
// (--megatron-script), read by core/megatron_args.hpp.
struct ScenarioOptions {
  std::string file;
  std::vector<std::string> positionals;  // [SCENARIO] then the Megatron arguments after --
  std::string megatron_script;
  MegatronCommandLine megatron;  // filled by resolve_scenario
  // Megatron arguments the command handles itself (train: --data-path, --mock-data, …):
  // kept in `megatron.not_modelled` for it but not reported as not modelled.
  std::vector<std::string> handled_flags;
  // What a command without a scenario file starts from: tandem's built-in default
  // scenario, or Megatron's defaults (megatron_default_scenario, world default_world_size
  // unless --world-size): always (train, as pretrain_gpt.py), or once a Megatron argument
  // is given, as a flag or after -- (simulate, scenario, search; bare, they run the
  // built-in default). A Megatron command line (after --, a launch script) always does.
  enum class WithoutFile { builtin_default, megatron_when_flagged, megatron_defaults };
  WithoutFile without_file = WithoutFile::builtin_default;
  int default_world_size = 1;
  std::vector<std::pair<std::string, std::string>> overrides;  // filled after parsing
  std::vector<std::pair<std::string, CLI::Option*>> flags;     // field name → option
  std::vector<std::string> values;                             // storage for flag values
  // Megatron's switches that set a field without a flag of that field's name
  // (--no-fp8-wgrad, --no-bias-gelu-fusion, --recompute-activations, …), as they are taken
  // after --.
  struct Switch {
    std::string field, value;
    CLI::Option* option = nullptr;
  };
  std::vector<Switch> switches;
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
void add_search_command(CLI::App& app);

// Write `text` to `path` via a temporary file and rename (never a half-written output).
void write_file(const std::string& path, const std::string& text);

}  // namespace tandem::cli
