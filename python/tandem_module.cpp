// The `tandem` Python module: scenarios from a dict, a file or Megatron flags, and
// simulate / layout / schedule / validate returning plain dicts and lists (the JSON the
// command line writes with --json, as Python objects). Each simulation runs in a fork()ed
// child (python/child_process.hpp), so a notebook can call simulate() again and again.
//
//   import tandem
//   r = tandem.simulate("scenarios/pp4-bubble.json", global_batch_size=16)
//   print(r["iteration_seconds"], r["bubble_fraction"])
#include <fcntl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "python/child_process.hpp"
#include "schedules/layout.hpp"
#include "schedules/schedule.hpp"
#include "schedules/timeline.hpp"
#include "sim/calibration.hpp"
#include "sim/cost_model.hpp"
#include "sim/search/search_space.hpp"
#include "sim/sim_runner.hpp"
#include "tools/measured_runs.hpp"
#include "tools/published_table.hpp"
#include "topology/placement.hpp"
#include "topology/topology_io.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace tandem::python {
namespace {

// JSON ↔ Python through the json module: exact for everything the reports hold.
py::object to_python(const json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}
json from_python(py::handle obj) {
  return json::parse(py::module_::import("json").attr("dumps")(obj).cast<std::string>());
}

bool is_path_like(py::handle obj) {
  return py::isinstance<py::str>(obj) ||
         py::isinstance(obj, py::module_::import("os").attr("PathLike"));
}
std::string path_text(py::handle obj) {
  return py::module_::import("os").attr("fspath")(obj).cast<std::string>();
}

// A keyword override's value as the command line would spell it.
std::string override_text(py::handle value) {
  if (value.is_none()) return "none";
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::string out;
    for (auto item : value) out += (out.empty() ? "" : ",") + py::str(item).cast<std::string>();
    return out;
  }
  return py::str(value).cast<std::string>();
}

// Megatron flags as pairs: "--x v", "--x=v", a bare "--flag" (store_true) and the
// space-separated lists of --rampup-batch-size. A string is split as a shell would.
std::vector<std::pair<std::string, std::string>> flag_pairs(py::handle flags) {
  std::vector<std::string> tokens;
  if (py::isinstance<py::str>(flags))
    tokens = py::module_::import("shlex").attr("split")(flags).cast<std::vector<std::string>>();
  else
    for (auto t : flags) tokens.push_back(py::str(t).cast<std::string>());
  std::vector<std::pair<std::string, std::string>> pairs;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (!t.starts_with("--"))
      throw ConfigError("flags", t, "expected a --flag here (values follow their flag)");
    if (const auto eq = t.find('='); eq != std::string::npos) {
      pairs.emplace_back(t.substr(0, eq), t.substr(eq + 1));
      continue;
    }
    std::string value;
    while (i + 1 < tokens.size() && !tokens[i + 1].starts_with("--"))
      value += (value.empty() ? "" : ",") + tokens[++i];
    pairs.emplace_back(t, value.empty() ? "true" : value);
  }
  return pairs;
}

// The scenario a call names: None (the built-in default), a path, a dict in the JSON form,
// with Megatron `flags` and keyword overrides applied on top, then validated.
Scenario make_scenario(py::handle source, py::handle flags, const py::kwargs& overrides,
                       bool validate_it = true) {
  Scenario s;
  if (source.is_none())
    s = default_scenario();
  else if (py::isinstance<py::dict>(source))
    s = parse_scenario(from_python(source), "dict");
  else if (is_path_like(source))
    s = load_scenario(path_text(source));
  else
    throw ConfigError("scenario", py::repr(source).cast<std::string>(),
                      "must be None, a path to a scenario JSON file or a dict");
  std::vector<std::pair<std::string, std::string>> kv;
  if (!flags.is_none()) kv = flag_pairs(flags);
  for (auto [key, value] : overrides) kv.emplace_back(py::str(key), override_text(value));
  apply_overrides(s, kv);
  if (validate_it) validate(s);
  return s;
}

