// `tandem checkpoint diff A B`: reassembles the global parameters of two runs from their
// per-rank checkpoints (any tp / pp / dp layout, distributed optimizer or not) and prints
// the largest absolute difference between them, parameter by parameter; exits 1 when it
// exceeds --tolerance, when the runs hold different parameters, or when copies of one
// parameter inside a run (dp replicas, tp replicas, the tied output layer) disagree.
#include <iomanip>
#include <iostream>

#include "tools/cli.hpp"
#include "train/checkpoint_params.hpp"

namespace tandem::cli {
namespace {

struct DiffOptions {
  std::string a, b;
  double tolerance = 1e-4;
  std::int64_t iteration = -1;
};

void run_diff(const DiffOptions& o) {
  const GlobalParameters a = assemble_parameters(o.a, o.iteration);
  const GlobalParameters b = assemble_parameters(o.b, o.iteration);
  const ParameterDifference d = compare_parameters(a, b);
  std::size_t elements = 0;
  for (const auto& [name, v] : a.values) elements += v.size();
  std::cout << std::scientific << std::setprecision(3) << "parameters: " << a.values.size()
            << " tensors, " << elements << " elements (" << a.ranks << " vs " << b.ranks
            << " ranks)\nmax abs difference: " << d.max_abs << " (" << d.worst
            << ")\nreplica disagreement: " << a.replica_max_abs_diff << " (" << a.replica_worst
            << ") / " << b.replica_max_abs_diff << " (" << b.replica_worst << ")\n";
  for (const auto& name : d.unmatched) std::cout << "only in one run: " << name << "\n";
  const bool ok = d.unmatched.empty() && d.max_abs <= o.tolerance &&
                  a.replica_max_abs_diff <= o.tolerance && b.replica_max_abs_diff <= o.tolerance;
  if (!ok)
    throw std::runtime_error("parameters differ by more than " + std::to_string(o.tolerance));
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("checkpoint", "Inspect checkpoints written by tandem train");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<DiffOptions>();
  auto* diff = cmd->add_subcommand(
      "diff",
      "Compare the global parameters of two checkpoint directories, whatever their layouts "
      "(exit 1 beyond --tolerance)");
  diff->add_option("A", opts->a, "First checkpoint directory")->required();
  diff->add_option("B", opts->b, "Second checkpoint directory")->required();
  diff->add_option("--tolerance", opts->tolerance, "Largest absolute difference accepted")
      ->capture_default_str();
  diff->add_option("--iteration", opts->iteration,
                   "Iteration to compare (default: each directory's latest)");
  diff->callback([opts] { run_diff(*opts); });
}

}  // namespace tandem::cli
