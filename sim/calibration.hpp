// Calibration tables: op times measured on real hardware (`tandem calibrate` on the cuda
// binding) that override the cost model. A table is JSON:
//
//   {"gpu": "A100-SXM4-80GB", "source": "tandem calibrate, node dgx-17, 2024-05-02",
//    "rows": [{"op": "gemm", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192,
//              "batch": 1, "seconds": 0.00436, "flops": 1.1e12, "bytes": 4.0e8,
//              "min_seconds": 0.00431, "max_seconds": 0.00452, "repetitions": 11}, …]}
//
// min_seconds, max_seconds and repetitions (optional) say how the median in "seconds" spread.
//
// How CostModel uses it (sim/cost_model.hpp): a row whose (op, dtype, m, n, k, batch)
// equals the priced op gives its time exactly; otherwise, when rows exist for the same
// (op, dtype), the model's time is multiplied by their fitted scale, the geometric mean of
// measured / modelled over those rows (rows of roofline ops need their "flops" and
// "bytes" for that; gemm and attention rows are priced from their shape). "gpu" (optional) must
// name the GpuSpec the table is applied to. Reading validates like scenarios do: every broken rule,
// one ConfigError, fields named "rows[3].seconds".
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.hpp"
#include "core/tensor.hpp"

namespace tandem::sim {

struct CalibrationRow {
  std::string op;  // a Device method name (device_op_names())
  DType dtype = DType::fp32;
  std::int64_t m = 0, n = 0, k = 0;  // as in OpDesc
  std::int64_t batch = 1;
  double seconds = 0;  // measured, > 0
  // The op's flops and bytes as OpDesc gave them (optional, 0 when absent): the model needs
  // them to price a row of a roofline op when fitting the scale of its (op, dtype).
  double flops = 0;
  double bytes = 0;
  // How reproducible `seconds` (their median) is: the fastest and slowest of the
  // `repetitions` timed runs (optional, 0 when absent; the cost model reads only seconds).
  double min_seconds = 0;
  double max_seconds = 0;
  std::int64_t repetitions = 0;

  bool operator==(const CalibrationRow&) const = default;
};

struct CalibrationTable {
  std::string gpu;     // GpuSpec::name the rows were measured on; "" = unchecked
  std::string source;  // where and how the rows were measured
  std::vector<CalibrationRow> rows;

  bool operator==(const CalibrationTable&) const = default;
};

// "fp32" → DType::fp32, …; throws std::invalid_argument for anything else.
DType parse_dtype(std::string_view name);

CalibrationTable parse_calibration(const nlohmann::json& j,
                                   std::string_view source = "calibration");
nlohmann::json to_json(const CalibrationTable& t);
CalibrationTable load_calibration(const std::filesystem::path& path);
// Written to a temporary name next to `path`, then renamed: a reader never sees half a table.
void save_calibration(const CalibrationTable& t, const std::filesystem::path& path);

}  // namespace tandem::sim
