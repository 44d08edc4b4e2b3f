// `tandem calibrate --from-trace`, as a user runs it: a real single-process training run
// traced with --trace-ops gives a table holding every op shape the simulated step issues
// (the slices carry the simulator's keys), which `tandem simulate --calibration` takes; a
// trace without op slices, or --trace-ops without --trace, is refused with the fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "sim/calibration.hpp"
#include "tests/tools/run_tandem.hpp"

namespace tandem {
namespace {

const std::string kSmall =
    std::string(TANDEM_SOURCE_DIR) +
    "/scenarios/brown-small.json --num-layers 1 --hidden-size 64 --num-attention-heads 2 "
    "--seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4 --world-size 1";

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tandem_from_trace";
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(CalibrateFromTrace, ATracedRunGivesATableOfEverySimulatedShape) {
  const auto trace = (temp_dir() / "run.json").string(), table = (temp_dir() / "t.json").string();
  const auto train = testing::run("train " + kSmall +
                                  " --mock-data --train-iters 3 --lr-warmup-iters 1 --threads 1 " +
                                  "--trace " + trace + " --trace-ops");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const auto r =
      testing::run("calibrate --device cpu --from-trace " + trace + " " + kSmall + " -o " + table);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("from the trace " + trace), std::string::npos) << r.output;
  // Every simulated shape was found among the slices: no "not in the trace" line.
  EXPECT_EQ(r.output.find("not in the trace"), std::string::npos) << r.output;
  const auto t = sim::load_calibration(table);
  EXPECT_EQ(t.gpu, "EPYC-Zen4-core");
  bool qkv = false;
  for (const auto& row : t.rows) {
    EXPECT_GT(row.seconds, 0) << row.op;
    EXPECT_GE(row.repetitions, 1) << row.op;
    EXPECT_LE(row.min_seconds, row.seconds);
    EXPECT_GE(row.max_seconds, row.seconds);
    // 3 iterations, the first skipped: 2 of 2 microbatches each, the QKV projection 4 times.
    if (row.op == "gemm" && row.m == 64 && row.n == 192 && row.k == 64) {
      qkv = true;
      EXPECT_EQ(row.repetitions, 4);
    }
  }
  EXPECT_TRUE(qkv) << r.output;
  const auto sim =
      testing::run("simulate " + kSmall +
                   " --topology cpu-host --gpus-per-node 64 --quiet --calibration " + table);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
}

TEST(CalibrateFromTrace, ATraceWithoutOpSlicesIsRefusedWithTheFix) {
  const auto trace = (temp_dir() / "plain.json").string(), table = (temp_dir() / "p.json").string();
  const auto train = testing::run("train " + kSmall +
                                  " --mock-data --train-iters 2 --lr-warmup-iters 1 --threads 1 " +
                                  "--trace " + trace);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  std::filesystem::remove(table);
  const auto r = testing::run("calibrate --from-trace " + trace + " " + kSmall + " -o " + table);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--trace-ops"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(table));
  const auto missing =
      testing::run("calibrate --from-trace /nonexistent/run.json " + kSmall + " -o " + table);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/run.json"), std::string::npos) << missing.output;
  const auto no_trace =
      testing::run("train " + kSmall + " --mock-data --train-iters 1 --trace-ops");
  EXPECT_NE(no_trace.exit_code, 0) << no_trace.output;
  EXPECT_NE(no_trace.output.find("--trace"), std::string::npos) << no_trace.output;
}

}  // namespace
}  // namespace tandem
