// The whole tandem command line as a function: `tandem ARGS…` without a new process.
#pragma once

#include <string>
#include <vector>

namespace tandem::cli {

// Parses argv (argv[0] is the program name) and runs the subcommand; returns the exit code.
int run_command_line(int argc, char** argv);
// The same with the arguments as strings (args[0] is the program name): what a forked
// child simulation runs (tools/child_simulation.hpp).
int run_command_line(const std::vector<std::string>& args);

}  // namespace tandem::cli
