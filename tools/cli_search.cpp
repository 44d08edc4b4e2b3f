// `tandem search SCENARIO --world-size N`: which layout should I run? Keeps the model, the
// global batch and the world size, enumerates the layouts Megatron accepts
// (sim/search/search_space.hpp), prunes the invalid ones with the scenario validator and
// those that do not fit with the dry run (sim/search/dry_run.hpp: the simulator's own
// memory high-water mark), then simulates the rest in symmetric mode in child processes,
// in order of a lower bound on their iteration time, until that bound exceeds the K-th
// best simulated time: every candidate left unsimulated is provably slower than the top K,
// so the top K is exact. Under `mpirun -np R` the dry runs and the simulations are split
// over the ranks and gathered after each round of R × J simulations; the top K is exact
// either way, so its ranking is the single process's.
#include <mpi.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "sim/calibration.hpp"
#include "sim/cost_model.hpp"
#include "sim/fp8_gpu_rules.hpp"
#include "sim/search/dry_run.hpp"
#include "sim/search/search_space.hpp"
#include "sim/sim_runner.hpp"
#include "tools/child_simulation.hpp"
#include "tools/cli.hpp"
#include "tools/command_line.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

namespace ss = sim::search;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct SearchCliOptions {
  ScenarioOptions scenario;
  int world_size = 0, jobs = 0, top = 10;  // jobs 0: one per core (one per mpirun rank)
  std::string json_path, csv_path, svg_path, calibration;
  std::vector<std::string> vary, fix, only;
  std::string best_scenario_path;  // the best simulated candidate's scenario, as JSON
  std::string best_report_path;    // and its simulation's report (`simulate --json`'s, no ranks)
  double memory_headroom = 0;
  bool quiet = false;
  // Dry runs (and simulations) step every microbatch instead of extrapolating from two short
  // steps (ss::DryRunSteps).
  bool all_microbatches = false;
  // Every candidate dry-run on every stage, no probe of its last stage first (as under mpirun).
  bool no_probe = false;
};

// This process's place among `mpirun`'s ranks (1 and 0 without mpirun).
struct Ranks {
  int size = 1, rank = 0;
  bool mpi = false;
};

