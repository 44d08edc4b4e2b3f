// `tandem validate DIR`: the simulator against published measurements. Reads
// DIR/published.csv and the scenarios it names (all checked before anything runs),
// simulates each scenario in a child process exactly as `tandem simulate` does (symmetric
// mode, --jobs at a time), and prints published vs predicted with the error, then the
// median and max |error| of iteration time against the target (median ≤ 5 %, max ≤ 10 %).
// Exit code 0 even when the target is missed, unless --check.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "sim/calibration.hpp"
#include "tools/child_simulation.hpp"
#include "tools/cli.hpp"
#include "tools/published_table.hpp"

namespace tandem::cli {
namespace {

struct ValidateCliOptions {
  std::string dir, json, calibration;
  int jobs = 1;
  bool check = false, dry_run = false;
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

void run_validate(const ValidateCliOptions& o) {
  if (!std::filesystem::is_directory(o.dir))
    throw ConfigError("DIR", o.dir, "must be a folder holding published.csv and its scenarios");
  const PublishedTable table = read_published_table(o.dir);
  if (!o.calibration.empty()) sim::load_calibration(o.calibration);  // checked up front
  check_output_folder("--json", o.json);
  if (o.dry_run) {
    std::cout << table.csv.string() << ": " << table.rows.size() << " row(s), "
              << table.scenario_files.size() << " scenario(s), all valid\n";
    for (const auto& [name, file] : table.scenario_files)
      std::cout << "  " << file.string() << "\n";
    return;
  }

  const ScratchDir scratch;
  std::vector<ChildSimulation> sims;
  std::set<std::string> listed;
  for (const auto& row : table.rows) {
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
  const auto results =
      run_child_simulations(sims, o.jobs, [&](std::size_t i, const ChildResult& r) {
        char line[256];
        std::snprintf(line, sizeof line, "[%zu/%zu] %s: %s in %.1f s", ++done, sims.size(),
                      sims[i].name.c_str(), r.ok ? "simulated" : "FAILED", r.wall_seconds);
        std::cerr << line << "\n";
      });

  std::map<std::string, nlohmann::json> reports;
  std::vector<std::string> failures;
  for (std::size_t i = 0; i < sims.size(); ++i) {
    if (results[i].ok)
      reports[sims[i].name] = results[i].report;
    else
      failures.push_back(sims[i].name + ": " + results[i].error);
  }
  const ValidationResult result = compare_with_reports(table, reports);
  std::cout << format_validation(result);
  if (!o.json.empty()) {
    nlohmann::json j = to_json(result);
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
      "value, unit, source) and the scenarios it names; prints published vs predicted and the "
      "error, and whether iteration time meets median |error| ≤ 5 %, max ≤ 10 %");
  cmd->add_option("dir", opts->dir, "Folder with published.csv and <scenario>.json files")
      ->required();
  cmd->add_option("--jobs,-j", opts->jobs, "Simulations run at once (one child process each)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--json", opts->json, "Write the table, the summary and each report as JSON");
  cmd->add_option("--calibration", opts->calibration,
                  "Calibration table (from tandem calibrate) passed to every simulation");
  cmd->add_flag("--check", opts->check, "Exit 1 when the iteration-time target is missed");
  cmd->add_flag("--dry-run", opts->dry_run,
                "Check the table and its scenarios, list them, and simulate nothing");
  cmd->callback([opts] { run_validate(*opts); });
}

}  // namespace tandem::cli
