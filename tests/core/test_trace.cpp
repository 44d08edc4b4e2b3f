// The trace writer produces what check_trace accepts, check_trace catches each broken
// rule, and the SVG renderer draws every slice with its label.
#include <gtest/gtest.h>

#include "core/trace.hpp"
#include "core/trace_svg.hpp"

namespace tandem {
namespace {

Trace two_rank_trace() {
  Trace t;
  for (int r = 0; r < 2; ++r) {
    t.name_process(r, "rank " + std::to_string(r), r);
    t.name_thread(r, trace_thread::compute, "compute", 0);
    t.name_thread(r, trace_thread::pp_comm, "pp send/recv", 1);
  }
  t.add_slice({"F0", "forward", 0, 0, Seconds(0), Seconds(1e-3), {{"microbatch", 0}}});
  t.add_slice({"send_forward", "p2p", 0, 1, Seconds(1e-3), Seconds(1e-4), {}});
  t.add_slice({"recv_forward", "p2p", 1, 1, Seconds(0), Seconds(1.1e-3), {}});
  t.add_slice({"F0", "forward", 1, 0, Seconds(1.1e-3), Seconds(1e-3), {{"microbatch", 0}}});
  t.add_flow("act 0", 0, 1, Seconds(1e-3), 1, 1, Seconds(1.1e-3));
  t.add_counter("memory", 0, Seconds(0), {{"bytes", 1024}});
  return t;
}

TEST(Trace, WriterOutputIsWellFormed) {
  const auto j = two_rank_trace().to_json();
  const auto problems = check_trace(j);
  EXPECT_TRUE(problems.empty()) << problems.front();
  // Times are microseconds.
  bool found = false;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 1 && e["name"] == "F0") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1100.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1000.0);
      found = true;
    }
  EXPECT_TRUE(found);
}

nlohmann::json with_event(nlohmann::json trace, nlohmann::json e) {
  trace["traceEvents"].push_back(std::move(e));
  return trace;
}

TEST(Trace, CheckCatchesOverlapWithoutNesting) {
  auto j = with_event(
      two_rank_trace().to_json(),
      {{"name", "B0"}, {"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", 500.0}, {"dur", 1000.0}});
  const auto problems = check_trace(j);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("overlaps"), std::string::npos) << problems[0];
}

TEST(Trace, CheckAcceptsProperNesting) {
  auto j = with_event(
      two_rank_trace().to_json(),
      {{"name", "gemm"}, {"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", 100.0}, {"dur", 200.0}});
  EXPECT_TRUE(check_trace(j).empty());
}

TEST(Trace, CheckCatchesBrokenFlows) {
  auto j =
      with_event(two_rank_trace().to_json(),
                 {{"name", "x"}, {"ph", "f"}, {"id", 99}, {"pid", 0}, {"tid", 0}, {"ts", 10.0}});
  auto problems = check_trace(j);
  ASSERT_FALSE(problems.empty());
  bool no_bp = false, no_start = false;
  for (const auto& p : problems) {
    no_bp |= p.find("bp") != std::string::npos;
    no_start |= p.find("has no start") != std::string::npos;
  }
  EXPECT_TRUE(no_bp);
  EXPECT_TRUE(no_start);
  // A flow end outside any slice of its thread.
  j = with_event(two_rank_trace().to_json(),
                 {{"name", "y"}, {"ph", "s"}, {"id", 7}, {"pid", 0}, {"tid", 1}, {"ts", 5000.0}});
  j = with_event(
      j,
      {{"name", "y"}, {"ph", "f"}, {"bp", "e"}, {"id", 7}, {"pid", 1}, {"tid", 1}, {"ts", 10.0}});
  problems = check_trace(j);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("lies in no slice"), std::string::npos) << problems[0];
}

