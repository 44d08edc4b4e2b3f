// Work that must run in a process of its own. SimGrid's engine is a process-wide singleton
// that runs once (sim/sim_runner.hpp): a second sim::simulate() in the same process aborts
// it (SIGABRT: "Cannot change the model after the initialization").
// A Python session simulates many times, so each simulation runs in a fork()ed child of the
// interpreter that returns its JSON report through a temporary file and _exit()s; the
// interpreter itself never starts an engine.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::python {

// What one child gave back: its JSON, or the error it threw (kind "ConfigError",
// "ScheduleError", "error"), or how it died (kind "crash": a signal or an exit status).
struct ChildOutcome {
  bool ok = false;
  nlohmann::json value;  // the work's result when ok; {"violations", "source"} for ConfigError
  std::string kind;
  std::string message;
};

// Runs each work item in its own fork()ed child, at most `jobs` at a time, and returns the
// outcomes in order. `interrupted` is polled while waiting (a Python Ctrl-C): when it
// returns true every running child is killed and the call returns with kind "interrupted"
// for the unfinished items. The work items must not touch Python objects (the children
// run without the interpreter's lock).
std::vector<ChildOutcome> run_in_children(const std::vector<std::function<nlohmann::json()>>& work,
                                          int jobs, const std::function<bool()>& interrupted);

}  // namespace tandem::python
