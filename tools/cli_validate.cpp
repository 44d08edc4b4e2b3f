// `tandem validate DIR`: the simulator against published measurements. Reads
// DIR/published.csv and the scenarios it names (all checked before anything runs),
// simulates each scenario in a child process exactly as `tandem simulate` does (symmetric
// mode, --jobs at a time), and prints published vs predicted with the error, then per set
// (paper or table) and over all sets the median, p95 and max |error| of the iteration time
// each row implies, with the preset parameters fitted on each set, against the target
// (median ≤ 5 %, max ≤ 12 % over all, each set's median ≤ 7 %).
// Exit code 0 even when the target is missed, unless --check.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "sim/calibration.hpp"
#include "tools/child_simulation.hpp"
#include "tools/cli.hpp"
#include "tools/command_line.hpp"
#include "tools/measured_runs.hpp"
#include "tools/published_table.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

// `tandem validate` holds no threads, MPI or SimGrid engine when it starts its children, so
// each is a fork that runs `tandem simulate …` in-process: the same code path as a new
// process of this binary, without its start-up on every row.
int forked_command_line(const std::vector<std::string>& args) {
  return run_command_line(args);
}

struct ValidateCliOptions {
  std::string dir, json, calibration, topology, half = "both";
  std::vector<std::string> sets;  // published runs: only these sets (all when empty)
  int jobs = 1;
  int limit = 0;  // measured runs: at most this many rows of each half (0: all)
  std::optional<int> calibration_hidden;  // measured runs: split by hidden size
  bool check = false, dry_run = false;
  MeasuredTarget target;              // measured runs: what --check holds the target half to
  ValidationTarget published_target;  // published runs: the same flags, defaults 5 % / 12 % / 7 %
};

