// Measured training runs `tandem validate FILE.csv` compares the simulator against, one run
// per row: vTrain's columns (# GPUs, global batch, micro batch, hidden size, attention
// heads, # layers, sequence length, tensor parallelism, data parallelism, pipeline
// parallelism, iteration time (ms)) plus the optional columns precision (fp16 | bf16 |
// fp32, default fp16), recompute (none | selective | full, default full), schedule (1f1b |
// gpipe | interleaved | auto, default 1f1b), topology (a preset name or file, default
// vtrain-a100: vTrain's cluster, a DGX A100 node with 800 Gb/s of InfiniBand) and Parameters
// (billion) (vTrain's multi-node file: checked, not used); a leading UTF-8 byte order mark is
// skipped. The defaults are what vTrain's Megatron-DeepSpeed runs used or most likely used
// (scenarios/measured/README.md). Every row is checked (numbers, GPUs = tp · dp · pp, the scenario
// it makes validates) and all problems are thrown together before anything is simulated.
//
// The halves: a row is in the calibration half when the FNV-1a 64-bit hash of its raw CSV
// line (without the line end) is even, in the validation half when it is odd. Parameters
// are fitted on the calibration half only (scripts/fit_host_model.py). vTrain's rows are
// composed from one profile per (hidden size, TP, micro batch) cell, so the hash split puts
// every cell in both halves; split by hidden size instead (calibration_hidden) to hold a
// cell out: the calibration half is that hidden size, the validation half the others.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/scenario.hpp"
#include "tools/published_table.hpp"

namespace tandem::cli {

enum class Half { calibration, validation };
std::string_view half_name(Half h);  // "calibration", "validation"

std::uint64_t fnv1a64(std::string_view text);
Half half_of(std::string_view csv_line);  // even hash: calibration

struct MeasuredRun {
  int line = 0;      // line in the CSV (header = 1)
  std::string text;  // the raw line, what the half is drawn from
  Half half = Half::calibration;
  Scenario scenario;  // validated
  double iteration_ms = 0;
  std::string label;  // "8 GPUs tp4 dp1 pp2 h2048 L20 mb2 gb8"
};

struct MeasuredTable {
  std::filesystem::path csv;
  std::vector<MeasuredRun> rows;
};

// How the rows are split, as the JSON reports state it.
inline constexpr const char* kSplitRule =
    "calibration: FNV-1a 64 of the raw CSV line is even; validation: odd";

// How the split reads in the JSON reports for a split by hidden size.
std::string hidden_split_rule(int calibration_hidden);

// `topology` overrides every row's topology when not empty. With `calibration_hidden` the
// rows of that hidden size form the calibration half and all others the validation half
// (ConfigError naming --calibration-hidden when no row, or every row, has that size).
MeasuredTable read_measured_runs(const std::filesystem::path& csv, const std::string& topology = "",
                                 std::optional<int> calibration_hidden = std::nullopt);

// The rows of `half` ("both", "calibration" or "validation"; else ConfigError), at most
// `limit` of each half (0: all), in file order.
std::vector<const MeasuredRun*> select_runs(const MeasuredTable& table, const std::string& half,
                                            int limit);

struct MeasuredResult {
  const MeasuredRun* run = nullptr;
  std::optional<double> predicted_ms;   // absent when the simulation failed
  std::optional<double> error_percent;  // (predicted − measured) / measured · 100
};

// The published table's summary (tools/published_table.hpp: its p95 is the nearest rank, so
// a row measured once carries its run-to-run spread, which the max takes whole) and the mean
// |error|.
struct HalfSummary : MetricSummary {
  double mean_abs_error_percent = 0;
};

// The target on the validation half: median |error| ≤ 5 %, max |error| ≤ 20 %.
struct MeasuredTarget {
  double median_abs_error_percent = 5;
  double max_abs_error_percent = 20;
};

// Spearman's rank correlation of two samples of equal length (ranks averaged over ties:
// the Pearson correlation of the ranks); absent when shorter than 2 or either is constant.
std::optional<double> spearman_rank_correlation(const std::vector<double>& a,
                                                const std::vector<double>& b);

// The layouts of one job: the rows with the same model (hidden size, heads, layers,
// sequence), GPU count and global batch, which differ in tp, dp, pp, micro batch, … . How
// well the simulator ranks them is what a layout search needs from it.
struct LayoutGroup {
  std::string job;      // "h2048 a16 L24 s1024, 8 GPUs, global batch 64"
  int rows = 0;         // rows with a prediction
  double spearman = 0;  // of measured and predicted iteration time
};
inline constexpr int kMinLayoutsRanked = 4;  // smaller groups are not ranked

struct MeasuredValidation {
  std::vector<MeasuredResult> rows;
  std::map<std::string, HalfSummary> halves;  // "calibration", "validation"
  std::map<int, HalfSummary> by_nodes;        // nodes a row spans → its rows' |errors|
  std::vector<LayoutGroup> layout_groups;     // groups of ≥ kMinLayoutsRanked rows
  MeasuredTarget target;
  // The half held to the target: validation when it was simulated, else calibration.
  std::string target_half = "validation";
  bool target_met = false;  // false also when a row of that half failed
};

// Joins runs with the reports (index → simulate --json report; missing = failed) and holds
// the target half to `target` (the fidelity target unless a caller asks for another).
MeasuredValidation compare_measured(const std::vector<const MeasuredRun*>& runs,
                                    const std::map<std::size_t, nlohmann::json>& reports,
                                    MeasuredTarget target = {});
HalfSummary summarize(const std::vector<double>& errors);  // signed errors, %

std::string format_measured(const MeasuredValidation& v);
nlohmann::json to_json(const MeasuredValidation& v);

}  // namespace tandem::cli