Topology make_topology(py::handle obj, const Scenario& s) {
  if (obj.is_none()) return load_topology(sim::topology_of(s));
  if (py::isinstance<py::dict>(obj)) return parse_topology(from_python(obj), "dict");
  return load_topology(path_text(obj));
}

json scenario_json(const Scenario& s) {
  json j = to_json(s);
  j["derived"] = {{"data_parallel_size", data_parallel_size(s)},
                  {"virtual_pipeline_model_parallel_size", virtual_pipeline_size(s)},
                  {"padded_vocab_size", padded_vocab_size(s)},
                  {"ffn_hidden_size", ffn_hidden_size(s)},
                  {"pipeline_schedule", effective_pipeline_schedule(s)}};
  return j;
}

// Waiting for children with the interpreter's lock released; Ctrl-C stops them.
std::vector<ChildOutcome> run_children(const std::vector<std::function<json()>>& work, int jobs) {
  bool interrupted = false;
  std::vector<ChildOutcome> out;
  {
    py::gil_scoped_release release;
    out = run_in_children(work, jobs, [&] {
      py::gil_scoped_acquire acquire;
      interrupted = PyErr_CheckSignals() != 0;
      return interrupted;
    });
  }
  if (interrupted) throw py::error_already_set();
  return out;
}

// A child's error raised again in the parent as the same kind of exception.
[[noreturn]] void raise(const ChildOutcome& o, const std::string& what) {
  if (o.kind == "ConfigError") {
    std::vector<Violation> v;
    for (const auto& x : o.value.at("violations"))
      v.push_back({x.at("field"), x.at("value"), x.at("rule")});
    throw ConfigError(std::move(v), o.value.value("source", ""));
  }
  if (o.kind == "ScheduleError") throw ScheduleError(what + ": " + o.message);
  throw std::runtime_error(what + " failed (" + o.kind + "): " + o.message);
}

struct SimulateArgs {
  std::string mode = "symmetric";
  int iterations = 1;
  std::optional<std::string> calibration, trace;
  bool trace_ops = false;  // one trace slice per Device op (tandem simulate --trace-ops)
};

std::function<json()> simulation_work(const Scenario& s, const Topology& topology,
                                      const SimulateArgs& a) {
  if (s.cluster.gpus_per_node != topology.node.gpus_per_node)
    throw ConfigError("cluster.gpus_per_node", std::to_string(s.cluster.gpus_per_node),
                      "the topology " + topology.name + " has " +
                          std::to_string(topology.node.gpus_per_node) + " GPUs per node");
  if (a.mode != "full" && a.mode != "symmetric")
    throw ConfigError("mode", a.mode, "must be \"full\" or \"symmetric\"");
  if (a.iterations < 1)
    throw ConfigError("iterations", std::to_string(a.iterations), "must be ≥ 1");
  if (a.trace_ops && !a.trace)
    throw ConfigError("trace_ops", "True", "needs trace (it shapes the trace)");
  std::optional<sim::CalibrationTable> table;
  if (a.calibration) table = sim::load_calibration(*a.calibration);  // checked here, up front
  return [s, topology, a, table] {
    auto cost = std::make_shared<sim::CostModel>(topology.gpu, table);
    sim::SimulateOptions so;
    so.mode = a.mode == "full" ? sim::SimMode::full : sim::SimMode::symmetric;
    so.iterations = a.iterations;
    so.pricer = [cost](const sim::OpDesc& op) { return cost->seconds(op); };
    if (a.trace) so.trace_path = *a.trace;
    so.trace_ops = a.trace_ops;
    return sim::to_json(sim::simulate(s, topology, so));
  };
}

py::object simulate(py::handle scenario, py::handle topology, const std::string& mode,
                    int iterations, std::optional<std::string> calibration,
                    std::optional<std::string> trace, bool trace_ops, py::handle flags,
                    const py::kwargs& kw) {
  const Scenario s = make_scenario(scenario, flags, kw);
  const Topology t = make_topology(topology, s);
  auto work = simulation_work(s, t, {mode, iterations, calibration, trace, trace_ops});
  const auto out = run_children({work}, 1);
  if (!out[0].ok) raise(out[0], "simulating " + s.name);
  return to_python(out[0].value);
}

