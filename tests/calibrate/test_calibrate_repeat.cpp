// `tandem calibrate` run twice in a row gives the same table: every row of an op longer than
// 100 µs agrees within 5% (issue 15). Timings only reproduce on a quiet machine, so the test
// first measures the noise it is under — the drift between the medians of five batches of
// timed runs of two fixed reference ops (a 256³ fp32 gemm on one thread, compute-bound, and a
// 7.5 MB fill flushed from the caches before each run as the calibration flushes its ops,
// bound by the memory bandwidth the other tenants of the host share), and how their speed
// moved between probes taken before, between and after the two calibrations — prints it, and
// asserts the 5% agreement only when all of that stayed under 3% (the measurement cannot be
// sharper than the machine). Both reference ops are also rows of the calibrated scenario, so
// the tables themselves say how the machine moved while they were taken: a probe sees three
// moments, and CI once saw 2.6% there while the fill row moved 36% between the tables. On a busier
// machine it says how noisy it found it and is skipped, not passed — after asserting what holds on
// any machine: the typical row (the median over the rows' disagreements) within 5% (0.7-0.9%
// measured on a 2-core EPYC VM whose reference ops drifted 11-25%, where the every-row claim is
// never tested).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "exec/calibrate/measure_op.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "kernels/cpu/threads.hpp"
#include "sim/calibration.hpp"
#include "tests/tools/run_tandem.hpp"

