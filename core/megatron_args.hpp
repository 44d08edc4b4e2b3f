// Megatron-LM's command line as tandem reads it: the argument list of pretrain_gpt.py,
// verbatim (`tandem simulate -- ARGS…`), or the arguments of a launch script
// (`--megatron-script FILE`: bash arrays, line continuations and variables, then
// `torchrun … pretrain_gpt.py ${ARGS[@]}`). Every argument of pretrain_gpt.py is known
// (core/megatron_arguments_table.cpp): those that set a scenario field become overrides;
// those that change nothing tandem computes are accepted and listed as not modelled;
// anything else is refused with the closest Megatron flag.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/scenario.hpp"

namespace tandem {

struct MegatronArgument {
  std::string_view flag;    // "--num-layers"
  std::string_view nargs;   // "0" switch, "1" one value, "+" one or more, "3" exactly three
  std::string_view dest;    // the attribute argparse sets, "num_layers"
  std::string_view stores;  // a switch's value: "true" (store_true) or "false" (store_false)
};
// Every argument of pretrain_gpt.py, sorted by flag.
std::span<const MegatronArgument> megatron_arguments();

// The scenario field an argument sets and the value text a switch gives it; nullopt when
// tandem does not model the argument. `--recompute-activations` is Megatron's shorthand
// for recompute_granularity selective.
struct ModelledArgument {
  std::string field;
  std::string switch_value;  // for a switch ("0" nargs): the value it sets
};
std::optional<ModelledArgument> modelled_argument(const MegatronArgument& a);

struct MegatronCommandLine {
  // scenario field → value text, in the order given (for apply_overrides)
  std::vector<std::pair<std::string, std::string>> overrides;
  // Accepted arguments tandem does not model, with their values, in the order given.
  std::vector<std::pair<std::string, std::vector<std::string>>> not_modelled;
};
// Reads a pretrain_gpt.py argument list (`--flag value`, `--flag=value`, switches, lists).
// Unknown flags (with the closest known one), missing values and stray values are
// collected and thrown as one ConfigError.
MegatronCommandLine parse_megatron_args(const std::vector<std::string>& args);
// "not modelled: --attention-backend, --init-method-std, …" ("" when there are none).
std::string not_modelled_line(const MegatronCommandLine& cl);

// What a launch script runs: pretrain_gpt.py's arguments, and the world the launcher
// (torchrun --nproc_per_node N --nnodes M) starts, when it says.
struct LaunchScript {
  std::vector<std::string> args;
  std::optional<int> nproc_per_node;
  std::optional<int> nnodes;
};
// Reads a bash launch script without running it: comments, line continuations, `NAME=…`
// and `export NAME=…`, arrays `NAME=(…)` and `NAME+=(…)` over several lines, `$NAME`,
// `${NAME}`, `${NAME:-default}`, `${NAME[@]}`, `$((arithmetic))`; positional parameters
// ($1 …) are unset and command substitutions `$(…)` expand to nothing. The launch is the
// command with a word ending in pretrain_gpt.py. Control flow (if, for, while, case) is
// refused naming its line. A ConfigError names the file and line.
LaunchScript read_launch_script(const std::filesystem::path& path);
// The same from the script's text; `where` names it in messages.
LaunchScript parse_launch_script(std::string_view text, std::string_view where);

// The scenario pretrain_gpt.py starts from when no scenario file is given: the struct's
// defaults with Megatron's where they differ (one rank, lr decay linear to min_lr 0,
// log_interval 100, eval_iters 100).
Scenario megatron_default_scenario();

// Megatron requires these four (arguments.py's required_args): a Megatron command line
// without a scenario file must give each, or this names the missing ones.
void check_megatron_required(const MegatronCommandLine& cl);

}  // namespace tandem