// The same JSON as `tandem layout --json`.
py::object layout(py::handle scenario, std::optional<int> tp, std::optional<int> pp,
                  std::optional<int> cp, std::optional<int> ep, py::handle flags,
                  const py::kwargs& kw) {
  const Scenario s = make_scenario(scenario, flags, kw, false);
  LayoutSpec spec{s.cluster.world_size,
                  tp.value_or(s.parallelism.tensor_model_parallel_size),
                  pp.value_or(s.parallelism.pipeline_model_parallel_size),
                  cp.value_or(s.parallelism.context_parallel_size),
                  ep.value_or(s.parallelism.expert_model_parallel_size),
                  s.parallelism.order};
  const Layout l = make_layout(spec);
  const int gpn = s.cluster.gpus_per_node;
  json groups = json::object();
  for (const auto& [kind, gs] : l.groups) groups[std::string(group_kind_name(kind))] = gs;
  json placement = json::array();
  for (const auto& p : place_ranks(l.sizes.world(), gpn))
    placement.push_back({{"rank", p.rank}, {"node", p.node}, {"gpu", p.local_rank}});
  const auto& sz = l.sizes;
  return to_python(
      {{"world_size", sz.world()},
       {"order", l.order},
       {"sizes", {{"tp", sz.tp}, {"cp", sz.cp}, {"ep", sz.ep}, {"dp", sz.dp}, {"pp", sz.pp}}},
       {"gpus_per_node", gpn},
       {"groups", groups},
       {"placement", placement}});
}

// The same JSON as `tandem schedule --json`: each stage's ops and the idealised timeline.
py::object schedule(py::handle scenario, std::optional<int> pp, std::optional<int> vpp,
                    std::optional<int> microbatches, std::optional<std::string> kind,
                    std::optional<int> group_size, double forward_ms, double backward_ms,
                    double p2p_ms, py::handle flags, const py::kwargs& kw) {
  const Scenario s = make_scenario(scenario, flags, kw);
  ScheduleSpec spec;
  spec.pp = pp.value_or(s.parallelism.pipeline_model_parallel_size);
  spec.vpp = vpp.value_or(pp ? 1 : virtual_pipeline_size(s));
  spec.num_microbatches = microbatches.value_or(
      s.training.global_batch_size / (s.training.micro_batch_size * data_parallel_size(s)));
  spec.microbatch_group_size =
      group_size.value_or(s.parallelism.microbatch_group_size_per_vp_stage.value_or(0));
  const std::string k = kind            ? *kind
                        : (!pp && !vpp) ? effective_pipeline_schedule(s)
                        : spec.vpp > 1  ? "interleaved"
                        : spec.pp == 1  ? "none"
                                        : "1f1b";
  const auto parsed = parse_schedule_kind(k);
  if (!parsed) throw ConfigError("kind", k, "must be one of none, gpipe, 1f1b, interleaved, zb-h1");
  spec.kind = *parsed;
  spec.overlap_p2p_comm = s.parallelism.overlap_p2p_comm && spec.kind == ScheduleKind::interleaved;
  for (auto [name, ms] :
       {std::pair{"forward_ms", forward_ms}, {"backward_ms", backward_ms}, {"p2p_ms", p2p_ms}})
    if (!(ms >= 0) || !std::isfinite(ms))
      throw ConfigError(name, std::to_string(ms), "must be a finite number ≥ 0");
  const IdealCosts costs{Seconds(forward_ms * 1e-3 / spec.vpp),
                         Seconds(backward_ms * 1e-3 / spec.vpp), Seconds(p2p_ms * 1e-3)};
  const Timeline tl = make_timeline(make_schedule(spec), costs);
  json ranks = json::array();
  for (const auto& ops : tl.schedule.ranks) {
    json list = json::array();
    for (const auto& op : ops) {
      if (op.is_compute()) {
        list.push_back({{"type", describe(op, false).substr(0, 1)},
                        {"microbatch", op.microbatch},
                        {"chunk", op.chunk}});
        continue;
      }
      if (op.type == OpType::p2p_wait) {
        list.push_back({{"type", "wait"}, {"call", p2p_call_name(op.call)}});
        continue;
      }
      json transfers = json::array();
      for (const auto& t : op.transfers)
        transfers.push_back({{"direction", p2p_direction_name(t.direction)},
                             {"microbatch", t.microbatch},
                             {"chunk", t.chunk},
                             {"peer", t.peer}});
      list.push_back({{"type", p2p_call_name(op.call)},
                      {"transfers", transfers},
                      {"overlapped", op.overlapped}});
    }
    ranks.push_back(list);
  }
  const double p = spec.pp, m = spec.num_microbatches, v = spec.vpp;
  return to_python({{"kind", schedule_kind_name(spec.kind)},
                    {"pp", spec.pp},
                    {"vpp", spec.vpp},
                    {"microbatches", spec.num_microbatches},
                    {"ranks", ranks},
                    {"idealised",
                     {{"forward_ms", forward_ms},
                      {"backward_ms", backward_ms},
                      {"p2p_ms", p2p_ms},
                      {"iteration_ms", tl.makespan.value * 1e3},
                      {"bubble_fraction", tl.bubble_fraction()},
                      {"closed_form_bubble_fraction", (p - 1) / (v * m + p - 1)}}}});
}

