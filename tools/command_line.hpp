// The whole tandem command line as a function: `tandem ARGS…` without a new process.
#pragma once

namespace tandem::cli {

// Parses argv (argv[0] is the program name) and runs the subcommand; returns the exit code.
int run_command_line(int argc, char** argv);

}  // namespace tandem::cli