TEST(Trace, CheckCatchesMissingFieldsAndNames) {
  EXPECT_FALSE(check_trace(nlohmann::json::object()).empty());
  nlohmann::json j = {
      {"traceEvents", {{{"ph", "X"}, {"pid", 5}, {"tid", 0}, {"ts", 0.0}, {"dur", 1.0}}}}};
  const auto problems = check_trace(j);
  bool no_name = false, unnamed_process = false;
  for (const auto& p : problems) {
    no_name |= p.find("has no \"name\"") != std::string::npos;
    unnamed_process |= p.find("no process_name") != std::string::npos;
  }
  EXPECT_TRUE(no_name);
  EXPECT_TRUE(unnamed_process);
  j = {{"traceEvents",
        {{{"name", "n"}, {"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", 0.0}, {"dur", -1.0}}}}};
  EXPECT_FALSE(check_trace(j).empty());
}

TEST(TraceSvg, DrawsRowsSlicesAndLabels) {
  const auto svg = render_trace_svg(two_rank_trace().to_json(), {.title = "two ranks"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("two ranks"), std::string::npos);
  EXPECT_NE(svg.find("rank 0 · compute"), std::string::npos);
  EXPECT_NE(svg.find("rank 1 · pp send/recv"), std::string::npos);
  EXPECT_NE(svg.find("#3b6fb6"), std::string::npos);  // forward colour
  // Every positive-duration slice drawn once, with a hover title.
  std::size_t titles = 0;
  for (auto pos = svg.find("<title>"); pos != std::string::npos; pos = svg.find("<title>", pos + 1))
    ++titles;
  EXPECT_EQ(titles, 4u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// A large run stays a small drawing: ranks with identical timelines share one row named
// after the ranks it stands for (and the drawing says so), and slices narrower than a
// pixel are merged per pixel column. 32 ranks of 2000 slices each, two distinct timelines
// (even and odd ranks): drawn one rectangle per slice, it was about 10 MB.
TEST(TraceSvg, CollapsesIdenticalRanksAndMergesSubPixelSlices) {
  Trace t;
  for (int r = 0; r < 32; ++r) {
    t.name_process(r, "rank " + std::to_string(r), r);
    t.name_thread(r, trace_thread::compute, "compute", 0);
    for (int i = 0; i < 2000; ++i)  // 1 us each, 1 us apart (odd ranks start 0.5 us later)
      t.add_slice({i % 2 ? "B" + std::to_string(i) : "F" + std::to_string(i),
                   "",
                   r,
                   trace_thread::compute,
                   Seconds((2.0 * i + 0.5 * (r % 2)) * 1e-6),
                   Seconds(1e-6),
                   {}});
  }
  const auto svg = render_trace_svg(t.to_json());
  EXPECT_LT(svg.size(), 200'000u) << svg.size();
  EXPECT_NE(svg.find("32 ranks drawn as 2 distinct timelines"), std::string::npos);
  EXPECT_NE(svg.find(">ranks 0, 2, 4, 6, 8, … (16) · compute"), std::string::npos);
  EXPECT_NE(svg.find(">ranks 1, 3, 5, 7, 9, … (16) · compute"), std::string::npos);
  EXPECT_NE(svg.find("<title>ranks 0, 2, 4, 6, 8, 10,"), std::string::npos);  // the whole list
  EXPECT_NE(svg.find("slices narrower than 2 px"), std::string::npos);
  EXPECT_NE(svg.find("#3b6fb6"), std::string::npos);  // forward and backward still coloured
  EXPECT_NE(svg.find("#e8772e"), std::string::npos);
  // Consecutive ranks collapse into ranges.
  Trace same;
  for (int r = 0; r < 6; ++r) {
    same.name_process(r, "rank " + std::to_string(r), r);
    same.add_slice({"F0", "", r, 0, Seconds(0), Seconds(1e-3), {}});
  }
  EXPECT_NE(render_trace_svg(same.to_json()).find(">ranks 0-5 (6) · "), std::string::npos);
}

TEST(TraceSvg, EscapesMarkup) {
  Trace t;
  t.name_process(0, "a<b & c>", 0);
  t.add_slice({"F<1>", "", 0, 0, Seconds(0), Seconds(1), {}});
  const auto svg = render_trace_svg(t.to_json());
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_NE(svg.find("a&lt;b &amp; c&gt;"), std::string::npos);
}

}  // namespace
}  // namespace tandem
