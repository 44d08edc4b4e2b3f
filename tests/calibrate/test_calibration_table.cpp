// From measured timings to the simulator's prices: the table `tandem calibrate` writes
// round-trips through save/load, and the cost model then charges the measured seconds for
// the measured shape and the fitted measured / model scale for other shapes of the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "exec/calibrate/measure_op.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "kernels/cpu/threads.hpp"
#include "sim/cost_model.hpp"
#include "tools/calibration_table.hpp"
#include "topology/topology_io.hpp"

namespace tandem {
namespace {

TEST(CalibrationTable, MeasuredOpsArePricedWithTheirSeconds) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  const sim::OpDesc gemm{.op = "gemm",
                         .m = 64,
                         .n = 96,
                         .k = 128,
                         .flops = 2.0 * 64 * 96 * 128,
                         .bytes = 4.0 * (64 * 128 + 128 * 96 + 64 * 96)};
  const sim::OpDesc layer_norm{
      .op = "layer_norm", .m = 64, .n = 256, .flops = 8.0 * 64 * 256, .bytes = 4.0 * 2 * 64 * 256};
  const std::vector<calibrate::OpShape> shapes = {cli::op_shape_of(gemm),
                                                  cli::op_shape_of(layer_norm)};
  const auto timings = calibrate::measure_ops(device, shapes);
  ASSERT_EQ(timings.size(), 2u);  // sorted: gemm before layer_norm

  const auto table = cli::calibration_table_of(timings, "EPYC-Zen4-core", "test");
  const auto path = std::filesystem::path(::testing::TempDir()) / "tandem_calibration_table.json";
  sim::save_calibration(table, path);
  const auto loaded = sim::load_calibration(path);
  EXPECT_EQ(loaded, table);
  ASSERT_EQ(loaded.rows.size(), 2u);
  EXPECT_EQ(loaded.rows[0].op, "gemm");
  EXPECT_EQ(loaded.rows[0].k, 128);
  EXPECT_EQ(loaded.rows[0].flops, gemm.flops);
  EXPECT_EQ(loaded.rows[1].bytes, layer_norm.bytes);

  const Topology host = load_topology("cpu-host");
  const sim::CostModel calibrated(host.gpu, loaded), model(host.gpu);
  EXPECT_EQ(calibrated.seconds(gemm), timings[0].seconds);
  EXPECT_EQ(calibrated.seconds(layer_norm), timings[1].seconds);
  // Another gemm: the model's price times the one row's measured / modelled ratio.
  sim::OpDesc other = gemm;
  other.k = 512;
  other.flops = 2.0 * 64 * 96 * 512;
  other.bytes = 4.0 * (64 * 512 + 512 * 96 + 64 * 96);
  const double scale = timings[0].seconds / model.model_seconds(gemm);
  EXPECT_DOUBLE_EQ(calibrated.seconds(other), model.model_seconds(other) * scale);
}

TEST(CalibrationTable, IssuedOpsBecomeShapesFieldByField) {
  const std::vector<sim::IssuedOp> issued = {{{.op = "attention",
                                               .dtype = DType::bf16,
                                               .m = 2048,
                                               .n = 2048,
                                               .k = 128,
                                               .batch = 96,
                                               .flops = 1e12,
                                               .bytes = 3e9},
                                              0.5},
                                             {{.op = "fill", .m = 7, .bytes = 28}, 1e-6}};
  const auto shapes = cli::op_shapes_of(issued);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].op, "attention");
  EXPECT_EQ(shapes[0].dtype, DType::bf16);
  EXPECT_EQ(shapes[0].m, 2048);
  EXPECT_EQ(shapes[0].n, 2048);
  EXPECT_EQ(shapes[0].k, 128);
  EXPECT_EQ(shapes[0].batch, 96);
  EXPECT_EQ(shapes[0].flops, 1e12);
  EXPECT_EQ(shapes[0].bytes, 3e9);
  EXPECT_EQ(shapes[1].op, "fill");
  EXPECT_EQ(shapes[1].m, 7);
  EXPECT_EQ(shapes[1].batch, 1);
}

// An op slice of rank `pid` in a hand-written trace (fp32, batch 1, at ts 0).
nlohmann::json op_slice(int pid, const char* name, double dur, std::int64_t m, std::int64_t n,
                        std::int64_t k) {
  return nlohmann::json{
      {"name", name}, {"cat", "op"},
      {"ph", "X"},    {"pid", pid},
      {"tid", 0},     {"ts", 0.0},
      {"dur", dur},   {"args", {{"dtype", "fp32"}, {"m", m}, {"n", n}, {"k", k}, {"batch", 1}}}};
}

