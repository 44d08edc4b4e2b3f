// Tests of calibration tables (sim/calibration.hpp): they round-trip through a file, and
// every bad row is reported with its index, field, value and rule.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "sim/calibration.hpp"

namespace tandem::sim {
namespace {

using nlohmann::json;

TEST(Calibration, SaveThenLoadGivesTheSameTable) {
  CalibrationTable t{.gpu = "A100-SXM4-80GB", .source = "test", .rows = {}};
  t.rows.push_back({"gemm", DType::bf16, 8192, 8192, 8192, 1, 0.00436});
  t.rows.push_back({"attention", DType::bf16, 2048, 0, 128, 64, 1.25e-3});
  t.rows.push_back({"layer_norm", DType::fp32, 4096, 1024, 0, 1, 2.5e-5, 4.2e7, 3.3e7});
  const auto dir = std::filesystem::temp_directory_path() / "tandem_test_calibration";
  std::filesystem::create_directories(dir);
  const auto path = dir / "table.json";
  save_calibration(t, path);
  EXPECT_FALSE(std::filesystem::exists(dir / "table.json.tmp"));
  EXPECT_EQ(load_calibration(path), t);
  std::filesystem::remove_all(dir);
}

TEST(Calibration, DefaultsForOmittedSizes) {
  const json j = {{"rows", {{{"op", "fill"}, {"seconds", 1e-6}}}}};
  const CalibrationTable t = parse_calibration(j);
  ASSERT_EQ(t.rows.size(), 1U);
  EXPECT_EQ(t.rows[0].dtype, DType::fp32);
  EXPECT_EQ(t.rows[0].m, 0);
  EXPECT_EQ(t.rows[0].batch, 1);
  EXPECT_TRUE(t.gpu.empty());
}

TEST(Calibration, EveryBadRowIsNamed) {
  const json j = {
      {"gpu", "A100-SXM4-80GB"},
      {"rowz", 1},
      {"rows",
       {{{"op", "gem"}, {"dtype", "bf16"}, {"m", 1}, {"n", 1}, {"k", 1}, {"seconds", 1e-5}},
        {{"op", "gemm"}, {"dtype", "bf17"}, {"batch", 0}, {"seconds", -1}},
        {{"op", "gelu"}, {"sconds", 1e-5}, {"m", 2.5}, {"bytes", -4}},
        "not a row"}}};
  try {
    parse_calibration(j, "cal.json");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    std::map<std::string, Violation> v;
    for (const auto& x : e.violations()) v[x.field] = x;
    EXPECT_EQ(e.source(), "cal.json");
    EXPECT_EQ(v.at("rowz").rule, "unknown key; did you mean \"rows\"?");
    EXPECT_EQ(v.at("rows[0].op").value, "gem");
    EXPECT_EQ(v.at("rows[0].op").rule, "is not a Device op; did you mean \"gemm\"?");
    EXPECT_EQ(v.at("rows[1].dtype").value, "bf17");
    EXPECT_EQ(v.at("rows[1].batch").rule, "must be ≥ 1");
    EXPECT_EQ(v.at("rows[1].seconds").value, "-1");
    EXPECT_EQ(v.at("rows[1].seconds").rule, "must be a finite number > 0");
    EXPECT_EQ(v.at("rows[2].sconds").rule, "unknown key; did you mean \"seconds\"?");
    EXPECT_EQ(v.at("rows[2].seconds").rule, "is required");
    EXPECT_EQ(v.at("rows[2].m").rule, "must be an integer");
    EXPECT_EQ(v.at("rows[2].bytes").rule, "must be a finite number ≥ 0");
    EXPECT_EQ(v.at("rows[3]").value, "not a row");
    EXPECT_EQ(e.violations().size(), 10U);
  }
}

TEST(Calibration, MissingFileAndMissingRows) {
  EXPECT_THROW(load_calibration("/nonexistent/table.json"), ConfigError);
  try {
    parse_calibration(json::object());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.violations().size(), 1U);
    EXPECT_EQ(e.violations()[0].field, "rows");
  }
}

TEST(Calibration, OpNamesAreTheDeviceMethods) {
  const auto& ops = device_op_names();
  // 23 of GPT, 3 of Megatron's bias fusions, 2 of its hidden dropout, 7 of Llama-style
  // layers, 1 of context parallelism, 7 of mixtures of experts, copy_rows, 5 of FP8 and
  // fp16's loss-scale check.
  EXPECT_EQ(ops.size(), 50U);
  EXPECT_EQ(ops.front(), "gemm");
  EXPECT_EQ(ops.back(), "download");
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_THROW(parse_dtype("tf32"), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::sim