// `tandem validate DIR --json`: every scenario of DIR/published.csv simulated (symmetric
// mode, one child each, `jobs` at a time) and compared with the published figures.
py::object validate_published(const std::string& dir, int jobs,
                              std::optional<std::string> calibration,
                              const std::vector<std::string>& sets) {
  if (!std::filesystem::is_directory(dir))
    throw ConfigError("dir", dir, "must be a folder holding published.csv and its scenarios");
  const cli::PublishedTable table = cli::select_sets(cli::read_published_table(dir), sets);
  std::vector<std::string> names;
  std::vector<std::function<json()>> work;
  std::set<std::string> listed;
  for (const auto& row : table.rows) {
    if (!listed.insert(row.scenario).second) continue;
    const Scenario s = load_scenario(table.scenario_files.at(row.scenario));
    validate(s);
    names.push_back(row.scenario);
    work.push_back(simulation_work(s, load_topology(sim::topology_of(s)),
                                   {"symmetric", 1, calibration, std::nullopt}));
  }
  const auto out = run_children(work, jobs);
  std::map<std::string, json> reports;
  json failures = json::object();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].ok)
      reports[names[i]] = out[i].value;
    else
      failures[names[i]] = out[i].kind + ": " + out[i].message;
  }
  json j = cli::to_json(cli::compare_with_reports(table, reports), cli::fitted_parameters(table));
  j["published_csv"] = table.csv.string();
  j["mode"] = "symmetric";
  j["calibration"] = calibration ? json(*calibration) : json(nullptr);
  json summaries = json::object();
  for (auto [name, report] : reports) {
    report.erase("ranks");
    summaries[name] = report;
  }
  j["reports"] = summaries;
  j["failures"] = failures;
  return to_python(j);
}

// `tandem validate FILE.csv --json`: measured runs (tools/measured_runs.hpp), the rows of
// `half` (at most `limit` of each half; 0: all) simulated in children as the command line
// does, with each row's error and each half's summary.
py::object validate_measured(const std::string& csv, int jobs,
                             const std::optional<std::string>& calibration, const std::string& half,
                             int limit, const std::optional<std::string>& topology) {
  if (topology) load_topology(*topology);  // checked up front
  const cli::MeasuredTable table = cli::read_measured_runs(csv, topology.value_or(""));
  const std::vector<const cli::MeasuredRun*> runs = cli::select_runs(table, half, limit);
  std::vector<std::function<json()>> work;
  for (const cli::MeasuredRun* run : runs)
    work.push_back(simulation_work(run->scenario, load_topology(sim::topology_of(run->scenario)),
                                   {"symmetric", 1, calibration, std::nullopt}));
  const auto out = run_children(work, jobs);
  std::map<std::size_t, json> reports;
  json failures = json::object();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].ok)
      reports[i] = out[i].value;
    else
      failures[runs[i]->scenario.name] = out[i].kind + ": " + out[i].message;
  }
  json j = cli::to_json(cli::compare_measured(runs, reports));
  j["csv"] = table.csv.string();
  j["mode"] = "symmetric";
  j["split"] = cli::kSplitRule;
  for (const auto& [i, report] : reports)
    if (report.contains("breakdown")) j["rows"][i]["breakdown"] = report.at("breakdown");
  j["failures"] = failures;
  return to_python(j);
}

