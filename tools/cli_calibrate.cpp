// `tandem calibrate --device cpu|cuda SCENARIO -o TABLE.json`: measures on this machine
// every Device op the scenario's training step issues, at the shapes it issues them, and
// writes the times as a calibration table that `tandem simulate --calibration` prices
// those ops with. The shapes come from simulating one iteration (every simulated rank's
// ops, recorded); each distinct shape is then built on a real Device and timed (warm-up,
// then --repeat runs at least and --min-time seconds at least; the median counts, the
// min/max spread and the run count go into the row) with the kernel threads a rank of
// `tandem train` would use.
//
// `--from-trace RUN.json` measures nothing: the rows are the per-op slices of a real run
// (`tandem train --trace RUN.json --trace-ops`), every op the step issued timed in place —
// cold caches, the allocator and the host between ops included — grouped by shape, each
// shape timed on the rank slowest at it (tools/calibration_table.hpp).
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "exec/calibrate/measure_op.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/threads.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "tools/calibration_table.hpp"
#include "tools/cli.hpp"
#include "tools/train_backend.hpp"
#include "topology/topology_io.hpp"
#if TANDEM_WITH_CUDA
#include "exec/cuda/cuda_device.hpp"
#endif

namespace tandem::cli {
namespace {

struct CalibrateOptions {
  ScenarioOptions scenario;
  std::string device = "cpu", output, mode = "symmetric", from_trace;
  int threads = 0, warmup = 2, repetitions = 11;
  int runs_per_sample = 0;         // 0: 1 on cpu, kCudaRunsPerSample on cuda
  double min_time = 0.05;          // seconds of timed runs per shape, at least
  double spread_threshold = 0.10;  // median / min − 1 above which a row is flagged
  double evict_mib = 0;
  bool warm_caches = false;  // cpu: leave each op's data where the previous ops left it
  int skip_iterations = 1;   // --from-trace: the set-up and the cold first iteration
  bool quiet = false;
};

// cuda: back-to-back runs per timed sample, so a small kernel's row is not its launch-and-
// wait round trip (8-10 µs on an H100, 2026-11-26) but what it takes inside a step.
constexpr int kCudaRunsPerSample = 10;

// The table is written last, after a minute of work: find out now that it cannot be.
void check_writable(const std::string& path) {
  if (path.empty()) throw ConfigError("--output", "(none)", "give the table's path: -o TABLE.json");
  const std::filesystem::path p(path);
  const auto parent = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(parent))
    throw ConfigError("--output", path, "its folder " + parent.string() + " does not exist");
  if (std::filesystem::is_directory(p))
    throw ConfigError("--output", path, "is a folder; give a file name");
  const std::string probe = path + ".tmp";
  if (!std::ofstream(probe))
    throw ConfigError("--output", path, "cannot write in " + parent.string());
  std::filesystem::remove(probe);
}

std::string hostname() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown host");
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::ostringstream out;
  out << std::put_time(&tm, "%Y-%m-%d");
  return out.str();
}

// Every op the scenario's step issues on every simulated rank, from one simulated iteration.
std::vector<calibrate::OpShape> issued_shapes(const Scenario& s, const Topology& topology,
                                              sim::SimMode mode) {
  auto cost = std::make_shared<sim::CostModel>(topology.gpu);
  sim::SimulateOptions so;
  so.mode = mode;
  so.record_ops = true;
  so.pricer = [cost](const sim::OpDesc& op) { return cost->seconds(op); };
  const sim::SimReport report = sim::simulate(s, topology, so);
  std::vector<calibrate::OpShape> shapes;
  for (const auto& rank : report.ranks) {
    auto part = op_shapes_of(rank.ops);
    shapes.insert(shapes.end(), part.begin(), part.end());
  }
  return shapes;
}

std::unique_ptr<Device> make_device(const std::string& device) {
#if TANDEM_WITH_CUDA
  if (device == "cuda") return std::make_unique<CudaDevice>(0);
#endif
  check_device_flag(device);  // throws for cuda without CUDA or without a GPU
  return std::make_unique<CpuDevice>();
}

// How far a row's median sits above its fastest run (median / min − 1), 0 without a spread.
// Not (max − min) / median: one interrupt in a thousand runs sets the max of every row.
double spread_of(const sim::CalibrationRow& r) {
  return r.min_seconds > 0 ? r.seconds / r.min_seconds - 1 : 0.0;
}