// A hand-written trace: three gemm slices of one shape (2, 5 and 3 µs: median 3, min 2,
// max 5), one layer_norm, and slices that are not ops (a forward, a collective) ignored.
nlohmann::json hand_trace() {
  auto op = [](const char* name, double dur, std::int64_t m, std::int64_t n, std::int64_t k) {
    return op_slice(0, name, dur, m, n, k);
  };
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "F0"}, {"cat", "forward"}, {"ph", "X"}, {"ts", 0.0}, {"dur", 50.0}});
  events.push_back(op("gemm", 2, 256, 768, 256));
  events.push_back(op("gemm", 5, 256, 768, 256));
  events.push_back(op("layer_norm", 7, 256, 256, 0));
  events.push_back(op("gemm", 3, 256, 768, 256));
  events.push_back({{"name", "allreduce dp"}, {"cat", "collective"}, {"ph", "X"}, {"dur", 9.0}});
  return {{"traceEvents", events}};
}

// One trace table row: its op, median, extremes and count.
void expect_row(const calibrate::OpTiming& t, const char* op, double median, double min, double max,
                int repetitions) {
  EXPECT_EQ(t.shape.op, op);
  EXPECT_DOUBLE_EQ(t.seconds, median);
  EXPECT_DOUBLE_EQ(t.min_seconds, min);
  EXPECT_DOUBLE_EQ(t.max_seconds, max);
  EXPECT_EQ(t.repetitions, repetitions);
}

TEST(CalibrationFromTrace, OneRowPerShapeWithMedianAndSpread) {
  const auto timings = cli::op_timings_of_trace(hand_trace());
  ASSERT_EQ(timings.size(), 2u);
  expect_row(timings[0], "gemm", 3e-6, 2e-6, 5e-6, 3);
  EXPECT_EQ(timings[0].shape.n, 768);
  EXPECT_EQ(timings[1].shape.op, "layer_norm");
  EXPECT_DOUBLE_EQ(timings[1].seconds, 7e-6);
  EXPECT_EQ(timings[1].repetitions, 1);

  // The spread survives the table's save/load.
  auto table = cli::calibration_table_of(timings, "EPYC-Zen4-core", "trace");
  const auto path = std::filesystem::path(::testing::TempDir()) / "tandem_trace_table.json";
  sim::save_calibration(table, path);
  const auto loaded = sim::load_calibration(path);
  EXPECT_EQ(loaded, table);
  EXPECT_EQ(loaded.rows[0].repetitions, 3);
  EXPECT_DOUBLE_EQ(loaded.rows[0].max_seconds, 5e-6);
}

// A synchronous step runs at its slowest rank's pace: of the ranks that issued a shape, the
// one whose median slice is the longest gives the row (its median, extremes and count),
// not the pooled slices of all ranks.
TEST(CalibrationFromTrace, EachShapeIsTimedOnItsSlowestRank) {
  auto op = [](int pid, const char* name, double dur, std::int64_t n) {
    return op_slice(pid, name, dur, 4, n, 4);
  };
  nlohmann::json events = nlohmann::json::array();
  for (const double d : {2.0, 3.0, 4.0, 40.0}) events.push_back(op(0, "gemm", d, 8));
  for (const double d : {5.0, 6.0, 7.0}) events.push_back(op(1, "gemm", d, 8));
  events.push_back(op(0, "layer_norm", 9.0, 8));  // issued by rank 0 alone
  const auto timings = cli::op_timings_of_trace({{"traceEvents", events}});
  ASSERT_EQ(timings.size(), 2u);
  // Pooled, the median of the seven gemm slices would be 5; rank 0's alone 4, rank 1's 6.
  expect_row(timings[0], "gemm", 6e-6, 5e-6, 7e-6, 3);
  EXPECT_EQ(timings[1].shape.op, "layer_norm");
  EXPECT_DOUBLE_EQ(timings[1].seconds, 9e-6);
}

TEST(CalibrationFromTrace, SimulatedWorkIsAttachedAndMissingShapesListed) {
  auto timings = cli::op_timings_of_trace(hand_trace());
  const std::vector<calibrate::OpShape> simulated = {
      {.op = "gemm", .m = 256, .n = 768, .k = 256, .flops = 1e8, .bytes = 2e6},
      {.op = "gemm", .m = 256, .n = 768, .k = 256, .flops = 1e8, .bytes = 2e6},
      {.op = "gelu", .m = 256, .n = 1024, .flops = 2e6, .bytes = 2e6}};
  const auto missing = cli::attach_simulated_work(timings, simulated);
  EXPECT_EQ(timings[0].shape.flops, 1e8);
  EXPECT_EQ(timings[0].shape.bytes, 2e6);
  EXPECT_EQ(timings[1].shape.flops, 0);  // layer_norm: the simulation did not issue it
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].op, "gelu");
}

