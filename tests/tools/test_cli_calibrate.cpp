// `tandem calibrate`, run as a user runs it: a small scenario gives a table of positive
// op times for this machine's cpu-host "GPU" that `tandem simulate --calibration` accepts;
// an unknown device, a cuda run without CUDA or GPU, an unwritable or missing output and
// an invalid scenario are refused before any work (no table written).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "sim/calibration.hpp"
#include "tests/tools/run_tandem.hpp"

namespace {

using tandem::testing::Result;
using tandem::testing::run;

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tandem_cli_calibrate";
  std::filesystem::create_directories(dir);
  return dir;
}

const std::string kSmall =
    std::string(TANDEM_SOURCE_DIR) +
    "/scenarios/brown-small.json --num-layers 1 --hidden-size 64 --num-attention-heads 2 "
    "--seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4";

TEST(CliCalibrate, SmallScenarioGivesATableTheSimulatorTakes) {
  const auto table_path = (temp_dir() / "small.json").string();
  std::filesystem::remove(table_path);
  const auto r = run("calibrate --device cpu " + kSmall + " --threads 1 -o " + table_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + table_path), std::string::npos) << r.output;
  const auto table = tandem::sim::load_calibration(table_path);
  EXPECT_EQ(table.gpu, "EPYC-Zen4-core");
  EXPECT_EQ(table.source.rfind("tandem calibrate --device cpu on ", 0), 0u) << table.source;
  // One layer, hidden 64: the QKV projection C(64, 192) = X(64, 64) · Wᵀ is among the rows.
  bool qkv = false;
  for (const auto& row : table.rows) {
    EXPECT_GT(row.seconds, 0) << row.op;
    qkv |= row.op == "gemm" && row.m == 64 && row.n == 192 && row.k == 64;
  }
  EXPECT_TRUE(qkv) << r.output;
  const auto sim = run("simulate " + kSmall + " --topology cpu-host --gpus-per-node 64 --quiet " +
                       "--calibration " + table_path);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
}

TEST(CliCalibrate, BadInputIsRejectedBeforeWork) {
  const auto out = (temp_dir() / "never.json").string();
  std::filesystem::remove(out);
  struct Case {
    std::string args, expect;
    int code;
  };
  const std::vector<Case> cases = {
      {"--device tpu " + kSmall + " -o " + out, "--device", 105},  // CLI11's validation error
      {kSmall + " -o /nonexistent/dir/t.json", "/nonexistent/dir", 2},
      {kSmall + " -o " + temp_dir().string(), "is a folder", 2},
      {kSmall, "--output", 2},
      {kSmall + " --tensor-model-parallel-size 3 -o " + out, "tensor_model_parallel_size", 2},
      {kSmall + " --bf16 -o " + out, "bf16", 2},
      {kSmall + " --runs-per-sample 0 -o " + out, "--runs-per-sample: Value 0 not in range 1 to",
       105},
  };
  for (const auto& c : cases) {
    const auto r = run("calibrate " + c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CliCalibrate, CudaIsRefusedWithItsReasonOrCalibratesOnTheGpu) {
  const auto out = (temp_dir() / "cuda.json").string();
  const auto r = run("calibrate --device cuda " + kSmall + " -o " + out);
  if (r.exit_code == 0) {  // a build with CUDA on a machine with a GPU: it calibrated there
    EXPECT_TRUE(std::filesystem::exists(out)) << r.output;
    return;
  }
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const bool explained = r.output.find("built without CUDA") != std::string::npos ||
                         r.output.find("no CUDA GPU is visible") != std::string::npos;
  EXPECT_TRUE(explained) << r.output;
}

}  // namespace