void print_rows(const sim::CalibrationTable& table, const sim::CostModel& model, double threshold) {
  std::cout << std::left << std::setw(24) << "op" << std::setw(6) << "dtype" << std::right
            << std::setw(8) << "m" << std::setw(8) << "n" << std::setw(6) << "k" << std::setw(6)
            << "batch" << std::setw(14) << "median µs" << std::setw(11) << "min µs" << std::setw(11)
            << "max µs" << std::setw(8) << "runs" << std::setw(11) << "med/min-1" << std::setw(12)
            << "model µs"
            << "\n";
  int flagged = 0;
  for (const auto& r : table.rows) {
    const double modelled = model.model_seconds({.op = r.op,
                                                 .dtype = r.dtype,
                                                 .m = r.m,
                                                 .n = r.n,
                                                 .k = r.k,
                                                 .batch = r.batch,
                                                 .flops = r.flops,
                                                 .bytes = r.bytes});
    std::cout << std::left << std::setw(24) << r.op << std::setw(6) << dtype_name(r.dtype)
              << std::right << std::setw(8) << r.m << std::setw(8) << r.n << std::setw(6) << r.k
              << std::setw(6) << r.batch << std::fixed << std::setprecision(1) << std::setw(13)
              << r.seconds * 1e6 << std::setw(11) << r.min_seconds * 1e6 << std::setw(11)
              << r.max_seconds * 1e6 << std::setw(8) << r.repetitions << std::setw(10)
              << std::setprecision(0) << 100 * spread_of(r) << "%" << std::setprecision(1)
              << std::setw(12) << modelled * 1e6;
    const bool noisy = spread_of(r) > threshold;
    flagged += noisy;
    std::cout << (noisy ? "  ! spread" : "") << "\n";
  }
  std::cout << flagged << " of " << table.rows.size() << " rows flagged (!): median more than "
            << std::setprecision(0) << 100 * threshold
            << "% above the fastest run (load slowed most runs: the median may not "
               "reproduce; rerun on a quieter machine or with more "
               "--repeat/--min-time)\n";
}

nlohmann::json read_trace(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw ConfigError("--from-trace", path, "no such file (tandem train --trace FILE --trace-ops)");
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError("--from-trace", path, std::string("is not valid JSON: ") + e.what());
  }
}

// The rows of a traced run: its op slices by shape, with the simulated shapes' flops and
// bytes; says which simulated shapes the trace lacks (the model's scale prices them).
std::vector<calibrate::OpTiming> traced_timings(const CalibrateOptions& o,
                                                std::span<const calibrate::OpShape> shapes) {
  auto timings = op_timings_of_trace(read_trace(o.from_trace), o.from_trace, o.skip_iterations);
  const auto missing = attach_simulated_work(timings, shapes);
  if (!o.quiet && !missing.empty()) {
    std::cout << missing.size() << " op shape(s) the simulated step issues are not in the trace "
              << "(priced from the model's per-op scale):";
    for (const auto& m : missing)
      std::cout << " " << m.op << "(" << m.m << "," << m.n << "," << m.k << "," << m.batch << ")";
    std::cout << "\n";
  }
  return timings;
}

