// The published figures `tandem validate DIR` compares the simulator against:
// DIR/published.csv with columns scenario, metric, value, unit, source — one measured
// number per row, the scenario naming DIR/<scenario>.json. Reading checks every row
// (known metric in its unit, a positive number, a scenario file that loads and
// validates) and throws all the problems as one ConfigError before any simulation runs.
// Then the rows are joined with the simulate reports: error % = (predicted − published) /
// published · 100, summarised by median and max |error| per metric.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/scenario.hpp"

namespace tandem::cli {

// A metric a published row may give, where it sits in `tandem simulate --json`'s report,
// and how the report's number converts to the row's unit.
struct MetricSpec {
  std::string name;            // "iteration_time"
  std::string unit;            // "s"
  std::string report_key;      // "iteration_seconds"
  double scale = 1;            // row value = report value · scale
  bool informational = false;  // reported, outside the accuracy target
};
const std::vector<MetricSpec>& published_metrics();

struct PublishedRow {
  int line = 0;  // line of the CSV where the row starts (the header is line 1)
  std::string scenario, metric, unit, source;
  double value = 0;
};

struct PublishedTable {
  std::filesystem::path csv;
  std::vector<PublishedRow> rows;
  std::map<std::string, std::filesystem::path> scenario_files;  // name → DIR/name.json
};

// Reads DIR/published.csv and checks each row and each scenario it names (loaded and
// validated, its topology known). Throws ConfigError(source = the CSV path) listing every
// problem as "line N, column: value: rule".
PublishedTable read_published_table(const std::filesystem::path& dir);

// Splits CSV text into records of fields (RFC 4180: quoted fields may hold commas,
// doubled quotes and newlines). `lines` receives each record's first line number.
std::vector<std::vector<std::string>> parse_csv(std::string_view text, std::vector<int>* lines);

struct ValidationRow {
  PublishedRow published;
  std::optional<double> predicted;  // absent when the simulation failed
  std::optional<double> error_percent;
  bool informational = false;
};

struct MetricSummary {
  int rows = 0;  // rows with a prediction
  double median_abs_error_percent = 0;
  double max_abs_error_percent = 0;
};

// The accuracy target on iteration time for published runs: median |error| ≤ 4 %, max
// |error| ≤ 9 % (the fidelity target on Korthikanti et al. 2022 and Megatron's README run).
struct ValidationTarget {
  std::string metric = "iteration_time";
  double median_abs_error_percent = 4;
  double max_abs_error_percent = 9;
};

struct ValidationResult {
  std::vector<ValidationRow> rows;
  std::map<std::string, MetricSummary> summary;  // per metric
  ValidationTarget target;
  bool target_met = false;  // false also when a target row has no prediction
};

// Joins the rows with the reports (scenario name → simulate --json report; a scenario
// missing from `reports` failed to simulate).
ValidationResult compare_with_reports(const PublishedTable& table,
                                      const std::map<std::string, nlohmann::json>& reports,
                                      const ValidationTarget& target = {});

double median(std::vector<double> values);  // mean of the middle two for an even count

std::string format_validation(const ValidationResult& r);
nlohmann::json to_json(const ValidationResult& r);

}  // namespace tandem::cli
