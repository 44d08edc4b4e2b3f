// The bridge between the simulator and the measuring library for `tandem calibrate`: the
// ops a simulation priced become exec's OpShapes (exec does not know sim), and the
// measured OpTimings become a sim::CalibrationTable, one row per shape.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "exec/calibrate/op_shape.hpp"
#include "sim/calibration.hpp"
#include "sim/sim_device.hpp"

namespace tandem::cli {

calibrate::OpShape op_shape_of(const sim::OpDesc& op);

// Every op every simulated rank issued, as shapes (repeats included).
std::vector<calibrate::OpShape> op_shapes_of(std::span<const sim::IssuedOp> ops);

// One row per timing, with its measured seconds and the shape's flops and bytes.
sim::CalibrationTable calibration_table_of(std::span<const calibrate::OpTiming> timings,
                                           std::string gpu, std::string source);

}  // namespace tandem::cli