Ranks ranks_from_environment() {
  Ranks r;
  for (const auto& [size, rank] : {std::pair{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                   std::pair{"PMI_SIZE", "PMI_RANK"}}) {
    const char* n = std::getenv(size);
    const char* k = std::getenv(rank);
    if (n == nullptr || k == nullptr) continue;
    r.size = std::atoi(n);
    r.rank = std::atoi(k);
    r.mpi = true;
    break;
  }
  return r;
}

// MPI for the gathers, started after the dry-run workers have been forked and reaped.
class MpiSession {
 public:
  explicit MpiSession(const Ranks& r) : on_(r.mpi) {
    if (!on_) return;
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size != r.size || rank != r.rank) {
      MPI_Finalize();
      throw std::runtime_error("mpirun's environment and MPI disagree on this rank");
    }
  }
  ~MpiSession() {
    if (on_) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool on_;
};

// Every rank's text, in rank order, on every rank.
std::vector<std::string> all_gather_text(const Ranks& r, const std::string& mine) {
  if (!r.mpi) return {mine};
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(r.size));
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> offsets(lens.size(), 0);
  for (std::size_t i = 1; i < lens.size(); ++i) offsets[i] = offsets[i - 1] + lens[i - 1];
  std::string all(static_cast<std::size_t>(offsets.back() + lens.back()), '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                 MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lens.size(); ++i)
    out.push_back(
        all.substr(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(lens[i])));
  return out;
}

class ScratchDir {
 public:
  explicit ScratchDir(int rank) {
    path_ = std::filesystem::temp_directory_path() /
            ("tandem-search-" + std::to_string(getpid()) + "-" + std::to_string(rank));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A progress line on a terminal: "phase [####....] done/total, ~Ns left".
class Progress {
 public:
  Progress(bool on, std::string phase) : on_(on), phase_(std::move(phase)), start_(Clock::now()) {}
  void update(std::size_t done, std::size_t total, const std::string& note = "") const {
    if (!on_ || total == 0) return;
    const double f = static_cast<double>(done) / static_cast<double>(total);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const int width = 30, filled = static_cast<int>(width * f);
    char eta[64] = "";
    if (done > 0 && done < total)
      std::snprintf(eta, sizeof eta, ", ~%.0f s left", elapsed / f - elapsed);
    std::cerr << "\r\033[K" << phase_ << " [" << std::string(static_cast<std::size_t>(filled), '#')
              << std::string(static_cast<std::size_t>(width - filled), '.') << "] " << done << "/"
              << total << eta << note << std::flush;
  }
  void done() const {
    if (on_) std::cerr << "\r\033[K" << std::flush;
  }

 private:
  bool on_;
  std::string phase_;
  Clock::time_point start_;
};

// The dry-run key: a candidate's scenario without its name, and its rank order only as far
// as the simulation can see it (ss::placement_key). The rank order changes nothing a stage
// allocates or computes, but it places the groups inside or across nodes, which the bound
// prices: two candidates with one key have one dry run and simulate alike.
std::string dry_run_key(const Scenario& s, int gpus_per_node) {
  Scenario k = s;
  k.name = "";
  k.parallelism.order = "";
  return to_json(k).dump() + " " + ss::placement_key(s, gpus_per_node);
}

json dry_run_to_json(const ss::DryRun& d) {
  return {{"peak_memory_bytes", d.peak_memory_bytes},
          {"over_budget_before_step", d.over_budget_before_step},
          {"over_budget_in_step", d.over_budget_in_step},
          {"extrapolated", d.extrapolated},
          {"probe", d.probe},
          {"lower_bound_seconds", d.lower_bound_seconds},
          {"busy_lower_bound", d.busy_lower_bound}};
}

// Dry-runs `scenarios` in `jobs` forked children (each its own SimGrid engine); returns
// their results in order. The first child draws the progress bar for its share.
std::vector<json> parallel_dry_run(const std::vector<Scenario>& scenarios, const Topology& topology,
                                   const sim::SimDevice::Pricer& pricer, std::int64_t memory_budget,
                                   ss::DryRunSteps steps, ss::DryRunStages which, int jobs,
                                   const std::filesystem::path& dir, bool progress) {
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(scenarios.size())));
  std::vector<pid_t> pids;
  std::cout << std::flush;
  std::cerr << std::flush;
  for (int j = 0; j < jobs; ++j) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("cannot fork a dry-run worker");
    if (pid == 0) {
      int rc = 0;
      try {
        std::vector<Scenario> mine;
        for (std::size_t i = static_cast<std::size_t>(j); i < scenarios.size();
             i += static_cast<std::size_t>(jobs))
          mine.push_back(scenarios[i]);
        const Progress bar(progress && j == 0, which == ss::DryRunStages::last
                                                   ? "probe (last stage: memory, bound)"
                                                   : "dry run (memory, bound)");
        // One engine for the whole share; progress comes from chunks of it.
        const auto results = ss::dry_run(mine, topology, pricer, memory_budget, steps, which);
        bar.done();
        json out = json::array();
        for (const auto& r : results) out.push_back(dry_run_to_json(r));
        std::ofstream(dir / ("dry-" + std::to_string(j) + ".json")) << out.dump();
      } catch (const std::exception& e) {
        std::ofstream(dir / ("dry-" + std::to_string(j) + ".err")) << e.what();
        rc = 1;
      }
      std::cout << std::flush;
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::string failure;
  for (std::size_t j = 0; j < pids.size(); ++j) {
    int status = 0;
    waitpid(pids[j], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::ifstream err(dir / ("dry-" + std::to_string(j) + ".err"));
      std::stringstream buf;
      buf << err.rdbuf();
      failure = "a dry-run worker failed: " + (buf.str().empty() ? "killed" : buf.str());
    }
  }
  if (!failure.empty()) throw std::runtime_error(failure);
  std::vector<json> results(scenarios.size());
  for (int j = 0; j < jobs; ++j) {
    std::ifstream in(dir / ("dry-" + std::to_string(j) + ".json"));
    const json part = json::parse(in);
    for (std::size_t k = 0; k < part.size(); ++k)
      results[static_cast<std::size_t>(j) + k * static_cast<std::size_t>(jobs)] = part[k];
  }
  return results;
}

struct Outcome {
  std::string status;  // pruned_memory, estimated_only, simulated, failed
  std::int64_t peak_memory_bytes = 0;
  // Over memory from building the model alone (no step run), or from the step up to the
  // allocation that crossed the budget (the step stopped there).
  bool peak_is_lower_bound = false;
  double lower_bound_seconds = 0;
  json report;  // the simulation's summary when simulated
  std::string error;
  int rank = 0;           // 1-based among simulated, by iteration time
  int simulated_as = -1;  // the id of the candidate whose simulation this one shares
  bool over_before_step = false, over_in_step = false;  // the dry run's budget, as in ss::DryRun
  // Only its last pipeline stage was dry-run (a probe): the memory and bound are that stage's.
  bool probed_only = false;
};

double gib(std::int64_t b) {
  return static_cast<double>(b) / (1 << 30);
}

json exposed_of(const json& report) {
  return report.contains("exposed_seconds") ? report["exposed_seconds"] : json::object();
}

std::string format_row(int rank, const ss::Candidate& c, const Outcome& o) {
  const json& r = o.report;
  const json ex = exposed_of(r);
  auto exp = [&](const char* k) { return ex.contains(k) ? ex[k].get<double>() : 0.0; };
  char line[512];
  std::snprintf(line, sizeof line,
                "%4d %9.3f %11.0f %7.1f %5.1f%% %6.1f%% %7.3f %7.3f %7.3f %7.2f  %s%s", rank,
                r["iteration_seconds"].get<double>(), r["tokens_per_second"].get<double>(),
                r["model_tflops_per_gpu"].get<double>(), 100 * r["mfu"].get<double>(),
                100 * r["bubble_fraction"].get<double>(), exp("tp"), exp("pp"), exp("dp"),
                gib(r["max_peak_memory_bytes"].get<std::int64_t>()), c.label.c_str(),
                c.baseline ? "  (baseline)" : "");
  return line;
}

// Why `loser` is slower than `winner`: the parts of the iteration that differ most.
std::string why_slower(const json& winner, const json& loser) {
  std::ostringstream out;
  char buf[256];
  const double dt =
      loser["iteration_seconds"].get<double>() - winner["iteration_seconds"].get<double>();
  std::snprintf(buf, sizeof buf, "%+.3f s per iteration: bubble %.1f%% vs %.1f%%", dt,
                100 * loser["bubble_fraction"].get<double>(),
                100 * winner["bubble_fraction"].get<double>());
  out << buf;
  const json lost = exposed_of(loser), won = exposed_of(winner);
  std::set<std::string> kinds;
  for (auto it = lost.begin(); it != lost.end(); ++it) kinds.insert(it.key());
  for (auto it = won.begin(); it != won.end(); ++it) kinds.insert(it.key());
  for (const auto& k : kinds) {
    const double a = lost.value(k, 0.0), b = won.value(k, 0.0);
    if (std::abs(a - b) < 1e-4) continue;
    std::snprintf(buf, sizeof buf, ", exposed %s %.3f vs %.3f s", k.c_str(), a, b);
    out << buf;
  }
  std::snprintf(buf, sizeof buf, ", hardware TFLOP/s per GPU %.1f vs %.1f (recomputation)",
                loser["hardware_tflops_per_gpu"].get<double>(),
                winner["hardware_tflops_per_gpu"].get<double>());
  out << buf;
  return out.str();
}

std::string svg_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

// Throughput against memory per GPU for every simulated candidate, the Pareto front (no
// other candidate is both faster and smaller) joined by a line.
std::string pareto_svg(const std::vector<ss::Candidate>& cands, const std::vector<Outcome>& outs,
                       const std::string& title, double gpu_gib) {
  struct P {
    double mem, tps;
    std::string label;
    bool baseline;
  };
  std::vector<P> pts;
  for (std::size_t i = 0; i < cands.size(); ++i)
    if (outs[i].status == "simulated")
      pts.push_back({gib(outs[i].report["max_peak_memory_bytes"].get<std::int64_t>()),
                     outs[i].report["tokens_per_second"].get<double>(), cands[i].label,
                     cands[i].baseline});
  const double W = 760, H = 480, L = 80, R = 20, T = 40, B = 60;
  double xmax = gpu_gib, ymax = 1;
  for (const auto& p : pts) {
    xmax = std::max(xmax, p.mem);
    ymax = std::max(ymax, p.tps);
  }
  xmax *= 1.05;
  ymax *= 1.1;
  auto X = [&](double m) { return L + (W - L - R) * m / xmax; };
  auto Y = [&](double t) { return H - B - (H - T - B) * t / ymax; };
  std::ostringstream o;
  char b[512];
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
       "fill=\"white\"/>\n";
  o << "<text x=\"" << L << "\" y=\"24\" font-size=\"14\">" << svg_escape(title) << "</text>\n";
  std::snprintf(b, sizeof b,
                "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n"
                "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n",
                L, H - B, W - R, H - B, L, H - B, L, T);
  o << b;
  for (int i = 0; i <= 5; ++i) {
    const double m = xmax * i / 5, t = ymax * i / 5;
    std::snprintf(b, sizeof b,
                  "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%.0f</text>\n"
                  "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.3g</text>\n",
                  X(m), H - B + 16, m, L - 6, Y(t) + 4, t);
    o << b;
  }
  std::snprintf(b, sizeof b,
                "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">memory high-water mark per GPU "
                "(GiB)</text>\n<text x=\"16\" y=\"%g\" transform=\"rotate(-90 16 %g)\" "
                "text-anchor=\"middle\">tokens/s</text>\n",
                (L + W - R) / 2, H - 18, (T + H - B) / 2, (T + H - B) / 2);
  o << b;
  std::snprintf(
      b, sizeof b,
      "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"red\" "
      "stroke-dasharray=\"4 3\"/><text x=\"%g\" y=\"%g\" fill=\"red\">GPU memory</text>\n",
      X(gpu_gib), T, X(gpu_gib), H - B, X(gpu_gib) + 4, T + 12);
  o << b;
  std::vector<P> front;
  for (const auto& p : pts) {
    bool dominated = false;
    for (const auto& q : pts)
      if ((q.mem <= p.mem && q.tps > p.tps) || (q.mem < p.mem && q.tps >= p.tps)) dominated = true;
    if (!dominated) front.push_back(p);
  }
  std::sort(front.begin(), front.end(), [](const P& a, const P& c) { return a.mem < c.mem; });
  for (const auto& p : pts) {
    std::snprintf(b, sizeof b,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\" "
                  "fill-opacity=\"0.6\"><title>%s: %.0f tokens/s, %.2f GiB</title></circle>\n",
                  X(p.mem), Y(p.tps), p.baseline ? 6.0 : 3.0, p.baseline ? "orange" : "steelblue",
                  svg_escape(p.label).c_str(), p.tps, p.mem);
    o << b;
  }
  if (!front.empty()) {
    o << "<polyline fill=\"none\" stroke=\"darkgreen\" stroke-width=\"2\" points=\"";
    for (const auto& p : front) {
      std::snprintf(b, sizeof b, "%.1f,%.1f ", X(p.mem), Y(p.tps));
      o << b;
    }
    o << "\"/>\n";
  }
  std::snprintf(b, sizeof b,
                "<text x=\"%g\" y=\"%g\" fill=\"darkgreen\">Pareto front (%zu)</text>\n"
                "<text x=\"%g\" y=\"%g\" fill=\"orange\">baseline</text>\n",
                W - R - 160, T + 12, front.size(), W - R - 160, T + 28);
  o << b << "</svg>\n";
  return o.str();
}

void check_output(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw ConfigError(flag, path, "its folder " + parent.string() + " does not exist");
}

json candidate_json(const ss::Candidate& c, const Outcome& o) {
  const auto& s = c.scenario;
  const auto& p = s.parallelism;
  json j{{"id", c.id},
         {"label", c.label},
         {"baseline", c.baseline},
         {"tensor_model_parallel_size", p.tensor_model_parallel_size},
         {"pipeline_model_parallel_size", p.pipeline_model_parallel_size},
         {"context_parallel_size", p.context_parallel_size},
         {"data_parallel_size", data_parallel_size(s)},
         {"num_layers_per_virtual_pipeline_stage",
          p.num_layers_per_virtual_pipeline_stage ? json(*p.num_layers_per_virtual_pipeline_stage)
                                                  : json(nullptr)},
         {"virtual_pipeline_model_parallel_size", virtual_pipeline_size(s)},
         {"micro_batch_size", s.training.micro_batch_size},
         {"recompute_granularity", s.training.recompute_granularity},
         {"sequence_parallel", p.sequence_parallel},
         {"use_distributed_optimizer", p.use_distributed_optimizer},
         {"overlap_grad_reduce", p.overlap_grad_reduce},
         {"overlap_param_gather", p.overlap_param_gather},
         {"order", p.order},
         {"precision", ss::precision_of(s)},
         {"overlap_moe_expert_parallel_comm", p.overlap_moe_expert_parallel_comm},
         {"outcome", o.status},
         {"peak_memory_bytes", o.peak_memory_bytes},
         {"peak_memory_is_lower_bound", o.peak_is_lower_bound},
         {"probed_only", o.probed_only},
         {"lower_bound_seconds", o.lower_bound_seconds}};
  if (o.simulated_as >= 0) j["simulated_as"] = o.simulated_as;
  if (o.status == "simulated") {
    j["rank"] = o.rank;
    for (const char* k : {"iteration_seconds", "tokens_per_second", "model_tflops_per_gpu",
                          "hardware_tflops_per_gpu", "mfu", "bubble_fraction", "exposed_seconds",
                          "peer_wait_seconds", "max_peak_memory_bytes", "wall_seconds"})
      if (o.report.contains(k)) j[k] = o.report[k];
  }
  if (!o.error.empty()) j["error"] = o.error;
  return j;
}

std::string csv_of(const json& cands) {
  const std::vector<std::string> cols{"id",
                                      "label",
                                      "baseline",
                                      "outcome",
                                      "rank",
                                      "tensor_model_parallel_size",
                                      "pipeline_model_parallel_size",
                                      "context_parallel_size",
                                      "data_parallel_size",
                                      "virtual_pipeline_model_parallel_size",
                                      "micro_batch_size",
                                      "recompute_granularity",
                                      "sequence_parallel",
                                      "use_distributed_optimizer",
                                      "overlap_grad_reduce",
                                      "overlap_param_gather",
                                      "order",
                                      "precision",
                                      "peak_memory_bytes",
                                      "peak_memory_is_lower_bound",
                                      "lower_bound_seconds",
                                      "iteration_seconds",
                                      "tokens_per_second",
                                      "model_tflops_per_gpu",
                                      "mfu",
                                      "bubble_fraction",
                                      "simulated_as"};
  std::ostringstream out;
  for (std::size_t i = 0; i < cols.size(); ++i) out << (i ? "," : "") << cols[i];
  for (const char* k : {"tp", "pp", "dp"}) out << ",exposed_" << k << "_seconds";
  out << "\n";
  for (const auto& c : cands) {
    for (std::size_t i = 0; i < cols.size(); ++i) {
      out << (i ? "," : "");
      if (!c.contains(cols[i]) || c[cols[i]].is_null()) continue;
      const json& v = c[cols[i]];
      if (v.is_string())
        out << "\"" << v.get<std::string>() << "\"";
      else
        out << v.dump();
    }
    for (const char* k : {"tp", "pp", "dp"}) {
      out << ",";
      if (c.contains("exposed_seconds") && c["exposed_seconds"].contains(k))
        out << c["exposed_seconds"][k].dump();
    }
    out << "\n";
  }
  return out.str();
}

void run_search(SearchCliOptions& o) {
  const auto t0 = Clock::now();
  // Under mpirun the rank and size come from the launcher's environment, so that the dry-run
  // workers are forked before MPI starts (a process must not fork after MPI_Init).
  const Ranks ranks = ranks_from_environment();
  const bool root = ranks.rank == 0;
  if (o.jobs == 0)
    o.jobs =
        ranks.size > 1 ? 1 : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  Scenario base = resolve_scenario(o.scenario, false);
  const int world = base.cluster.world_size;  // --world-size is the scenario's flag
  if (o.top < 1) throw ConfigError("--top", std::to_string(o.top), "must be ≥ 1");
  if (o.memory_headroom < 0 || o.memory_headroom >= 1)
    throw ConfigError("--memory-headroom", std::to_string(o.memory_headroom),
                      "must be a fraction of GPU memory in [0, 1)");
  const Topology topology = load_topology(sim::topology_of(base));
  base.cluster.gpus_per_node = topology.node.gpus_per_node;
  std::optional<sim::CalibrationTable> table;
  if (!o.calibration.empty()) table = sim::load_calibration(o.calibration);
  check_output("--json", o.json_path);
  check_output("--csv", o.csv_path);
  check_output("--svg", o.svg_path);
  check_output("--best-scenario", o.best_scenario_path);
  check_output("--best-report", o.best_report_path);
  ss::SearchSpace space = ss::default_space(base, world);
  // Tensor parallelism may span the nodes of an NVLink domain (a GB200 NVL72 rack's trays of
  // 4): its sizes are the world's divisors up to the domain, not up to the node.
  if (topology.nvlink_domain.gpus > 0) {
    auto& tp = space.values["tensor_model_parallel_size"];
    tp.clear();
    for (int d = 1; d <= std::min(world, topology.nvlink_domain.gpus); ++d)
      if (world % d == 0) tp.push_back(std::to_string(d));
  }
  if (!o.only.empty()) ss::only(space, base, o.only);
  for (const auto& v : o.vary) ss::vary(space, v);
  for (const auto& f : o.fix) ss::fix(space, f);

  // FP8 recipes the GPU lacks (MXFP8 before Blackwell, FP8 before Ada) are pruned under
  // Transformer Engine's rule, as tandem simulate refuses them.
  const ss::Enumeration e = ss::enumerate(
      base, world, space, [&topology](const Scenario& s) { sim::check_fp8_gpu(s, topology.gpu); });
  if (e.valid.empty()) throw ConfigError("search space", "", "no candidate passes the validator");
  const bool tty = root && !o.quiet && isatty(STDERR_FILENO);
  const ScratchDir scratch(ranks.rank);

  // Dry runs: one per distinct key, split over ranks, then `jobs` workers per rank.
  std::map<std::string, std::size_t> key_index;
  std::vector<Scenario> keyed;
  std::vector<std::size_t> key_of(e.valid.size());
  for (std::size_t i = 0; i < e.valid.size(); ++i) {
    // The unit whose renumbering changes no route: the NVLink domain (a GB200 NVL72 rack's
    // trays differ only in which NICs they own, and NCCL counts a rack's NICs together).
    const std::string k = dry_run_key(e.valid[i].scenario, gpus_per_nvlink_domain(topology));
    auto [it, inserted] = key_index.emplace(k, keyed.size());
    if (inserted) keyed.push_back(e.valid[i].scenario);
    key_of[i] = it->second;
  }
  std::map<std::size_t, std::vector<std::size_t>> twins_of;  // dry-run key → its candidates
  for (std::size_t i = 0; i < e.valid.size(); ++i) twins_of[key_of[i]].push_back(i);
  auto cost = std::make_shared<sim::CostModel>(topology.gpu, table);
  const sim::SimDevice::Pricer pricer = [cost](const sim::OpDesc& op) { return cost->seconds(op); };
  const auto gpu_bytes = static_cast<double>(topology.gpu.memory.value);
  const double budget = gpu_bytes * (1 - o.memory_headroom);
  const ss::DryRunSteps steps =
      o.all_microbatches ? ss::DryRunSteps::all : ss::DryRunSteps::extrapolated;
  // One process probes every key on its last pipeline stage (DryRunStages::last) and steps
  // in full only the keys whose probe bound is still under the K-th best simulated time.
  // Under mpirun every key is stepped in full before MPI starts: a rank must not fork after
  // MPI_Init, and the later dry runs would need forked workers.
  const bool probing = !ranks.mpi && !o.no_probe;
  std::vector<json> dry(keyed.size());
  std::vector<bool> stepped(keyed.size(), !probing);  // dry-run on every stage
  std::size_t probes = 0, full_dry_runs = 0;
  double dry_seconds = 0;
  std::vector<json> mine;  // under mpirun: this rank's share of the keys, as keyed[rank + k·size]
  {
    const auto td0 = Clock::now();
    std::vector<Scenario> my_keys;
    for (std::size_t k = static_cast<std::size_t>(ranks.rank); k < keyed.size();
         k += static_cast<std::size_t>(ranks.size))
      my_keys.push_back(keyed[k]);
    mine = parallel_dry_run(my_keys, topology, pricer, static_cast<std::int64_t>(budget), steps,
                            probing ? ss::DryRunStages::last : ss::DryRunStages::all, o.jobs,
                            scratch.path(), tty);
    dry_seconds += std::chrono::duration<double>(Clock::now() - td0).count();
  }
  const MpiSession mpi(ranks);
  {
    const auto td0 = Clock::now();
    json part = json::array();
    for (const auto& m : mine) part.push_back(m);
    const auto parts = all_gather_text(ranks, part.dump());
    for (std::size_t r = 0; r < parts.size(); ++r) {
      const json p = json::parse(parts[r]);
      for (std::size_t k = 0; k < p.size(); ++k) dry[r + k * parts.size()] = p[k];
    }
    dry_seconds += std::chrono::duration<double>(Clock::now() - td0).count();
    (probing ? probes : full_dry_runs) = keyed.size();
  }

  std::vector<Outcome> outs(e.valid.size());
  // Key k's latest dry run (probe or full) to its candidates, before any is simulated.
  auto apply_dry_run = [&](std::size_t k) {
    const json& d = dry[k];
    if (!d.value("probe", false)) stepped[k] = true;  // one stage is the whole pipeline
    for (const std::size_t i : twins_of[k]) {
      Outcome& out = outs[i];
      out.peak_memory_bytes = d["peak_memory_bytes"].get<std::int64_t>();
      out.over_before_step = d["over_budget_before_step"].get<bool>();
      out.over_in_step = d["over_budget_in_step"].get<bool>();
      out.probed_only = !stepped[k];
      out.peak_is_lower_bound = out.over_before_step || out.over_in_step || out.probed_only;
      out.lower_bound_seconds = d["lower_bound_seconds"].get<double>();
      out.status =
          static_cast<double>(out.peak_memory_bytes) > budget ? "pruned_memory" : "estimated_only";
    }
  };
  for (std::size_t k = 0; k < keyed.size(); ++k) apply_dry_run(k);
  // The baseline is simulated in the first round whatever its bound, to say where it ranks.
  const std::size_t baseline = e.valid.front().baseline ? 0 : e.valid.size();

  // Simulate in bound order; stop when the next bound exceeds the K-th best simulated
  // iteration time.
  const std::size_t round_size =
      static_cast<std::size_t>(ranks.size) * static_cast<std::size_t>(o.jobs);
  std::vector<double> times;       // simulated iteration times, sorted
  std::vector<std::size_t> order;  // stepped candidates still estimated only, by bound
  std::size_t next = 0;
  bool first_round = true;
  std::size_t simulated = 0, failed = 0, shared = 0;
  double sim_seconds = 0;
  const Progress bar(tty, "simulating");
  auto kth_best = [&] {
    return times.size() >= static_cast<std::size_t>(o.top)
               ? times[static_cast<std::size_t>(o.top - 1)]
               : std::numeric_limits<double>::infinity();
  };
  auto qualifying = [&] {
    std::size_t n = 0;
    for (std::size_t k = next; k < order.size(); ++k)
      if (outs[order[k]].lower_bound_seconds <= kth_best()) ++n;
    return n;
  };
  auto make_sim = [&](std::size_t i) {
    const auto& c = e.valid[i];
    const auto file = scratch.path() / ("c" + std::to_string(c.id) + ".json");
    std::ofstream(file) << to_json(c.scenario).dump(2);
    ChildSimulation sim{c.label,
                        {"simulate", file.string(), "--quiet", "--mode", "symmetric"},
                        scratch.path() / ("c" + std::to_string(c.id) + ".out.json"),
                        scratch.path() / ("c" + std::to_string(c.id) + ".log")};
    sim.args.insert(sim.args.end(), {"--json", sim.json.string()});
    if (!o.calibration.empty()) sim.args.insert(sim.args.end(), {"--calibration", o.calibration});
    return sim;
  };
  auto outcome_of = [](std::size_t i, const ChildResult& result) {
    json r{{"index", i}, {"ok", result.ok}};
    if (result.ok) {
      json rep = result.report;
      rep.erase("ranks");
      r["report"] = rep;
    } else {
      r["error"] = result.error;
    }
    return r;
  };
  // Candidates equal up to a rank order that only renumbers the nodes (ss::placement_key)
  // simulate alike: the first one picked is simulated, and its result goes to every twin
  // not decided yet as soon as it is in, whatever the twins' bounds. So which twins share a
  // result does not depend on when a simulation finished (one process pulls the next
  // candidate as a child ends, several ranks go in rounds), and both give one ranking.
  std::map<std::size_t, std::size_t> simulated_for;  // dry-run key → the candidate simulated
  auto share = [&](std::size_t from, std::size_t to) {
    outs[to].status = outs[from].status;
    outs[to].report = outs[from].report;
    outs[to].error = outs[from].error;
    outs[to].simulated_as = e.valid[from].id;
    if (outs[to].status == "simulated") {
      const double t = outs[to].report["iteration_seconds"].get<double>();
      times.insert(std::upper_bound(times.begin(), times.end(), t), t);
      ++simulated;
    } else {
      ++failed;
    }
    ++shared;
  };
  // Whether candidate i needs a simulation of its own; if not, it has (or will get) its twin's.
  auto needs_simulation = [&](std::size_t i) {
    if (outs[i].status != "estimated_only") return false;  // a twin's result, shared
    return simulated_for.emplace(key_of[i], i).second;
  };
  auto record = [&](const json& r) {
    const auto i = r["index"].get<std::size_t>();
    if (r["ok"].get<bool>()) {
      outs[i].status = "simulated";
      outs[i].report = r["report"];
      const double t = r["report"]["iteration_seconds"].get<double>();
      times.insert(std::upper_bound(times.begin(), times.end(), t), t);
      ++simulated;
    } else {
      outs[i].status = "failed";
      outs[i].error = r["error"].get<std::string>();
      ++failed;
    }
    for (const std::size_t twin : twins_of[key_of[i]])
      if (twin != i && outs[twin].status == "estimated_only") share(i, twin);
  };
  auto progress = [&] {
    bar.update(simulated + failed, simulated + failed + qualifying(),
               "  (K-th best " + std::to_string(kth_best()).substr(0, 6) + " s)");
  };
  // Simulates the stepped candidates still estimated only, in bound order, until the next
  // bound exceeds the K-th best simulated time.
  auto simulate_in_bound_order = [&] {
    const auto ts = Clock::now();
    order.clear();
    next = 0;
    for (std::size_t i = 0; i < outs.size(); ++i)
      if (outs[i].status == "estimated_only" && stepped[key_of[i]]) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return outs[a].lower_bound_seconds < outs[b].lower_bound_seconds;
    });
    if (ranks.size == 1) {
      // One process: a new child starts as soon as one finishes, with the next candidate in
      // bound order whose bound is still under the K-th best simulated time. The K-th best
      // only falls, so a candidate refused once stays refused: the top K is as exact as in
      // rounds, with no core idle while a round's slowest simulation finishes.
      std::map<std::filesystem::path, std::size_t> index_of;
      auto next_sim = [&]() -> std::optional<ChildSimulation> {
        std::size_t pick = e.valid.size();
        if (first_round && baseline < e.valid.size() && outs[baseline].status == "estimated_only") {
          pick = baseline;
          needs_simulation(baseline);
        } else {
          while (pick == e.valid.size() && next < order.size() &&
                 outs[order[next]].lower_bound_seconds <= kth_best()) {
            const std::size_t i = order[next++];
            if (i != baseline && needs_simulation(i)) pick = i;
          }
        }
        first_round = false;
        if (pick == e.valid.size()) return std::nullopt;
        ChildSimulation sim = make_sim(pick);
        index_of[sim.json] = pick;
        return sim;
      };
      // Not under mpirun, this process holds no threads, MPI or SimGrid engine (the dry runs
      // ran in forked workers): the children are forks that run the command line.
      const ChildRunner in_fork = [](const std::vector<std::string>& args) {
        return run_command_line(args);
      };
      run_pulled_simulations(
          o.jobs, next_sim,
          [&](const ChildSimulation& sim, const ChildResult& result) {
            record(outcome_of(index_of.at(sim.json), result));
            progress();
          },
          ranks.mpi ? ChildRunner{} : in_fork);
    }
    // Several processes (mpirun): rounds of R × J simulations in bound order, gathered after
    // each round so that every rank decides the next round alike.
    while (ranks.size > 1) {
      std::vector<std::size_t> batch;
      if (first_round && baseline < e.valid.size() && outs[baseline].status == "estimated_only") {
        batch.push_back(baseline);  // and never again below
        needs_simulation(baseline);
      }
      while (batch.size() < round_size && next < order.size() &&
             outs[order[next]].lower_bound_seconds <= kth_best()) {
        if (order[next] != baseline && needs_simulation(order[next])) batch.push_back(order[next]);
        ++next;
      }
      first_round = false;
      if (batch.empty()) break;
      std::vector<ChildSimulation> sims;
      std::vector<std::size_t> which;
      for (std::size_t b = static_cast<std::size_t>(ranks.rank); b < batch.size();
           b += static_cast<std::size_t>(ranks.size)) {
        sims.push_back(make_sim(batch[b]));
        which.push_back(batch[b]);
      }
      const auto results = run_child_simulations(sims, o.jobs);
      json part = json::array();
      for (std::size_t k = 0; k < results.size(); ++k)
        part.push_back(outcome_of(which[k], results[k]));
      for (const auto& text : all_gather_text(ranks, part.dump()))
        for (const auto& r : json::parse(text)) record(r);
      progress();
    }
    sim_seconds += std::chrono::duration<double>(Clock::now() - ts).count();
  };
  if (!probing) {
    simulate_in_bound_order();
  } else {
    // The keys their probe left open, by probe bound: stepped in full in chunks, the lowest
    // bounds first, each chunk simulated before the next is taken, against the K-th best
    // time so far. A key never stepped has a probe bound, itself a lower bound on its
    // iteration time, above a K-th best time that only falls: it cannot enter the top K.
    std::vector<std::size_t> open;
    for (std::size_t k = 0; k < keyed.size(); ++k)
      if (!stepped[k] && outs[twins_of[k].front()].status == "estimated_only") open.push_back(k);
    auto probe_bound = [&](std::size_t k) { return dry[k]["lower_bound_seconds"].get<double>(); };
    std::stable_sort(open.begin(), open.end(),
                     [&](std::size_t a, std::size_t b) { return probe_bound(a) < probe_bound(b); });
    const std::size_t baseline_key = baseline < e.valid.size() ? key_of[baseline] : keyed.size();
    // The first chunk holds a few candidates per simulation slot; it doubles while fewer
    // than K fit in memory, and once the K-th best time exists the rest go in one chunk.
    std::size_t taken = 0,
                chunk = std::max<std::size_t>(32, 4 * static_cast<std::size_t>(o.top * o.jobs));
    for (;;) {
      std::vector<std::size_t> batch;
      if (baseline_key < keyed.size() && !stepped[baseline_key] &&
          outs[baseline].status == "estimated_only")
        batch.push_back(baseline_key);
      while (taken < open.size() && batch.size() < chunk &&
             probe_bound(open[taken]) <= kth_best()) {
        const std::size_t k = open[taken++];
        if (!stepped[k]) batch.push_back(k);
      }
      if (!batch.empty()) {
        const auto td = Clock::now();
        std::vector<Scenario> scenarios;
        for (const std::size_t k : batch) scenarios.push_back(keyed[k]);
        const auto results =
            parallel_dry_run(scenarios, topology, pricer, static_cast<std::int64_t>(budget), steps,
                             ss::DryRunStages::all, o.jobs, scratch.path(), tty);
        dry_seconds += std::chrono::duration<double>(Clock::now() - td).count();
        full_dry_runs += batch.size();
        for (std::size_t b = 0; b < batch.size(); ++b) {
          dry[batch[b]] = results[b];
          apply_dry_run(batch[b]);
        }
      }
      // Also when no key needed stepping: a probe of one stage is the whole pipeline's.
      simulate_in_bound_order();
      if (batch.empty()) break;
      chunk = std::isfinite(kth_best()) ? open.size() + 1 : 2 * chunk;
    }
  }
  bar.done();

  // Rank the simulated by iteration time (ties: enumeration order).
  std::vector<std::size_t> ranked;
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (outs[i].status == "simulated") ranked.push_back(i);
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    return outs[a].report["iteration_seconds"].get<double>() <
           outs[b].report["iteration_seconds"].get<double>();
  });
  for (std::size_t r = 0; r < ranked.size(); ++r) outs[ranked[r]].rank = static_cast<int>(r + 1);
  const std::size_t estimated_only = static_cast<std::size_t>(std::count_if(
      outs.begin(), outs.end(), [](const Outcome& x) { return x.status == "estimated_only"; }));
  std::int64_t pruned_memory = 0, pruned_before_step = 0, pruned_in_step = 0;
  for (const Outcome& x : outs) {
    if (x.status != "pruned_memory") continue;
    ++pruned_memory;
    pruned_before_step += x.over_before_step;
    pruned_in_step += x.over_in_step;
  }
  if (!root) return;

  std::int64_t invalid = 0, duplicates = 0;
  for (const auto& [rule, n] : e.pruned)
    (rule.rfind("duplicate", 0) == 0 ? duplicates : invalid) += n;
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  char line[512];
  std::snprintf(line, sizeof line,
                "tandem search %s: world size %d on %s, global batch %d, %d jobs × %d rank(s)\n",
                base.name.c_str(), world, topology.name.c_str(), base.training.global_batch_size,
                o.jobs, ranks.size);
  std::cout << line;
  std::snprintf(
      line, sizeof line,
      "  enumerated %lld: invalid %lld, duplicate %lld, valid %zu (%zu probed on their "
      "last stage, %zu dry runs on every stage: %.1f s); over memory %lld; simulated "
      "%zu (%zu failed; %zu by a twin's simulation: same layout up to node "
      "numbering) in %.1f s (%.2f s each on %d core(s)); estimated only %zu\n",
      static_cast<long long>(e.enumerated), static_cast<long long>(invalid),
      static_cast<long long>(duplicates), e.valid.size(), probes, full_dry_runs, dry_seconds,
      static_cast<long long>(pruned_memory), simulated, failed, shared, sim_seconds,
      simulated + failed > shared
          ? sim_seconds * o.jobs * ranks.size / static_cast<double>(simulated + failed - shared)
          : 0.0,
      o.jobs * ranks.size, estimated_only);
  std::cout << line;
  if (estimated_only > 0) {
    std::snprintf(line, sizeof line,
                  "  the %zu estimated-only candidates have a lower bound on their iteration "
                  "time above the %d-th best simulated time (%.3f s): none can enter the top "
                  "%d, which is exact\n",
                  estimated_only, o.top, kth_best(), o.top);
    std::cout << line;
  }
  std::cout << "  pruned:\n";
  for (const auto& [rule, n] : e.pruned) std::cout << "    " << n << "  " << rule << "\n";
  if (pruned_memory > 0)
    std::cout << "    " << pruned_memory << "  memory: high-water mark (dry run) over "
              << (1 - o.memory_headroom) * 100 << " % of " << gib(topology.gpu.memory.value)
              << " GiB (" << pruned_before_step
              << " of them already with the model built, before a step; " << pruned_in_step
              << " during the step, which stopped there)\n";
  std::cout
      << "\nrank  iter (s)    tokens/s  TFLOP/s   MFU  bubble exp tp  exp pp  exp dp  mem GiB "
         " layout\n";
  for (std::size_t r = 0; r < ranked.size() && r < static_cast<std::size_t>(o.top); ++r)
    std::cout << format_row(static_cast<int>(r + 1), e.valid[ranked[r]], outs[ranked[r]]) << "\n";
  if (baseline < outs.size()) {
    const Outcome& b = outs[baseline];
    if (b.status == "simulated") {
      if (b.rank > o.top) std::cout << format_row(b.rank, e.valid[baseline], b) << "\n";
      // Candidates left estimated-only whose bound is below the baseline's time may beat it.
      const double bt = b.report["iteration_seconds"].get<double>();
      const auto could_beat = std::count_if(outs.begin(), outs.end(), [&](const Outcome& x) {
        return x.status == "estimated_only" && x.lower_bound_seconds < bt;
      });
      std::cout << "\nbaseline (" << e.valid[baseline].label << ") ranks " << b.rank << " of "
                << ranked.size() << " simulated";
      if (could_beat > 0)
        std::cout << " (overall between " << b.rank << " and " << b.rank + could_beat << ": "
                  << could_beat << " estimated-only candidates have a bound below its time)";
      if (!ranked.empty() && ranked.front() != baseline)
        std::cout << "; best " << e.valid[ranked.front()].label << ": baseline "
                  << why_slower(outs[ranked.front()].report, b.report);
      std::cout << "\n";
    } else {
      std::cout << "\nbaseline (" << e.valid[baseline].label << "): " << b.status
                << (b.status == "pruned_memory"
                        ? " (" + std::to_string(gib(b.peak_memory_bytes)).substr(0, 6) + " GiB)"
                        : "")
                << "\n";
    }
  }
  json cands = json::array();
  for (std::size_t i = 0; i < e.valid.size(); ++i)
    cands.push_back(candidate_json(e.valid[i], outs[i]));
  if (!o.json_path.empty()) {
    json pruned = e.pruned;
    json j{{"scenario", base.name},
           {"topology", topology.name},
           {"world_size", world},
           {"global_batch_size", base.training.global_batch_size},
           {"top", o.top},
           {"jobs", o.jobs},
           {"mpi_ranks", ranks.size},
           {"memory_headroom", o.memory_headroom},
           {"gpu_memory_bytes", topology.gpu.memory.value},
           {"counts",
            {{"enumerated", e.enumerated},
             {"invalid", invalid},
             {"duplicate", duplicates},
             {"valid", e.valid.size()},
             {"probes", probes},
             {"dry_runs", full_dry_runs},
             {"pruned_memory", pruned_memory},
             {"pruned_memory_before_step", pruned_before_step},
             {"pruned_memory_in_step", pruned_in_step},
             {"simulated", simulated},
             {"shared_simulation", shared},
             {"failed", failed},
             {"estimated_only", estimated_only}}},
           {"pruned", pruned},
           {"kth_best_seconds", std::isfinite(kth_best()) ? json(kth_best()) : json(nullptr)},
           {"bound",
            "estimated_only candidates have lower_bound_seconds > kth_best_seconds: the compute "
            "stream's busy time and pipeline fill/drain from the dry run, which no simulation "
            "can beat, so the top K by simulated iteration time is exact"},
           {"seconds", {{"dry_run", dry_seconds}, {"simulate", sim_seconds}, {"wall", wall}}},
           {"ranking",
            [&] {
              json r = json::array();
              for (auto i : ranked) r.push_back(e.valid[i].id);
              return r;
            }()},
           {"candidates", cands}};
    write_file(o.json_path, j.dump(1) + "\n");
    std::cout << "wrote " << o.json_path << "\n";
  }
  if (!o.best_scenario_path.empty()) {
    if (ranked.empty())
      throw std::runtime_error("--best-scenario: no candidate was simulated, so none is best");
    Scenario best = e.valid[ranked.front()].scenario;
    best.description += (best.description.empty() ? "" : " ") +
                        std::string("Layout picked by tandem search (the fastest simulated): ") +
                        e.valid[ranked.front()].label + ".";
    write_file(o.best_scenario_path, to_json(best).dump(2) + "\n");
    std::cout << "wrote " << o.best_scenario_path << "\n";
  }
  if (!o.best_report_path.empty()) {
    if (ranked.empty())
      throw std::runtime_error("--best-report: no candidate was simulated, so none is best");
    write_file(o.best_report_path, outs[ranked.front()].report.dump(2) + "\n");
    std::cout << "wrote " << o.best_report_path << "\n";
  }
  if (!o.csv_path.empty()) {
    write_file(o.csv_path, csv_of(cands));
    std::cout << "wrote " << o.csv_path << "\n";
  }
  if (!o.svg_path.empty()) {
    write_file(o.svg_path,
               pareto_svg(e.valid, outs,
                          "tandem search " + base.name + ": " + std::to_string(world) + " GPUs",
                          gib(topology.gpu.memory.value)));
    std::cout << "wrote " << o.svg_path << "\n";
  }
  std::snprintf(line, sizeof line, "searched in %.1f s wall\n", wall);
  std::cout << line;
}

}  // namespace