namespace tandem {
namespace {

constexpr double kQuietDrift = 0.03;  // the noise under which the 5% claim is tested
constexpr double kAgreement = 0.05;   // per-row medians of two calibrations
constexpr double kLongOp = 100e-6;    // rows shorter than this are not held to it

const calibrate::OpShape kReferenceGemm{.op = "gemm", .m = 256, .n = 256, .k = 256};
const calibrate::OpShape kReferenceFill{.op = "fill", .m = 1874944};

// The medians of five batches of timed runs (11 at least, 20 ms at least) of one reference op.
std::vector<double> batch_medians(const calibrate::OpShape& shape) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  calibrate::MeasureOptions o;
  o.warmup = 3;
  o.repetitions = 11;
  o.flush_host_caches = true;
  o.min_time_seconds = 0.02;  // a batch of 11 runs of 0.2 ms moves with one interrupt
  std::vector<double> medians;
  for (int batch = 0; batch < 5; ++batch)
    medians.push_back(calibrate::measure_op(device, shape, o).seconds);
  return medians;
}

// How fast the machine runs the compute-bound and the memory-bound reference op now: the
// median of their batch medians, and the drift (max − min) / min between batches.
struct Probe {
  double gemm = 0, fill = 0, drift = 0;
};
Probe probe() {
  Probe p;
  for (const bool is_gemm : {true, false}) {
    auto m = batch_medians(is_gemm ? kReferenceGemm : kReferenceFill);
    std::sort(m.begin(), m.end());
    (is_gemm ? p.gemm : p.fill) = m[m.size() / 2];
    p.drift = std::max(p.drift, (m.back() - m.front()) / m.front());
  }
  return p;
}

// The noise over the whole test: within each probe, and between probes taken before,
// between and after the two calibrations (a machine that slows down between them moves
// every row of the second table, which no probe of its own would see).
double noise_of(const std::vector<Probe>& probes) {
  double noise = 0;
  for (const Probe& p : probes) noise = std::max(noise, p.drift);
  for (std::size_t i = 1; i < probes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      noise = std::max(noise, std::abs(probes[i].gemm - probes[j].gemm) / probes[j].gemm);
      noise = std::max(noise, std::abs(probes[i].fill - probes[j].fill) / probes[j].fill);
    }
  return noise;
}

// How far a reference op's row moved between the two tables (the same op, the same code: what
// moved is the machine). Both must be rows of the scenario: without them the gate would see
// only the probes' three moments.
double table_drift(const sim::CalibrationTable& a, const sim::CalibrationTable& b,
                   const calibrate::OpShape& ref, std::ostream& out) {
  const auto find = [&](const sim::CalibrationTable& c) -> const sim::CalibrationRow* {
    for (const auto& r : c.rows)
      if (std::tie(r.op, r.dtype, r.m, r.n, r.k, r.batch) == ref.key()) return &r;
    return nullptr;
  };
  const auto *x = find(a), *y = find(b);
  EXPECT_TRUE(x != nullptr && y != nullptr)
      << "the reference " << ref.op << " is not a row of both tables: the scenario changed";
  if (x == nullptr || y == nullptr) return 1;  // an unknown drift counts as a noisy machine
  out << " " << ref.op << " " << x->seconds * 1e6 << " then " << y->seconds * 1e6 << " µs";
  return std::abs(x->seconds - y->seconds) / std::min(x->seconds, y->seconds);
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

TEST(CalibrateRepeat, TwoTablesInARowAgreeWithin5PercentOnEveryLongRowOnAQuietMachine) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  std::vector<Probe> probes{probe()};
  calibrate_to(dir / "tandem_repeat_a.json");
  probes.push_back(probe());
  calibrate_to(dir / "tandem_repeat_b.json");
  probes.push_back(probe());
  const auto a = sim::load_calibration(dir / "tandem_repeat_a.json");
  const auto b = sim::load_calibration(dir / "tandem_repeat_b.json");

  // What always holds: the same shapes, each with its spread around its median.
  ASSERT_EQ(a.rows.size(), b.rows.size());
  ASSERT_FALSE(a.rows.empty());
  double worst = 0;
  int long_rows = 0;
  std::vector<double> diffs;
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
    diffs.push_back(diff);
    if (diff > kAgreement)
      report << "  " << x.op << " (" << x.m << ", " << x.n << ", " << x.k << ", " << x.batch
             << "): " << x.seconds * 1e6 << " µs then " << y.seconds * 1e6 << " µs\n";
  }
  ASSERT_GT(long_rows, 0) << "the scenario has no op over 100 µs to compare";
  std::sort(diffs.begin(), diffs.end());
  const double typical = diffs[diffs.size() / 2];
  std::ostringstream in_tables;
  const double noise = std::max({noise_of(probes), table_drift(a, b, kReferenceGemm, in_tables),
                                 table_drift(a, b, kReferenceFill, in_tables)});
  std::cout << "reference ops (gemm 256³, fill 7.5 MB from memory) before / between / after: gemm";
  for (const Probe& p : probes) std::cout << " " << p.gemm * 1e6;
  std::cout << " µs, fill";
  for (const Probe& p : probes) std::cout << " " << p.fill * 1e6;
  std::cout << " µs; in the two tables:" << in_tables.str() << "; noise " << 100 * noise << "%; "
            << long_rows << " rows over 100 µs, median disagreement " << 100 * typical
            << "%, worst " << 100 * worst << "%\n";
  if (worst > kAgreement) std::cout << "rows that moved more than 5%:\n" << report.str();
  RecordProperty("noise_percent", std::to_string(100 * noise));
  RecordProperty("worst_disagreement_percent", std::to_string(100 * worst));
  // The typical row agrees within 5 %, or within the reference ops' own drift where the
  // machine moved more than that while the two tables were taken.
  EXPECT_LE(typical, std::max(kAgreement, noise))
      << "the typical row moved more than 5% (and more than the machine's drift) between two "
         "calibrations";
  if (noise > kQuietDrift)
    GTEST_SKIP() << "machine too noisy to hold calibrations to 5%: the reference ops (their "
                    "probes' batch medians, their rows in the two tables) drifted "
                 << 100 * noise << "% (needs ≤ " << 100 * kQuietDrift
                 << "%); worst row disagreement seen " << 100 * worst << "%";
  EXPECT_LE(worst, kAgreement) << "rows whose medians moved more than 5%:\n" << report.str();
}

}  // namespace
}  // namespace tandem
