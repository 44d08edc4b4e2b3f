// `tandem calibrate` run twice in a row gives the same table: per-row medians agree within
// 5% for every op longer than 100 µs. Timings only reproduce on a quiet machine, so the test
// first measures the noise it is under — the drift between the medians of five batches of
// timed runs of two fixed reference ops (a 256³ fp32 gemm on one thread, compute-bound, and a
// 7.5 MB fill, memory-bound: a neighbour streaming memory slows the second, not the first) — before
// and after the two calibrations, prints it, and asserts the 5% agreement only when that drift
// stayed under 2% (the measurement cannot be sharper than the machine). On a busier machine it says
// how noisy it found it and is skipped, not passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "exec/calibrate/measure_op.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "kernels/cpu/threads.hpp"
#include "sim/calibration.hpp"
#include "tests/tools/run_tandem.hpp"

namespace tandem {
namespace {

constexpr double kQuietDrift = 0.02;  // the noise under which the 5% claim is tested
constexpr double kAgreement = 0.05;   // per-row medians of two calibrations
constexpr double kLongOp = 100e-6;    // rows shorter than this are not held to it

// (max − min) / min of the medians of five batches of 11 timed runs of one reference op.
double drift_of(const calibrate::OpShape& shape) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  calibrate::MeasureOptions o;
  o.warmup = 3;
  o.repetitions = 11;
  std::vector<double> medians;
  for (int batch = 0; batch < 5; ++batch)
    medians.push_back(calibrate::measure_op(device, shape, o).seconds);
  const auto [lo, hi] = std::minmax_element(medians.begin(), medians.end());
  return (*hi - *lo) / *lo;
}

// The larger drift of the compute-bound and the memory-bound reference op.
double reference_drift() {
  return std::max(drift_of({.op = "gemm", .m = 256, .n = 256, .k = 256}),
                  drift_of({.op = "fill", .m = 1874944}));
}

std::string calibrate_to(const std::filesystem::path& table) {
  const auto r = testing::run(
      std::string("calibrate --device cpu ") + TANDEM_SOURCE_DIR +
      "/scenarios/brown-small.json --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
      "--seq-length 128 --vocab-size 1000 --micro-batch-size 2 --global-batch-size 4 "
      "--world-size 1 --threads 1 --quiet -o " +
      table.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(CalibrateRepeat, TwoTablesInARowAgreeWithin5PercentOnAQuietMachine) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  const double before = reference_drift();
  calibrate_to(dir / "tandem_repeat_a.json");
  calibrate_to(dir / "tandem_repeat_b.json");
  const double after = reference_drift();
  const auto a = sim::load_calibration(dir / "tandem_repeat_a.json");
  const auto b = sim::load_calibration(dir / "tandem_repeat_b.json");

  // What always holds: the same shapes, each with its spread around its median.
  ASSERT_EQ(a.rows.size(), b.rows.size());
  ASSERT_FALSE(a.rows.empty());
  double worst = 0;
  int long_rows = 0;
  std::ostringstream report;
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    const auto &x = a.rows[i], &y = b.rows[i];
    ASSERT_EQ(std::tie(x.op, x.dtype, x.m, x.n, x.k, x.batch),
              std::tie(y.op, y.dtype, y.m, y.n, y.k, y.batch));
    EXPECT_GE(x.repetitions, 11);
    EXPECT_LE(x.min_seconds, x.seconds);
    EXPECT_GE(x.max_seconds, x.seconds);
    if (std::min(x.seconds, y.seconds) < kLongOp) continue;
    ++long_rows;
    const double diff = std::abs(x.seconds - y.seconds) / std::min(x.seconds, y.seconds);
    worst = std::max(worst, diff);
    if (diff > kAgreement)
      report << "  " << x.op << " (" << x.m << ", " << x.n << ", " << x.k << ", " << x.batch
             << "): " << x.seconds * 1e6 << " µs then " << y.seconds * 1e6 << " µs\n";
  }
  const double noise = std::max(before, after);
  std::cout << "reference drift (gemm and fill): " << 100 * before << "% before, " << 100 * after
            << "% after; " << long_rows << " rows over 100 µs, worst disagreement " << 100 * worst
            << "%\n";
  RecordProperty("noise_percent", std::to_string(100 * noise));
  RecordProperty("worst_disagreement_percent", std::to_string(100 * worst));
  ASSERT_GT(long_rows, 0) << "the scenario has no op over 100 µs to compare";
  if (noise > kQuietDrift)
    GTEST_SKIP() << "machine too noisy to hold calibrations to 5%: the reference ops' "
                    "batch medians drifted "
                 << 100 * noise << "% (needs ≤ " << 100 * kQuietDrift
                 << "%); worst row disagreement seen " << 100 * worst << "%";
  EXPECT_LE(worst, kAgreement) << "rows whose medians moved more than 5%:\n" << report.str();
}

}  // namespace
}  // namespace tandem
