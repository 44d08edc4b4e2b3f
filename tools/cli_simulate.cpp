// `tandem simulate SCENARIO`: predicts one training iteration of the scenario on the
// scenario's topology (or --topology) by running the training step on the sim binding,
// and prints iteration time, throughput, MFU, bubble, exposed communication and memory;
// optionally the JSON report, the Chrome trace and its SVG. Every input is checked
// before the simulation starts.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/trace_svg.hpp"
#include "sim/calibration.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "tools/cli.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

struct SimulateCliOptions {
  ScenarioOptions scenario;
  std::string mode = "symmetric", calibration, json, trace, svg, moe_routing = "uniform";
  int iterations = 1;
  bool quiet = false;
  bool trace_ops = false;
};

void check_output(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw ConfigError(flag, path, "its folder " + parent.string() + " does not exist");
}

void run_simulate(SimulateCliOptions& o) {
  const Scenario s = resolve_scenario(o.scenario);
  // --topology is the scenario's cluster.topology flag.
  const Topology topology = load_topology(sim::topology_of(s));
  if (s.cluster.gpus_per_node != topology.node.gpus_per_node)
    throw ConfigError("cluster.gpus_per_node", std::to_string(s.cluster.gpus_per_node),
                      "the topology " + topology.name + " has " +
                          std::to_string(topology.node.gpus_per_node) + " GPUs per node");
  std::optional<sim::CalibrationTable> table;
  if (!o.calibration.empty()) table = sim::load_calibration(o.calibration);
  const sim::MoeRouting routing = sim::parse_moe_routing(o.moe_routing);
  if (routing.kind == sim::MoeRouting::Kind::histogram && s.model.num_experts &&
      static_cast<int>(routing.weights.size()) != *s.model.num_experts)
    throw ConfigError("--moe-routing", o.moe_routing,
                      "a histogram lists one weight per expert: num_experts = " +
                          std::to_string(*s.model.num_experts));
  if (o.trace_ops && o.trace.empty() && o.svg.empty())
    throw ConfigError("--trace-ops", "true", "needs --trace or --svg (it shapes the trace)");
  check_output("--json", o.json);
  check_output("--trace", o.trace);
  check_output("--svg", o.svg);

  auto cost = std::make_shared<sim::CostModel>(topology.gpu, table);
  sim::SimulateOptions so;
  so.mode = o.mode == "full" ? sim::SimMode::full : sim::SimMode::symmetric;
  so.iterations = o.iterations;
  so.routing = routing;
  so.pricer = [cost](const sim::OpDesc& op) { return cost->seconds(op); };
  std::string trace_path = o.trace;
  if (trace_path.empty() && !o.svg.empty()) trace_path = o.svg + ".trace.json";
  so.trace_path = trace_path;
  so.trace_ops = o.trace_ops;
  const bool tty = !o.quiet && isatty(STDERR_FILENO);
  if (tty)
    so.progress = [](double f) {
      const int width = 30, done = static_cast<int>(width * f);
      std::cerr << "\rsimulating [" << std::string(static_cast<std::size_t>(done), '#')
                << std::string(static_cast<std::size_t>(width - done), '.') << "] "
                << static_cast<int>(100 * f) << "%" << std::flush;
    };
  const sim::SimReport report = sim::simulate(s, topology, so);
  if (tty) std::cerr << "\r\033[K";
  std::cout << sim::format_report(report);
  if (!o.json.empty()) {
    write_file(o.json, sim::to_json(report).dump(2) + "\n");
    std::cout << "wrote report " << o.json << "\n";
  }
  if (!o.trace.empty()) std::cout << "wrote trace " << o.trace << "\n";
  if (!o.svg.empty()) {
    std::ifstream in(trace_path);
    const auto trace = nlohmann::json::parse(in);
    write_file(o.svg, render_trace_svg(
                          trace, {.title = "tandem simulate " + s.name + " on " + topology.name}));
    if (o.trace.empty()) std::filesystem::remove(trace_path);
    std::cout << "wrote " << o.svg << "\n";
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto opts = std::make_shared<SimulateCliOptions>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Predict a training iteration on a simulated cluster (SimGrid): iteration time, "
      "tokens/s, TFLOP/s per GPU, MFU, pipeline bubble, exposed communication, memory");
  cmd->add_option("--mode", opts->mode,
                  "full: every rank is simulated; symmetric: one rank per pipeline stage, "
                  "its tp and dp peers' traffic still on the links")
      ->check(CLI::IsMember({"full", "symmetric"}))
      ->capture_default_str();
  cmd->add_option("--iterations", opts->iterations, "Iterations to simulate (the last is reported)")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--moe-routing", opts->moe_routing,
                  "Where MoE routers send tokens: uniform | zipf:S (expert e's share ∝ "
                  "1/(e+1)^S) | histogram:w0,w1,… (one weight per expert, e.g. a real run's "
                  "tokens per expert)")
      ->capture_default_str();
  cmd->add_option("--calibration", opts->calibration,
                  "Calibration table (from tandem calibrate) overriding the cost model per op");
  cmd->add_option("--json", opts->json, "Write the report as JSON");
  cmd->add_option("--trace", opts->trace, "Write the predicted Chrome trace (opens in Perfetto)");
  cmd->add_option("--svg", opts->svg, "Draw the predicted trace as SVG");
  cmd->add_flag("--trace-ops", opts->trace_ops,
                "One trace slice per Device op with its shape, as a real run's trace has, "
                "instead of one per run of ops of a class (large for big models)");
  cmd->add_flag("--quiet", opts->quiet, "No progress bar");
  opts->scenario.without_file = ScenarioOptions::WithoutFile::megatron_when_flagged;
  add_scenario_options(*cmd, opts->scenario);
  cmd->callback([opts] { run_simulate(*opts); });
}

}  // namespace tandem::cli
