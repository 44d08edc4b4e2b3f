// Physical bounds on calibration rows (sim/calibration_check.hpp): a measured A100 GEMM is
// accepted; a row claiming a time no kernel takes, or a rate beyond any GPU (flops /
// seconds > 100 PFLOP/s, bytes / seconds > 100 TB/s), is refused naming the row's field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "sim/calibration.hpp"
#include "sim/calibration_check.hpp"

namespace tandem::sim {
namespace {

using nlohmann::json;

json table_with(const json& row) {
  return {{"rows", json::array({row})}};
}

std::string refused_field(const json& row) {
  try {
    parse_calibration(table_with(row), "test");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations().size(), 1u) << e.what();
    EXPECT_NE(e.violations().front().rule.find("physical bound"), std::string::npos) << e.what();
    return e.violations().front().field;
  }
  ADD_FAILURE() << "accepted: " << row.dump();
  return "";
}

const json kGemm = {{"op", "gemm"},       {"dtype", "bf16"}, {"m", 8192},
                    {"n", 8192},          {"k", 8192},       {"batch", 1},
                    {"seconds", 0.00436}, {"flops", 1.1e12}, {"bytes", 4.0e8}};

TEST(CalibrationBounds, AMeasuredA100GemmIsAccepted) {
  // 2·8192³ = 1.1e12 FLOP in 4.36 ms: 252 TFLOP/s, 81 % of the A100's 312.
  EXPECT_EQ(parse_calibration(table_with(kGemm)).rows.size(), 1u);
}

TEST(CalibrationBounds, ImpossibleTimesAndRatesAreRefused) {
  json slow = kGemm;
  slow["seconds"] = 1e6;  // 11 days for one kernel
  EXPECT_EQ(refused_field(slow), "rows[0].seconds");
  json instant = kGemm;
  instant["seconds"] = 1e-15;
  instant.erase("flops");
  instant.erase("bytes");
  EXPECT_EQ(refused_field(instant), "rows[0].seconds");
  json fast = kGemm;
  fast["flops"] = 1e16;  // in 4.36 ms: 2.3e18 FLOP/s
  EXPECT_EQ(refused_field(fast), "rows[0].flops");
  json wide = kGemm;
  wide["bytes"] = 1e13;  // in 4.36 ms: 2.3e15 B/s
  EXPECT_EQ(refused_field(wide), "rows[0].bytes");
  json huge = kGemm;
  huge["m"] = std::int64_t{1} << 40;
  EXPECT_EQ(refused_field(huge), "rows[0].m");
}

}  // namespace
}  // namespace tandem::sim
