// The published figures `tandem validate DIR` compares the simulator against:
// DIR/published.csv with columns scenario, metric, value, unit, set, source (or, for a
// table of one set, scenario, metric, value, unit, source) — one measured number per row,
// the scenario naming DIR/<scenario>.json, the set naming the paper or table it comes from.
// Reading checks every row (known metric in its unit, a positive number, a scenario file
// that loads and validates) and throws all the problems as one ConfigError before any
// simulation runs. Then the rows are joined with the simulate reports: error % =
// (predicted − published) / published · 100 per metric, and the iteration-time error it
// implies (a throughput's error turned into time: published / predicted − 1), summarised
// per set and over all sets by median, p95 and max.
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
  bool throughput = false;     // per unit of time: the iteration time goes as its inverse
};
const std::vector<MetricSpec>& published_metrics();

struct PublishedRow {
  int line = 0;  // line of the CSV where the row starts (the header is line 1)
  std::string scenario, metric, unit, source;
  double value = 0;
  std::string set = "published";  // the paper or table (a five-column table is one set)
};

// Knobs of a published run its authors tuned but did not state (DIR/searched.csv: scenario,
// fields, source): `tandem validate` runs `tandem search --only FIELDS` on the scenario and
// compares the fastest layout it finds, as the authors kept theirs.
struct SearchedKnobs {
  std::vector<std::string> fields;  // search field names (tandem search --only)
  std::string source;               // why they are searched: what the publication leaves out
};

struct PublishedTable {
  std::filesystem::path csv;
  std::vector<PublishedRow> rows;
  std::map<std::string, std::filesystem::path> scenario_files;  // name → DIR/name.json
  std::map<std::string, std::string> scenario_topology;         // name → its topology preset
  std::map<std::string, SearchedKnobs> searched;                // name → knobs searched
};

// Reads DIR/published.csv and checks each row and each scenario it names (loaded and
// validated, its topology known), and DIR/searched.csv when present (each scenario in the
// table once, each field one `tandem search` searches). Throws ConfigError(source = the CSV path)
// listing every problem as "line N, column: value: rule".
PublishedTable read_published_table(const std::filesystem::path& dir);

// Keeps the rows of the named sets (all when `sets` is empty). Throws ConfigError naming
// --set when a name is not a set of the table.
PublishedTable select_sets(const PublishedTable& table, const std::vector<std::string>& sets);

// Splits CSV text into records of fields (RFC 4180: quoted fields may hold commas,
// doubled quotes and newlines). `lines` receives each record's first line number.
std::vector<std::vector<std::string>> parse_csv(std::string_view text, std::vector<int>* lines);

struct ValidationRow {
  PublishedRow published;
  std::optional<double> predicted;  // absent when the simulation failed
  std::optional<double> error_percent;
  // The iteration-time error the row implies: error_percent for a time, published /
  // predicted − 1 for a throughput (TFLOP/s, MFU, tokens/s at the same FLOPs and tokens).
  std::optional<double> time_error_percent;
  bool informational = false;
  // Whether the time error counts in the summaries and the target: a throughput row of a
  // scenario that also has an iteration_time row is the same run read twice, so only its
  // time counts (one run, one error).
  bool counted = true;
  // For such a throughput row: the work per iteration its published value and the published
  // time imply (FLOPs, tokens) over what the scenario does per iteration (the predicted value
  // times the predicted time). Away from 1, the scenario is not the measured run (dimensions,
  // batch) or the source counts its FLOPs another way.
  std::optional<double> work_ratio;
};

// How far a throughput row's published work per iteration may stand from its scenario's
// before `tandem validate` names it.
inline constexpr double kWorkRatioTolerance = 0.02;

struct MetricSummary {
  int rows = 0;  // rows with a prediction
  double median_abs_error_percent = 0;
  double p95_abs_error_percent = 0;  // nearest rank: the ⌈0.95·n⌉-th smallest
  double max_abs_error_percent = 0;
  // Which way the errors lean: a source whose rows are all a little fast has learned
  // something the |error| hides. The median of the signed errors, and how many are below 0
  // (on iteration time: predicted faster than measured).
  double median_error_percent = 0;
  int below_zero = 0;
};

// The accuracy target on the iteration time the published runs imply, over every set that
// is not informational: median |error| ≤ 5 %, max ≤ 12 %, and each set's median ≤ 7 %.
struct ValidationTarget {
  double median_abs_error_percent = 5;
  double max_abs_error_percent = 12;
  double set_median_abs_error_percent = 7;
};

struct ValidationResult {
  std::vector<ValidationRow> rows;
  std::map<std::string, MetricSummary> summary;  // per metric, on the metric's own error
  std::map<std::string, MetricSummary> sets;     // per set, on the iteration-time error
  MetricSummary overall;                         // every set, on the iteration-time error
  ValidationTarget target;
  bool target_met = false;  // false also when a targeted row has no prediction
};

// The nearest-rank p95 of `values` (0 when empty).
double nearest_rank_p95(std::vector<double> values);

// |error| median, p95 and max, the signed median and the rows below zero of signed errors (%).
MetricSummary summarise(const std::vector<double>& errors);
// Those figures as `tandem validate --json` writes them.
nlohmann::json summary_json(const MetricSummary& s);

// Preset parameters fitted on each set: for every topology the table's scenarios use, its
// fitted_on entries, grouped by the set they name (sets of other tables included).
struct FittedOnSet {
  std::string topology, parameter, rows;
};
std::map<std::string, std::vector<FittedOnSet>> fitted_parameters(const PublishedTable& table);

// Joins the rows with the reports (scenario name → simulate --json report; a scenario
// missing from `reports` failed to simulate).
ValidationResult compare_with_reports(const PublishedTable& table,
                                      const std::map<std::string, nlohmann::json>& reports,
                                      const ValidationTarget& target = {});

double median(std::vector<double> values);  // mean of the middle two for an even count

// The table, the per-metric and per-set summaries, and (when given) what was fitted where.
std::string format_validation(const ValidationResult& r,
                              const std::map<std::string, std::vector<FittedOnSet>>& fitted = {});
nlohmann::json to_json(const ValidationResult& r,
                       const std::map<std::string, std::vector<FittedOnSet>>& fitted = {});

}  // namespace tandem::cli
