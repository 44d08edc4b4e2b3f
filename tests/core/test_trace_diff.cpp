// trace diff: op classes strip microbatch/chunk numbers, per-class counts and durations of
// two hand-written traces match sums done by hand, ratios are B/A, and broken events are
// rejected naming the event.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/trace_diff.hpp"

namespace tandem {
namespace {

nlohmann::json slice(const std::string& name, int pid, int tid, double ts_us, double dur_us) {
  return {{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", ts_us}, {"dur", dur_us}};
}

nlohmann::json process_name(int pid) {
  return {{"name", "process_name"},
          {"ph", "M"},
          {"pid", pid},
          {"tid", 0},
          {"args", {{"name", "rank " + std::to_string(pid)}}}};
}

// A: one rank, two forwards (1 ms, 3 ms), one backward (2 ms), one tp all-reduce (0.5 ms)
// and one p2p (0.25 ms); slices from 0 to 6.5 ms.
nlohmann::json trace_a() {
  return {{"traceEvents",
           {process_name(0),
            slice("F0", 0, 0, 0, 1000),
            slice("F1.0", 0, 0, 1000, 3000),
            slice("B0", 0, 0, 4000, 2000),
            slice("allreduce tp", 0, 2, 4000, 500),
            slice("p2p", 0, 1, 6250, 250),
            {{"name", "memory"}, {"ph", "C"}, {"pid", 0}, {"tid", 0}, {"ts", 10}}}}};
}

// B: two ranks; forwards 2 ms + 2 ms + 4 ms, backwards 3 ms + 5 ms, two tp all-reduces
// of 1 ms, one dp all-gather 2 ms (absent from A), no p2p; slices from 1 ms to 13 ms.
nlohmann::json trace_b() {
  return {{"traceEvents",
           {process_name(0), process_name(1), slice("F0.1", 0, 0, 1000, 2000),
            slice("F12.1", 0, 0, 3000, 2000), slice("F3", 1, 0, 1000, 4000),
            slice("B0.1", 0, 0, 5000, 3000), slice("B7", 1, 0, 5000, 5000),
            slice("allreduce tp", 0, 2, 5000, 1000), slice("allreduce tp", 1, 2, 5000, 1000),
            slice("allgather dp", 1, 3, 11000, 2000)}}};
}

TEST(TraceDiff, OpClassStripsMicrobatchAndChunkNumbers) {
  EXPECT_EQ(op_class("F12.1"), "F");
  EXPECT_EQ(op_class("B0"), "B");
  EXPECT_EQ(op_class("F"), "F");
  EXPECT_EQ(op_class("allreduce tp"), "allreduce tp");
  EXPECT_EQ(op_class("allreduce tp-pp"), "allreduce tp-pp");
  EXPECT_EQ(op_class("reducescatter dp"), "reducescatter dp");
  EXPECT_EQ(op_class("p2p"), "p2p");
  EXPECT_EQ(op_class("send_forward 3"), "send_forward");
  EXPECT_EQ(op_class("optimizer"), "optimizer");
  EXPECT_EQ(op_class("42"), "42");  // nothing left after stripping: kept
}

TEST(TraceDiff, SummaryCountsAndSumsPerClass) {
  const auto a = summarize_trace(trace_a());
  EXPECT_EQ(a.slices, 5);
  EXPECT_EQ(a.processes, 1);
  EXPECT_DOUBLE_EQ(a.span_ms, 6.5);
  ASSERT_EQ(a.classes.size(), 4u);
  EXPECT_EQ(a.classes.at("F").count, 2);
  EXPECT_DOUBLE_EQ(a.classes.at("F").total_ms, 4.0);
  EXPECT_DOUBLE_EQ(a.classes.at("F").mean_ms(), 2.0);
  EXPECT_DOUBLE_EQ(a.classes.at("B").total_ms, 2.0);
  EXPECT_DOUBLE_EQ(a.classes.at("allreduce tp").total_ms, 0.5);
  EXPECT_DOUBLE_EQ(a.classes.at("p2p").total_ms, 0.25);
}

TEST(TraceDiff, RowsPutBothTracesSideBySideWithRatios) {
  const auto d = diff_traces(summarize_trace(trace_a()), summarize_trace(trace_b()));
  ASSERT_EQ(d.rows.size(), 5u);  // B, F, allgather dp, allreduce tp, p2p (byte order)
  std::map<std::string, TraceDiffRow> by;
  for (const auto& r : d.rows) by[r.op_class] = r;
  // F: A 2 slices / 4 ms, B 3 slices / 8 ms → total 2.0, mean (8/3)/2 = 4/3.
  EXPECT_EQ(by["F"].b.count, 3);
  EXPECT_DOUBLE_EQ(by["F"].b.total_ms, 8.0);
  EXPECT_DOUBLE_EQ(*by["F"].total_ratio, 2.0);
  EXPECT_DOUBLE_EQ(*by["F"].mean_ratio, 4.0 / 3.0);
  // B: A 2 ms, B 8 ms over 2 slices → total 4, mean 2.
  EXPECT_DOUBLE_EQ(*by["B"].total_ratio, 4.0);
  EXPECT_DOUBLE_EQ(*by["B"].mean_ratio, 2.0);
  // allreduce tp: A 0.5 ms, B 2 × 1 ms → total 4, mean 2.
  EXPECT_DOUBLE_EQ(*by["allreduce tp"].total_ratio, 4.0);
  EXPECT_DOUBLE_EQ(*by["allreduce tp"].mean_ratio, 2.0);
  // Only in B: no ratio. Only in A: ratio 0.
  EXPECT_EQ(by["allgather dp"].a.count, 0);
  EXPECT_FALSE(by["allgather dp"].total_ratio.has_value());
  EXPECT_FALSE(by["allgather dp"].mean_ratio.has_value());
  EXPECT_DOUBLE_EQ(*by["p2p"].total_ratio, 0.0);
  EXPECT_EQ(d.b.processes, 2);
  EXPECT_DOUBLE_EQ(d.b.span_ms, 12.0);

  const auto j = to_json(d);
  EXPECT_DOUBLE_EQ(j["span_ratio"].get<double>(), 12.0 / 6.5);
  EXPECT_EQ(j["classes"][2]["class"], "allgather dp");
  EXPECT_TRUE(j["classes"][2]["total_ratio"].is_null());
  EXPECT_EQ(j["classes"][1]["class"], "F");
  EXPECT_DOUBLE_EQ(j["classes"][1]["b"]["mean_ms"].get<double>(), 8.0 / 3.0);

  const auto text = format_trace_diff(d, "a.json", "b.json");
  EXPECT_NE(text.find("A = a.json"), std::string::npos) << text;
  EXPECT_NE(text.find("span A 6.500 ms (1 ranks, 5 slices), B 12.000 ms (2 ranks, 8 slices)"),
            std::string::npos)
      << text;
  // Every table line has the same width up to its last column (aligned columns).
  std::istringstream lines(text);
  std::string line;
  std::vector<std::size_t> widths;
  while (std::getline(lines, line))
    if (line.rfind("A =", 0) != 0 && line.rfind("B =", 0) != 0 && line.rfind("span", 0) != 0)
      widths.push_back(line.size());
  ASSERT_EQ(widths.size(), 6u);  // header + 5 classes
  for (auto w : widths) EXPECT_EQ(w, widths.front()) << text;
}

TEST(TraceDiff, BrokenEventsAreRejectedNamingTheEvent) {
  nlohmann::json t = trace_a();
  t["traceEvents"][2].erase("dur");
  try {
    summarize_trace(t, "measured.json");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("measured.json"), std::string::npos) << what;
    EXPECT_NE(what.find("traceEvents[2]"), std::string::npos) << what;
    EXPECT_NE(what.find("numeric ts, dur"), std::string::npos) << what;
  }
  EXPECT_THROW(summarize_trace(nlohmann::json::object()), ConfigError);
}

}  // namespace
}  // namespace tandem