// `tandem validate PATH`: a folder of published runs or a CSV file of measured runs.
py::object validate_path(py::handle path_like, int jobs, std::optional<std::string> calibration,
                         const std::string& half, int limit, std::optional<std::string> topology,
                         std::optional<std::vector<std::string>> sets) {
  if (!is_path_like(path_like))
    throw ConfigError("path", py::repr(path_like).cast<std::string>(),
                      "must be a path (str or pathlib.Path)");
  const std::string path = path_text(path_like);
  if (jobs < 1) throw ConfigError("jobs", std::to_string(jobs), "must be ≥ 1");
  if (std::filesystem::is_regular_file(path)) {
    if (sets) throw ConfigError("sets", "", "applies to published runs (a folder)");
    return validate_measured(path, jobs, calibration, half, limit, topology);
  }
  if (half != "both" || limit != 0 || topology)
    throw ConfigError(half != "both" ? "half"
                      : limit != 0   ? "limit"
                                     : "topology",
                      half != "both" ? half
                      : limit != 0   ? std::to_string(limit)
                                     : *topology,
                      "applies to measured runs (a CSV file); the scenarios of a folder name "
                      "their own");
  return validate_published(path, jobs, calibration, sets.value_or(std::vector<std::string>{}));
}

// The `tandem` binary built with this module: the environment's TANDEM_BINARY, else the
// path CMake gave (TANDEM_BINARY_PATH).
std::string tandem_binary() {
  if (const char* env = std::getenv("TANDEM_BINARY"); env != nullptr && *env != '\0') return env;
  return TANDEM_BINARY_PATH;
}

std::vector<std::string> assignments(py::handle obj, const std::string& name) {
  std::vector<std::string> out;
  if (obj.is_none()) return out;
  if (py::isinstance<py::str>(obj)) return {obj.cast<std::string>()};
  for (py::handle item : obj) {
    if (!py::isinstance<py::str>(item))
      throw ConfigError(name, py::str(item).cast<std::string>(), "must be a FIELD=VALUE string");
    out.push_back(item.cast<std::string>());
  }
  return out;
}