// A private folder for the children's reports and logs, removed when done.
class ScratchDir {
 public:
  ScratchDir() {
    path_ =
        std::filesystem::temp_directory_path() / ("tandem-validate-" + std::to_string(getpid()));
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

void check_output_folder(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw ConfigError(flag, path, "its folder " + parent.string() + " does not exist");
}

// `tandem validate FILE.csv`: measured runs (measured_runs.hpp), each simulated in a child
// exactly as `tandem simulate` would, errors per row and per half.
void run_measured(const ValidateCliOptions& o) {
  if (!o.topology.empty()) load_topology(o.topology);  // checked up front
  const MeasuredTable table = read_measured_runs(o.dir, o.topology, o.calibration_hidden);
  if (!o.calibration.empty()) sim::load_calibration(o.calibration);
  check_output_folder("--json", o.json);
  const std::vector<const MeasuredRun*> runs = select_runs(table, o.half, o.limit);
  if (o.dry_run) {
    std::map<Half, int> taken;
    for (const MeasuredRun* run : runs) ++taken[run->half];
    std::cout << table.csv.string() << ": " << table.rows.size() << " run(s), all valid; "
              << runs.size() << " selected (calibration " << taken[Half::calibration]
              << ", validation " << taken[Half::validation] << ")\n";
    return;
  }
  const ScratchDir scratch;
  std::vector<ChildSimulation> sims;
  for (const MeasuredRun* run : runs) {
    const auto file = scratch.path() / (run->scenario.name + ".json");
    write_file(file.string(), to_json(run->scenario).dump(2) + "\n");
    ChildSimulation c{run->scenario.name,
                      {"simulate", file.string(), "--quiet", "--mode", "symmetric"},
                      scratch.path() / (run->scenario.name + ".report.json"),
                      scratch.path() / (run->scenario.name + ".log")};
    c.args.insert(c.args.end(), {"--json", c.json.string()});
    if (!o.calibration.empty()) c.args.insert(c.args.end(), {"--calibration", o.calibration});
    sims.push_back(std::move(c));
  }
  std::size_t done = 0;
  const auto results = run_child_simulations(
      sims, o.jobs,
      [&](std::size_t i, const ChildResult& r) {
        ++done;
        if (!r.ok || done % 50 == 0 || done == sims.size()) {
          char line[256];
          std::snprintf(line, sizeof line, "[%zu/%zu] %s: %s", done, sims.size(),
                        sims[i].name.c_str(), r.ok ? "simulated" : "FAILED");
          std::cerr << line << "\n";
        }
      },
      forked_command_line);
  std::map<std::size_t, nlohmann::json> reports;
  std::vector<std::string> failures;
  for (std::size_t i = 0; i < sims.size(); ++i) {
    if (results[i].ok)
      reports[i] = results[i].report;
    else
      failures.push_back(sims[i].name + ": " + results[i].error);
  }
  const MeasuredValidation result = compare_measured(runs, reports, o.target);
  std::cout << format_measured(result);
  // What the presets say was fitted on this table (its set is the file's stem).
  const std::string set = std::filesystem::path(o.dir).stem().string();
  std::set<std::string> topologies;
  for (const MeasuredRun* run : runs) topologies.insert(run->scenario.cluster.topology);
  for (const auto& name : topologies) {
    if (name.empty()) continue;
    std::map<std::string, std::string> by_rows;  // rows → the parameters fitted on them
    for (const auto& [parameter, fitted] : load_topology(name).fitted_on)
      if (fitted.set == set)
        by_rows[fitted.rows] += (by_rows[fitted.rows].empty() ? "" : ", ") + parameter;
    for (const auto& [rows, parameters] : by_rows)
      std::cout << "fitted on " << set << " (" << rows << "): " << name << " " << parameters
                << "\n";
    // The preset's rows are the hash half, which holds both sizes: a split by hidden size
    // judges the other size on parameters that saw some of its rows.
    if (o.calibration_hidden && !by_rows.empty())
      std::cout << "  (so the hidden-size split's validation half is not held out from " << name
                << "'s fitted parameters; scripts/fit_host_model.py --calibration-hidden "
                << *o.calibration_hidden << " fits them on the calibration size alone)\n";
  }
  if (!o.json.empty()) {
    nlohmann::json j = to_json(result);
    j["csv"] = table.csv.string();
    j["mode"] = "symmetric";
    j["split"] = o.calibration_hidden ? hidden_split_rule(*o.calibration_hidden) : kSplitRule;
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (reports.count(i) && reports.at(i).contains("breakdown"))
        j["rows"][i]["breakdown"] = reports.at(i).at("breakdown");
    write_file(o.json, j.dump(2) + "\n");
    std::cout << "wrote " << o.json << "\n";
  }
  if (!failures.empty()) {
    std::string text = std::to_string(failures.size()) + " simulation(s) failed:";
    for (const auto& f : failures) text += "\n  " + f;
    throw std::runtime_error(text);
  }
  if (o.check && !result.target_met)
    throw std::runtime_error("validation target missed (--check): see the summary above");
}

void run_validate(const ValidateCliOptions& o) {
  if (std::filesystem::is_regular_file(o.dir)) return run_measured(o);
  if (!o.topology.empty())
    throw ConfigError("--topology", o.topology,
                      "applies to measured runs (a CSV file); the scenarios of DIR name their own");
  if (o.calibration_hidden)
    throw ConfigError("--calibration-hidden", std::to_string(*o.calibration_hidden),
                      "applies to measured runs (a CSV file)");
  if (!std::filesystem::is_directory(o.dir))
    throw ConfigError("DIR", o.dir,
                      "must be a folder holding published.csv and its scenarios, or a CSV file "
                      "of measured runs");
  const PublishedTable table = select_sets(read_published_table(o.dir), o.sets);
  if (!o.calibration.empty()) sim::load_calibration(o.calibration);  // checked up front
  check_output_folder("--json", o.json);
  if (o.dry_run) {
    std::cout << table.csv.string() << ": " << table.rows.size() << " row(s), "
              << table.scenario_files.size() << " scenario(s), all valid\n";
    for (const auto& [name, file] : table.scenario_files) {
      std::cout << "  " << file.string();
      if (auto it = table.searched.find(name); it != table.searched.end()) {
        std::string fields;
        for (const auto& f : it->second.fields) fields += (fields.empty() ? "" : " ") + f;
        std::cout << " (searched: " << fields << ")";
      }
      std::cout << "\n";
    }
    return;
  }

  const ScratchDir scratch;
  std::vector<std::string> failures;
  // The knobs the authors tuned but did not state: `tandem search --only` over them first
  // (`jobs` searches at once, each with `jobs` simulations at once: one search can take most
  // of the time, and it should not run on one core while the others idle); the report of the
  // search's own simulation of the fastest layout it found (`simulate --mode symmetric`, as
  // every row here) stands for the scenario, which is not simulated again.
  std::set<std::string> search_failed;
  std::map<std::string, std::string> picked;      // scenario → the layout the search picked
  std::map<std::string, nlohmann::json> reports;  // scenario → its simulation's report
  {
    std::vector<ChildSimulation> searches;
    for (const auto& [name, knobs] : table.searched) {
      std::string fields;
      for (const auto& f : knobs.fields) fields += (fields.empty() ? "" : ",") + f;
      ChildSimulation c{name,
                        {"search", table.scenario_files.at(name).string(), "--only", fields,
                         "--top", "1", "--quiet", "--jobs", std::to_string(o.jobs), "--best-report",
                         (scratch.path() / (name + ".best-report.json")).string()},
                        scratch.path() / (name + ".search.json"),
                        scratch.path() / (name + ".search.log")};
      c.args.insert(c.args.end(), {"--json", c.json.string()});
      if (!o.calibration.empty()) c.args.insert(c.args.end(), {"--calibration", o.calibration});
      searches.push_back(std::move(c));
    }
    std::size_t searched = 0;
    const auto found = run_child_simulations(
        searches, o.jobs,
        [&](std::size_t i, const ChildResult& r) {
          char line[256];
          std::snprintf(line, sizeof line, "[search %zu/%zu] %s: %s in %.1f s", ++searched,
                        searches.size(), searches[i].name.c_str(), r.ok ? "searched" : "FAILED",
                        r.wall_seconds);
          std::cerr << line << "\n";
        },
        forked_command_line);
    for (std::size_t i = 0; i < searches.size(); ++i) {
      const std::string& name = searches[i].name;
      if (!found[i].ok) {
        failures.push_back(name + " (search): " + found[i].error);
        search_failed.insert(name);
        continue;
      }
      std::ifstream best_report(scratch.path() / (name + ".best-report.json"));
      reports[name] = nlohmann::json::parse(best_report, nullptr, /*allow_exceptions=*/false);
      if (reports[name].is_discarded()) {
        failures.push_back(name + " (search): its --best-report is missing or not JSON");
        reports.erase(name);
        search_failed.insert(name);
        continue;
      }
      const auto& j = found[i].report;
      const auto best = j.at("ranking").at(0).get<int>();
      for (const auto& c : j.at("candidates"))
        if (c.at("id").get<int>() == best) picked[name] = c.at("label").get<std::string>();
    }
  }

  std::vector<ChildSimulation> sims;
  std::set<std::string> listed;
  for (const auto& row : table.rows) {
    if (search_failed.count(row.scenario)) continue;  // no report stands for it
    if (reports.count(row.scenario)) continue;        // the search simulated it
    if (!listed.insert(row.scenario).second) continue;
    ChildSimulation c{row.scenario,
                      {"simulate", table.scenario_files.at(row.scenario).string(), "--quiet",
                       "--mode", "symmetric"},
                      scratch.path() / (row.scenario + ".json"),
                      scratch.path() / (row.scenario + ".log")};
    c.args.insert(c.args.end(), {"--json", c.json.string()});
    if (!o.calibration.empty()) c.args.insert(c.args.end(), {"--calibration", o.calibration});
    sims.push_back(std::move(c));
  }
  std::size_t done = 0;
  const auto results = run_child_simulations(
      sims, o.jobs,
      [&](std::size_t i, const ChildResult& r) {
        char line[256];
        std::snprintf(line, sizeof line, "[%zu/%zu] %s: %s in %.1f s", ++done, sims.size(),
                      sims[i].name.c_str(), r.ok ? "simulated" : "FAILED", r.wall_seconds);
        std::cerr << line << "\n";
      },
      forked_command_line);

  for (std::size_t i = 0; i < sims.size(); ++i) {
    if (results[i].ok)
      reports[sims[i].name] = results[i].report;
    else
      failures.push_back(sims[i].name + ": " + results[i].error);
  }
  const ValidationResult result = compare_with_reports(table, reports, o.published_target);
  const auto fitted = fitted_parameters(table);
  std::cout << format_validation(result, fitted);
  if (!table.searched.empty()) {
    std::cout << "\nSearched (knobs the authors tuned but did not state; the fastest layout "
                 "tandem search finds over them):\n";
    for (const auto& [name, knobs] : table.searched) {
      std::string fields;
      for (const auto& f : knobs.fields) fields += (fields.empty() ? "" : " ") + f;
      std::cout << "  " << name << " [" << fields
                << "]: " << (picked.count(name) ? picked.at(name) : std::string("search failed"))
                << "\n";
    }
  }
  if (!o.json.empty()) {
    nlohmann::json j = to_json(result, fitted);
    nlohmann::json searched = nlohmann::json::object();
    for (const auto& [name, knobs] : table.searched)
      searched[name] = {{"fields", knobs.fields},
                        {"source", knobs.source},
                        {"picked", picked.count(name) ? nlohmann::json(picked.at(name))
                                                      : nlohmann::json(nullptr)}};
    j["searched"] = searched;
    j["published_csv"] = table.csv.string();
    j["mode"] = "symmetric";
    j["calibration"] =
        o.calibration.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.calibration);
    nlohmann::json summaries = nlohmann::json::object();
    for (auto [name, report] : reports) {
      report.erase("ranks");  // per-rank detail stays with `tandem simulate --json`
      summaries[name] = report;
    }
    j["reports"] = summaries;
    write_file(o.json, j.dump(2) + "\n");
    std::cout << "wrote " << o.json << "\n";
  }
  if (!failures.empty()) {
    std::string text = std::to_string(failures.size()) + " simulation(s) failed:";
    for (const auto& f : failures) text += "\n  " + f;
    throw std::runtime_error(text);
  }
  if (o.check && !result.target_met)
    throw std::runtime_error("validation target missed (--check): see the summary above");
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto opts = std::make_shared<ValidateCliOptions>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Compare the simulator with published measurements: DIR/published.csv (scenario, metric, "
      "value, unit, set, source) and the scenarios it names, per set and over all sets (target on "
      "the iteration time each row implies: median |error| ≤ 5 %, max ≤ 12 %, each set's median "
      "≤ 7 %), or a CSV of measured runs (vTrain's columns, optionally precision, recompute, "
      "schedule, topology, Parameters (billion)), split into a calibration and a validation half "
      "by a hash of each row "
      "(target on the validation half: median ≤ 5 %, max ≤ 20 %), with the errors per node count "
      "and how the layouts of each job rank (Spearman's rho of measured and predicted time)");
  cmd->add_option("dir", opts->dir,
                  "Folder with published.csv and <scenario>.json files, or a CSV of measured runs")
      ->required();
  cmd->add_option(
         "--set", opts->sets,
         "Published runs: only the rows of this set (repeat or comma-separate for several)")
      ->delimiter(',');
  cmd->add_option("--half", opts->half, "Measured runs: which half to simulate")
      ->check(CLI::IsMember({"both", "calibration", "validation"}))
      ->capture_default_str();
  cmd->add_option("--calibration-hidden", opts->calibration_hidden,
                  "Measured runs: split by hidden size, this size the calibration half and every "
                  "other the validation half (instead of the row hash)")
      ->check(positive());
  cmd->add_option("--limit", opts->limit,
                  "Measured runs: at most this many rows of each half, in file order (0: all)")
      ->check(non_negative());
  cmd->add_option("--topology", opts->topology,
                  "Measured runs: a topology preset or JSON file for every row (fitting)");
  cmd->add_option("--jobs,-j", opts->jobs, "Simulations run at once (one child process each)")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--json", opts->json, "Write the table, the summary and each report as JSON");
  cmd->add_option("--calibration", opts->calibration,
                  "Calibration table (from tandem calibrate) passed to every simulation");
  cmd->add_flag("--check", opts->check, "Exit 1 when the iteration-time target is missed");
  auto* median =
      cmd->add_option("--target-median", opts->target.median_abs_error_percent,
                      "The median |error| (%) of iteration time --check allows (measured "
                      "runs: on the target half; published runs: over all sets, default 5)")
          ->check(positive())
          ->capture_default_str();
  auto* max =
      cmd->add_option("--target-max", opts->target.max_abs_error_percent,
                      "The max |error| (%) of iteration time --check allows (measured "
                      "runs: on the target half; published runs: over all sets, default 12)")
          ->check(positive())
          ->capture_default_str();
  cmd->add_option("--target-set-median", opts->published_target.set_median_abs_error_percent,
                  "Published runs: the median |error| (%) --check allows in each set")
      ->check(positive())
      ->capture_default_str();
  cmd->add_flag("--dry-run", opts->dry_run,
                "Check the table and its scenarios, list them, and simulate nothing");
  cmd->callback([opts, median, max] {
    if (median->count() > 0)
      opts->published_target.median_abs_error_percent = opts->target.median_abs_error_percent;
    if (max->count() > 0)
      opts->published_target.max_abs_error_percent = opts->target.max_abs_error_percent;
    run_validate(*opts);
  });
}

}  // namespace tandem::cli