void add_search_command(CLI::App& app) {
  auto opts = std::make_shared<SearchCliOptions>();
  auto* cmd = app.add_subcommand(
      "search",
      "Which layout should I run? Keeps the model, global batch and world size, enumerates the "
      "layouts Megatron accepts (tp, pp, cp, interleaving, micro batch, recomputation, sequence "
      "parallelism, distributed optimizer, overlaps, rank order), prunes invalid ones and those "
      "over memory, simulates the promising rest and ranks them (exact top K)");
  cmd->add_option("--jobs,-j", opts->jobs,
                  "Simulations and dry runs at once per process (default: one per core; one "
                  "per rank under mpirun)")
      ->check(positive());
  cmd->add_option("--top", opts->top, "Candidates ranked exactly and shown")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--json", opts->json_path, "Every candidate with its outcome, as JSON");
  cmd->add_option("--csv", opts->csv_path, "Every candidate with its outcome, as CSV");
  cmd->add_option("--svg", opts->svg_path, "Throughput vs memory per GPU with the Pareto front");
  cmd->add_option("--vary", opts->vary,
                  "FIELD=V1,V2,…: search these values (tp, pp, cp, vp, mbs, recompute, sp, "
                  "distopt, overlap_grad, overlap_param, order, embed_split, loss_split, "
                  "moe_overlap, or the "
                  "Megatron names; precision=bf16,fp8,fp8-tensorwise,fp8-blockwise,mxfp8 "
                  "compares bf16 with FP8 recipes; a bare FIELD, e.g. --vary precision or "
                  "--vary sp, takes every value the field has)");
  cmd->add_option("--fix", opts->fix, "FIELD=VALUE: search only this value");
  cmd->add_option("--only", opts->only,
                  "FIELD,…: search only these fields (as --vary names them); every other "
                  "field keeps the scenario's value (--vary and --fix still apply after it)")
      ->delimiter(',');
  cmd->add_option("--best-scenario", opts->best_scenario_path,
                  "Write the fastest simulated candidate's scenario as JSON (tandem simulate "
                  "runs it)");
  cmd->add_option("--best-report", opts->best_report_path,
                  "Write the fastest simulated candidate's simulation report as JSON (what "
                  "tandem simulate --mode symmetric --json writes for it, without the per-rank "
                  "detail)");
  cmd->add_option("--memory-headroom", opts->memory_headroom,
                  "Fraction of GPU memory to keep free (0.1: prune above 90 %)")
      ->capture_default_str();
  cmd->add_option("--calibration", opts->calibration, "Calibration table for every simulation");
  cmd->add_flag("--all-microbatches", opts->all_microbatches,
                "Dry runs step every microbatch instead of extrapolating each stage's step "
                "from two short ones (slower; for checking the extrapolation)");
  cmd->add_flag("--no-probe", opts->no_probe,
                "Dry-run every candidate on every pipeline stage, without probing its last "
                "stage first (as under mpirun; slower, for checking the probe)");
  cmd->add_flag("--quiet", opts->quiet, "No progress bar");
  opts->scenario.without_file = ScenarioOptions::WithoutFile::megatron_when_flagged;
  add_scenario_options(*cmd, opts->scenario);
  cmd->callback([opts] { run_search(*opts); });
}

}  // namespace tandem::cli