// Runs `args` as the tandem binary in a process of its own and waits, polling for Ctrl-C:
// then it kills the process group (the search and the simulations it forked) and raises
// KeyboardInterrupt. Returns the exit status; stderr goes to `err`.
int run_tandem(const std::vector<std::string>& args, const std::filesystem::path& err) {
  const std::string binary = tandem_binary();
  if (!std::filesystem::is_regular_file(binary))
    throw std::runtime_error("tandem.search runs the tandem binary, not found at " + binary +
                             " (build the target `tandem`, or set TANDEM_BINARY)");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("tandem.search: fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // its own group: Ctrl-C in the interpreter kills the search and its children
    const int null = open("/dev/null", O_WRONLY);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    if (e >= 0) dup2(e, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) throw std::runtime_error("tandem.search: waitpid failed");
    {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        throw py::error_already_set();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// `tandem search --json` as a dict: the scenario is resolved and the search space checked
// here (a bad scenario, top, jobs, headroom or FIELD=VALUE raises ConfigError before any
// work); the search itself runs in the tandem binary, which forks a child per simulation.
py::object search(py::handle source, py::handle vary, py::handle fix, int top,
                  std::optional<int> jobs, double memory_headroom,
                  std::optional<std::string> calibration, py::handle flags,
                  const py::kwargs& overrides) {
  const Scenario base = make_scenario(source, flags, overrides);
  if (top < 1) throw ConfigError("top", std::to_string(top), "must be ≥ 1");
  if (jobs && *jobs < 1) throw ConfigError("jobs", std::to_string(*jobs), "must be ≥ 1");
  if (!(memory_headroom >= 0 && memory_headroom < 1))
    throw ConfigError("memory_headroom", std::to_string(memory_headroom),
                      "must be a fraction of GPU memory in [0, 1)");
  if (calibration) sim::load_calibration(*calibration);  // its errors before the search's
  const auto varied = assignments(vary, "vary"), fixed = assignments(fix, "fix");
  sim::search::SearchSpace space = sim::search::default_space(base, base.cluster.world_size);
  for (const auto& v : varied) sim::search::vary(space, v);
  for (const auto& f : fixed) sim::search::fix(space, f);

  const auto dir = std::filesystem::temp_directory_path() /
                   ("tandem_search_" + std::to_string(getpid()) + "_" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  std::ofstream(dir / "scenario.json") << to_json(base).dump();
  std::vector<std::string> args = {"search",
                                   (dir / "scenario.json").string(),
                                   "--quiet",
                                   "--json",
                                   (dir / "search.json").string(),
                                   "--top",
                                   std::to_string(top),
                                   "--memory-headroom",
                                   std::to_string(memory_headroom)};
  if (jobs) args.insert(args.end(), {"--jobs", std::to_string(*jobs)});
  if (calibration) args.insert(args.end(), {"--calibration", *calibration});
  for (const auto& v : varied) args.insert(args.end(), {"--vary", v});
  for (const auto& f : fixed) args.insert(args.end(), {"--fix", f});
  int status = 0;
  {
    py::gil_scoped_release release;
    status = run_tandem(args, dir / "stderr.txt");
  }
  if (status != 0) {
    std::ifstream in(dir / "stderr.txt");
    const std::string message((std::istreambuf_iterator<char>(in)), {});
    throw std::runtime_error("tandem search exited with status " + std::to_string(status) + ": " +
                             message);
  }
  std::ifstream in(dir / "search.json");
  return to_python(json::parse(in));
}

}  // namespace
}  // namespace tandem::python

PYBIND11_MODULE(tandem, m) {
  using namespace tandem;
  using namespace tandem::python;
  m.doc() =
      "tandem: Megatron-style GPT pretraining, simulated on SimGrid. Functions take a "
      "scenario (None for the built-in default, a path to a scenario JSON file, or a dict in "
      "the same form), optional Megatron command-line `flags` (a string or a list), and "
      "keyword overrides by Megatron argument name (tensor_model_parallel_size=8); they "
      "return plain dicts and lists.";
  m.attr("__version__") = TANDEM_VERSION;
  // A scenario, topology or calibration input that breaks a rule; message names the field,
  // the value and the rule.
  static py::exception<ConfigError> config_error(m, "ConfigError", PyExc_ValueError);
  static py::exception<ScheduleError> schedule_error(m, "ScheduleError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      py::list v;
      for (const auto& x : e.violations()) {
        py::dict d;
        d["field"] = x.field;
        d["value"] = x.value;
        d["rule"] = x.rule;
        v.append(d);
      }
      py::object err = py::handle(config_error.ptr())(py::str(e.what()));
      err.attr("violations") = v;
      PyErr_SetObject(config_error.ptr(), err.ptr());
    } catch (const ScheduleError& e) {
      schedule_error(e.what());
    }
  });

  m.def(
      "scenario",
      [](py::handle source, py::handle flags, const py::kwargs& kw) {
        return to_python(scenario_json(make_scenario(source, flags, kw)));
      },
      py::arg("source") = py::none(), py::kw_only(), py::arg("flags") = py::none(),
      "The scenario resolved and validated, as a dict (with its derived sizes): from None "
      "(the built-in default), a file, a dict or Megatron flags, plus keyword overrides.");
  m.def(
      "scenario_fields",
      [] {
        py::list out;
        for (const auto& f : scenario_fields()) {
          py::dict d;
          d["section"] = f.section;
          d["name"] = f.name;
          d["flag"] = f.flag;
          d["type"] = f.type;
          d["help"] = f.help;
          out.append(d);
        }
        return out;
      },
      "Every scenario field: section, Megatron name, flag, type and help.");
  m.def(
      "topology",
      [](py::handle name_or_path) {
        if (py::isinstance<py::dict>(name_or_path))
          return to_python(to_json(parse_topology(from_python(name_or_path), "dict")));
        return to_python(to_json(load_topology(path_text(name_or_path))));
      },
      py::arg("name_or_path"), "A topology preset or file, checked, as a dict.");
  m.def("topology_presets", &topology_preset_names, "The names of the built-in topologies.");
  m.def("simulate", &simulate, py::arg("scenario") = py::none(), py::kw_only(),
        py::arg("topology") = py::none(), py::arg("mode") = "symmetric", py::arg("iterations") = 1,
        py::arg("calibration") = py::none(), py::arg("trace") = py::none(),
        py::arg("trace_ops") = false, py::arg("flags") = py::none(),
        "`tandem simulate --json` as a dict: iteration_seconds, tokens_per_second, mfu, "
        "bubble_fraction, exposed_seconds, memory, ranks. Runs in a child process of its own, "
        "so it may be called any number of times.");
  m.def("layout", &layout, py::arg("scenario") = py::none(), py::kw_only(),
        py::arg("tp") = py::none(), py::arg("pp") = py::none(), py::arg("cp") = py::none(),
        py::arg("ep") = py::none(), py::arg("flags") = py::none(),
        "`tandem layout --json` as a dict: the process groups and the rank placement.");
  m.def("schedule", &schedule, py::arg("scenario") = py::none(), py::kw_only(),
        py::arg("pp") = py::none(), py::arg("vpp") = py::none(),
        py::arg("microbatches") = py::none(), py::arg("kind") = py::none(),
        py::arg("group_size") = py::none(), py::arg("forward_ms") = 1.0,
        py::arg("backward_ms") = 2.0, py::arg("p2p_ms") = 0.0, py::arg("flags") = py::none(),
        "`tandem schedule --json` as a dict: each stage's ops and the idealised timeline.");
  m.def("validate", &validate_path, py::arg("path"), py::kw_only(), py::arg("jobs") = 2,
        py::arg("calibration") = py::none(), py::arg("half") = "both", py::arg("limit") = 0,
        py::arg("topology") = py::none(), py::arg("sets") = py::none(),
        "`tandem validate PATH --json` as a dict. A folder: published vs predicted for every "
        "row of PATH/published.csv (or of the named `sets` only, as --set), the summaries per "
        "metric, per set and over all, the presets' parameters fitted on each set, and each "
        "scenario's report. A CSV "
        "file of measured runs (vTrain's columns): each row's predicted time and error with "
        "its breakdown, and each half's median / mean / max |error| (`half`, `limit` and "
        "`topology` as the command line's --half, --limit, --topology).");
  m.def("search", &search, py::arg("scenario") = py::none(), py::kw_only(),
        py::arg("vary") = py::none(), py::arg("fix") = py::none(), py::arg("top") = 10,
        py::arg("jobs") = py::none(), py::arg("memory_headroom") = 0.0,
        py::arg("calibration") = py::none(), py::arg("flags") = py::none(),
        "`tandem search --json` as a dict: every layout of the scenario's model, global batch "
        "and world size that Megatron accepts, each with its outcome (simulated, estimated "
        "only, over memory, invalid), and the exact top `top` by simulated iteration time "
        "(`ranking`). `vary` and `fix` take FIELD=VALUES strings as the command line's "
        "--vary and --fix. Runs the tandem binary built with the module (or the "
        "environment's TANDEM_BINARY) in a process of its own.");
}
