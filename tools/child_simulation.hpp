// Simulating several scenarios from one command. SimGrid's engine is a process-wide
// singleton that runs once, so each scenario runs in a child process: this very binary
// (/proc/self/exe) as `tandem simulate FILE --quiet --json OUT` — the same code path a user
// runs — with its output captured in a log file. At most `jobs` children run at a time.
// A caller that holds no threads, no MPI and no SimGrid engine may instead fork and run the
// command line in the child (ChildRunner): the same code path without the binary's start-up
// (0.09 s on a 2-core EPYC VM; 0.45-0.65 s while tandem linked cuBLAS, whose libcublasLt
// initialisers and page faults `perf record tandem --help` showed,
// kernels/cuda/cublas_library.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {

struct ChildSimulation {
  std::string name;               // a label for progress and errors
  std::vector<std::string> args;  // after the binary, e.g. {"simulate", "x.json", …}
  std::filesystem::path json;     // where the child writes its report (--json)
  std::filesystem::path log;      // the child's stdout and stderr
};

struct ChildResult {
  bool ok = false;
  nlohmann::json report;  // the --json report when ok
  std::string error;      // the exit status and the end of the log otherwise
  double wall_seconds = 0;
};

// Runs `tandem ARGS…` in a forked child and returns its exit code (tools/command_line.hpp).
using ChildRunner = std::function<int(const std::vector<std::string>& args)>;

// Runs every simulation, `jobs` at a time, and returns their results in order.
// `on_done(i, result)` is called as each child finishes (in completion order). With
// `in_fork`, each child is a fork that calls it (see run_pulled_simulations).
std::vector<ChildResult> run_child_simulations(
    const std::vector<ChildSimulation>& sims, int jobs,
    const std::function<void(std::size_t, const ChildResult&)>& on_done = {},
    const ChildRunner& in_fork = {});

// Keeps `jobs` children busy with what `next()` hands out, in that order, until it hands
// out nothing (std::nullopt: it is not asked again) and every child has finished;
// `on_done(sim, result)` is called as each child finishes, before `next()` is asked for
// the child to replace it.
// With `in_fork`, each child is a fork of this process that calls it instead of a new
// process of this binary.
void run_pulled_simulations(
    int jobs, const std::function<std::optional<ChildSimulation>()>& next,
    const std::function<void(const ChildSimulation&, const ChildResult&)>& on_done,
    const ChildRunner& in_fork = {});

}  // namespace tandem::cli
