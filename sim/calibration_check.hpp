// Physical bounds on a calibration table's rows, checked after parsing (calibration.cpp
// checks types and signs): a measured op time must be a kernel's time, and the rate it
// implies (flops / seconds, bytes / seconds) one that hardware can reach. A row outside
// would override the cost model with a time no GPU produces. Each violation names the
// field ("rows[3].seconds"), the value and the bound with its reason.
#pragma once

#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "sim/calibration.hpp"

namespace tandem::sim {

std::vector<Violation> calibration_bound_violations(const CalibrationTable& t);

// Throws ConfigError(source) carrying calibration_bound_violations(t) when there are any.
void check_calibration_bounds(const CalibrationTable& t, std::string_view source);

}  // namespace tandem::sim