TEST(CalibrationFromTrace, ATraceWithoutOpSlicesOrWithBrokenOnesIsRefused) {
  nlohmann::json no_ops = hand_trace();
  auto& events = no_ops["traceEvents"];
  events.erase(std::remove_if(events.begin(), events.end(),
                              [](const nlohmann::json& e) { return e.value("cat", "") == "op"; }),
               events.end());
  try {
    cli::op_timings_of_trace(no_ops, "run.json");
    FAIL() << "a trace without op slices was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--trace-ops"), std::string::npos) << e.what();
  }
  nlohmann::json bad = hand_trace();
  bad["traceEvents"][2]["args"]["m"] = -4;
  try {
    cli::op_timings_of_trace(bad, "run.json");
    FAIL() << "a negative m was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("traceEvents[2].args.m"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cli::op_timings_of_trace(nlohmann::json::array()), ConfigError);
}

TEST(CalibrationFromTrace, SkippedIterationsLeaveOutTheColdFirstStep) {
  // Rank 0 starts iterations at 0 and 10 µs (forward of microbatch 0, chunk 0); its gemm
  // took 50 µs cold in the first, 2 and 4 µs in the second. Skipping one iteration keeps
  // {2, 4}: median (the upper) 4, min 2, 2 repetitions.
  auto slice = [](const char* name, const char* cat, double ts, double dur, nlohmann::json args) {
    return nlohmann::json{{"name", name}, {"cat", cat}, {"ph", "X"},  {"pid", 0},
                          {"tid", 0},     {"ts", ts},   {"dur", dur}, {"args", args}};
  };
  const nlohmann::json gemm = {{"dtype", "fp32"}, {"m", 8}, {"n", 8}, {"k", 8}, {"batch", 1}};
  const nlohmann::json first = {{"microbatch", 0}, {"chunk", 0}};
  nlohmann::json events = nlohmann::json::array();
  events.push_back(slice("F0", "forward", 0, 9, first));
  events.push_back(slice("gemm", "op", 1, 50, gemm));
  events.push_back(slice("F1", "forward", 5, 1, {{"microbatch", 1}, {"chunk", 0}}));
  events.push_back(slice("F0", "forward", 10, 9, first));
  events.push_back(slice("gemm", "op", 11, 2, gemm));
  events.push_back(slice("gemm", "op", 14, 4, gemm));
  // An upload in the set-up, before the first iteration, and never again: kept as it is.
  events.push_back(slice("upload", "op", -5, 3, {{"dtype", "fp32"}, {"m", 64}}));
  const nlohmann::json trace = {{"traceEvents", events}};
  const auto all = cli::op_timings_of_trace(trace, "t", 0);
  ASSERT_EQ(all.size(), 2u);  // gemm, upload
  EXPECT_EQ(all[0].repetitions, 3);
  EXPECT_DOUBLE_EQ(all[0].max_seconds, 50e-6);
  const auto warm = cli::op_timings_of_trace(trace, "t", 1);
  ASSERT_EQ(warm.size(), 2u);
  EXPECT_EQ(warm[1].shape.op, "upload");
  EXPECT_DOUBLE_EQ(warm[1].seconds, 3e-6);
  EXPECT_EQ(warm[0].repetitions, 2);
  EXPECT_DOUBLE_EQ(warm[0].seconds, 4e-6);
  EXPECT_DOUBLE_EQ(warm[0].min_seconds, 2e-6);
  // Two iterations: skipping both leaves nothing to time, and says so.
  EXPECT_THROW(cli::op_timings_of_trace(trace, "t", 2), ConfigError);
}

TEST(CalibrationFromTrace, ASpreadThatExcludesTheMedianIsRefusedOnLoad) {
  sim::CalibrationTable t{.gpu = "", .source = "", .rows = {}};
  t.rows.push_back({.op = "gemm",
                    .m = 8,
                    .n = 8,
                    .k = 8,
                    .seconds = 2e-6,
                    .min_seconds = 3e-6,
                    .max_seconds = 4e-6,
                    .repetitions = 5});
  EXPECT_THROW(sim::parse_calibration(sim::to_json(t)), ConfigError);
  t.rows[0].min_seconds = 1e-6;
  EXPECT_EQ(sim::parse_calibration(sim::to_json(t)), t);
}

}  // namespace
}  // namespace tandem
