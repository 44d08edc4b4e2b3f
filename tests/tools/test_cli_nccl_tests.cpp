// tandem nccl-tests: the nccl-tests table of a preset, as JSON and text, and its input
// checks (bad sizes and collectives rejected before anything runs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/tools/run_tandem.hpp"

namespace tandem {
namespace {

TEST(CliNcclTests, JsonRowsDoubleInSizeAndApproachTheBusBandwidth) {
  const auto r = testing::run(
      "nccl-tests --topology dgx-a100-80g --collective all_reduce --gpus 8 --bytes 1K:1G "
      "--factor 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 11u);  // 1 KiB, 4 KiB, …, 1 GiB
  EXPECT_EQ(rows.front().at("bytes"), 1024);
  EXPECT_EQ(rows.back().at("bytes"), 1LL << 30);
  // Small sizes are latency-bound on a low-latency protocol; 1 GiB runs at the 229.25 GB/s
  // nccl-tests measured on one DGX A100 (vTrain's table, which the preset carries),
  // below the 240 GB/s NVLink bus bandwidth of NCCL's ring (busbw = algbw · 2(n−1)/n).
  EXPECT_EQ(rows.front().at("algorithm"), "ring/LL x12 measured");
  EXPECT_LT(rows.front().at("busbw_gbs").get<double>(), 1.0);
  EXPECT_NEAR(rows.back().at("busbw_gbs").get<double>(), 229.25, 0.01);
  const double b = rows.back().at("bytes"), us = rows.back().at("time_us");
  EXPECT_NEAR(rows.back().at("algbw_gbs").get<double>(), b / us / 1e3, 1e-6);
}

TEST(CliNcclTests, TextTableHasTheNcclTestsColumns) {
  const auto r = testing::run("nccl-tests --topology dgx-h100 --gpus 16 --bytes 1M:4M");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all_reduce on 16 GPUs (2 nodes of dgx-h100)"), std::string::npos);
  EXPECT_NE(r.output.find("busbw"), std::string::npos);
  EXPECT_NE(r.output.find("1048576"), std::string::npos);
  EXPECT_NE(r.output.find("4194304"), std::string::npos);
}

// GB200 NVL72: one rack is one NVLink domain of 18 trays, so NCCL's NVLS runs over all 72
// GPUs; two racks lose NVLS and ring over NVLink with one channel per NIC of a rack (72),
// so the NICs do not bind (figures derived by hand in tests/sim/test_nvlink_domain.cpp).
TEST(CliNcclTests, Gb200Nvl72OneRackIsOneNodeToNccl) {
  auto r = testing::run("nccl-tests --topology gb200-nvl72 --gpus 72 --bytes 4G:4G");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all_reduce on 72 GPUs (18 nodes in 1 NVLink domain of gb200-nvl72)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("nvls/Simple"), std::string::npos) << r.output;
  r = testing::run("nccl-tests --topology gb200-nvl72 --gpus 144 --bytes 4G:4G");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(36 nodes in 2 NVLink domains of gb200-nvl72)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ring/Simple x72"), std::string::npos) << r.output;
}

TEST(CliNcclTests, BadInputIsRejectedWithTheField) {
  auto r = testing::run("nccl-tests --bytes 1K");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("bytes"), std::string::npos) << r.output;
  r = testing::run("nccl-tests --bytes 1X:8G");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("1X:8G"), std::string::npos) << r.output;
  r = testing::run("nccl-tests --collective allreduce");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("all_reduce | all_gather"), std::string::npos) << r.output;
  r = testing::run("nccl-tests --gpus 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("at least 2 GPUs"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem
