// Comparing two traces op class by op class (`tandem trace diff A B`): typically a
// predicted trace (tandem simulate --trace) against a measured one (tandem train --trace)
// of the same configuration. A slice's class is its name's leading op type with the
// microbatch/chunk numbers stripped ("F12.1" → "F", "B3" → "B", "allreduce tp" stays
// "allreduce tp"); per class we count the complete ("X") slices over all ranks and sum
// their durations, and put A and B side by side with the ratio B/A. Pure functions on the
// trace JSON (DESIGN §9's schema), so they are tested on hand-written traces. A predicted
// trace (tandem simulate --trace) also holds, per rank, slices named by the op classes of
// its report's breakdown — "gemm", "attention", "memory-bound", "optimizer", "transfer" —
// and "host-bound" gaps, so the diff lists those classes too.
//
// Worked example: A holds F0 (2 ms) and F1 (4 ms), B holds F0.0 (3 ms); class "F" has
// count 2 / total 6 ms / mean 3 ms in A, 1 / 3 ms / 3 ms in B: total B/A 0.5, mean B/A 1.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// The op class of a slice name: the first word loses trailing digits and dots ("F12.1" →
// "F", "B0" → "B"; "p2p" stays, its digit is not trailing), later words that are only
// digits and dots are dropped ("send_forward 3" → "send_forward"). A name that would
// become empty is kept as it is.
std::string op_class(std::string_view slice_name);

struct OpClassStats {
  std::int64_t count = 0;
  double total_ms = 0;  // sum of the slices' durations
  double mean_ms() const { return count ? total_ms / static_cast<double>(count) : 0.0; }
};

struct TraceSummary {
  double span_ms = 0;  // last slice end − first slice start, over all X slices
  int processes = 0;   // distinct pids with X slices (ranks in the trace)
  std::int64_t slices = 0;
  std::map<std::string, OpClassStats> classes;  // op class → stats
};

// Summarises a Chrome trace document. Throws ConfigError (source = `source`) naming the
// event when the document has no traceEvents array or an X event lacks numeric ts/dur.
TraceSummary summarize_trace(const nlohmann::json& trace, std::string_view source = "trace");

struct TraceDiffRow {
  std::string op_class;
  OpClassStats a, b;                  // zero counts where the class is absent
  std::optional<double> total_ratio;  // b.total / a.total (absent when a.total is 0)
  std::optional<double> mean_ratio;   // b.mean / a.mean (absent when a has no slice)
};

struct TraceDiff {
  TraceSummary a, b;
  std::vector<TraceDiffRow> rows;  // every class of A or B, by name
};

TraceDiff diff_traces(const TraceSummary& a, const TraceSummary& b);

// The diff as JSON: {"a": {span_ms, processes, slices}, "b": {…}, "classes": [{class,
// a: {count, total_ms, mean_ms}, b: {…}, total_ratio, mean_ratio}], "span_ratio"}; ratios
// are null where undefined.
nlohmann::json to_json(const TraceDiff& d);

// An aligned text table, one row per class, then each trace's span and rank count.
std::string format_trace_diff(const TraceDiff& d, std::string_view name_a = "A",
                              std::string_view name_b = "B");

}  // namespace tandem