void run_calibrate(CalibrateOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  Scenario s = resolve_scenario(o.scenario);
  if (o.device == "cpu" && (s.training.bf16 || s.training.fp16))
    throw ConfigError(s.training.bf16 ? "bf16" : "fp16", "true",
                      "the cpu binding computes in fp32: calibrate an fp32 scenario");
  const bool traced = !o.from_trace.empty();
  if (!traced) check_device_flag(o.device);  // a trace needs no device here
  check_writable(o.output);
  // The cpu table describes this machine: the cpu-host preset's "GPU" (one rank's cores).
  const std::string topo_name = o.device == "cpu"            ? std::string("cpu-host")
                                : s.cluster.topology.empty() ? std::string("dgx-a100-80g")
                                                             : s.cluster.topology;
  const Topology topology = load_topology(topo_name);
  s.cluster.topology = topo_name;
  s.cluster.gpus_per_node = topology.node.gpus_per_node;
  validate(s);

  const auto shapes =
      issued_shapes(s, topology, o.mode == "full" ? sim::SimMode::full : sim::SimMode::symmetric);
  std::vector<calibrate::OpTiming> timings;
  std::string source;
  int threads = 0;
  if (traced) {
    timings = traced_timings(o, shapes);
    source = "tandem calibrate --from-trace " + o.from_trace + " on " + hostname() + ", " +
             today() + " (scenario " + s.name + "; per-op slices of a real step)";
  } else {
    auto device = make_device(o.device);
    // As tandem train: --threads, else the cores shared by the ranks on this host.
    const int ranks_here = std::min(s.cluster.world_size, s.cluster.gpus_per_node);
    threads = o.threads > 0 ? o.threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                              std::max(1, ranks_here));
    kernels::cpu::set_num_threads(threads);

    calibrate::MeasureOptions mo{.warmup = o.warmup,
                                 .repetitions = o.repetitions,
                                 .min_time_seconds = o.min_time,
                                 .max_repetitions = std::max(1000, o.repetitions),
                                 .evict_bytes = static_cast<std::int64_t>(o.evict_mib * (1 << 20)),
                                 .flush_host_caches = o.device == "cpu" && !o.warm_caches,
                                 .runs_per_sample = o.runs_per_sample > 0 ? o.runs_per_sample
                                                    : o.device == "cuda"  ? kCudaRunsPerSample
                                                                          : 1,
                                 .op_case = {}};
    mo.op_case.vocab_rows = padded_vocab_size(s) / s.parallelism.tensor_model_parallel_size;
    const bool tty = !o.quiet && isatty(STDERR_FILENO);
    std::function<void(std::size_t, std::size_t)> progress;
    if (tty)
      progress = [](std::size_t done, std::size_t total) {
        std::cerr << "\rmeasuring " << done << "/" << total << " op shapes" << std::flush;
      };
    timings = calibrate::measure_ops(*device, shapes, mo, progress);
    if (tty) std::cerr << "\r\033[K";
    source = "tandem calibrate --device " + o.device + " on " + hostname() + ", " + today() +
             " (scenario " + s.name + "; " + std::to_string(mo.runs_per_sample) +
             " back-to-back run(s) per sample)";
    if (o.device == "cpu")
      source += ", " + std::to_string(threads) + " kernel thread(s) per rank, gemm by " +
                std::string(kernels::cpu::gemm_backend()) + " (" + kernels::cpu::blas_core() + ")";
  }
  const auto table = calibration_table_of(timings, topology.gpu.name, source);
  if (!o.quiet) print_rows(table, sim::CostModel(topology.gpu), o.spread_threshold);
  sim::save_calibration(table, o.output);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "wrote " << o.output << ": " << table.rows.size() << " op shapes "
            << (traced ? "from the trace " + o.from_trace : "measured on " + o.device) << " for "
            << topology.gpu.name;
  if (!traced) std::cout << " (" << threads << " thread(s))";
  std::cout << " in " << std::fixed << std::setprecision(1) << wall << " s\n";
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto opts = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Measure every op a scenario's training step issues, at its shapes, on this machine "
      "(cpu binding, or cuda), and write a calibration table for tandem simulate "
      "--calibration");
  cmd->add_option("--device", opts->device,
                  "Binding to measure on: cpu (the table is for the cpu-host topology) or cuda "
                  "(GPU 0; the table is for the scenario's topology)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", opts->output, "Calibration table to write (JSON), required");
  cmd->add_option("--threads", opts->threads,
                  "Kernel threads (cpu), as tandem train --threads (default: cores / ranks)")
      ->check(positive());
  cmd->add_option("--warmup", opts->warmup, "Untimed runs of each op first")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--repeat,--repetitions", opts->repetitions,
                  "Timed runs of each op at least (the median counts; min and max are written "
                  "as its spread)")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--min-time", opts->min_time,
                  "Seconds of timed runs per op shape at least: short ops run more than --repeat "
                  "times (up to 1000)")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--runs-per-sample", opts->runs_per_sample,
                  "Back-to-back runs of an op per timed sample, waited for once (the sample is "
                  "their mean); default 1 on cpu, " +
                      std::to_string(kCudaRunsPerSample) +
                      " on cuda, where one run waited for alone pays the launch-and-wait round "
                      "trip")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--spread-threshold", opts->spread_threshold,
                  "Flag rows whose median exceeds their fastest run by more than this "
                  "fraction (median / min − 1)")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--from-trace", opts->from_trace,
                  "Measure nothing: build the table from the per-op slices of a real run's "
                  "trace (tandem train --trace RUN.json --trace-ops, same scenario and flags)");
  cmd->add_option("--skip-iterations", opts->skip_iterations,
                  "With --from-trace, leave out each rank's first N iterations (the set-up and "
                  "the cold first steps)")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--evict-mib", opts->evict_mib,
                  "MiB of host memory written before each timed run, evicting the op's data "
                  "from the caches (0: none; each op finds its data where the other ops left it)")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_flag("--warm-caches", opts->warm_caches,
                "cpu: do not flush each op's tensors from the caches before its timed runs "
                "(its data is then where the ops before it left it, which changes as shapes "
                "finish)");
  cmd->add_option("--mode", opts->mode,
                  "Which simulated ranks give the shapes: symmetric (one per stage) or full")
      ->check(CLI::IsMember({"full", "symmetric"}))
      ->capture_default_str();
  cmd->add_flag("--quiet", opts->quiet, "Print neither the rows nor progress");
  add_scenario_options(*cmd, opts->scenario);
  cmd->callback([opts] { run_calibrate(*opts); });
}

}  // namespace tandem::cli
