// The bridge between the simulator and the measuring library for `tandem calibrate`: the
// ops a simulation priced become exec's OpShapes (exec does not know sim), the measured
// OpTimings become a sim::CalibrationTable, one row per shape, and the per-op slices of a
// measured trace (`tandem train --trace FILE --trace-ops`) become OpTimings too.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "exec/calibrate/op_shape.hpp"
#include "sim/calibration.hpp"
#include "sim/sim_device.hpp"

namespace tandem::cli {

calibrate::OpShape op_shape_of(const sim::OpDesc& op);

// Every op every simulated rank issued, as shapes (repeats included).
std::vector<calibrate::OpShape> op_shapes_of(std::span<const sim::IssuedOp> ops);

// One row per timing, with its measured seconds (the median), its spread (min, max,
// repetitions) and the shape's flops and bytes.
sim::CalibrationTable calibration_table_of(std::span<const calibrate::OpTiming> timings,
                                           std::string gpu, std::string source);

// The slices of category "op" in a Chrome trace (train/op_tracing_device.hpp writes them:
// name = Device op, args {dtype, m, n, k, batch}), grouped by shape key and rank (pid) over
// the iterations: one timing per distinct key, sorted by key, from the rank whose median
// slice duration for it is the largest — a synchronous step runs at its slowest rank's
// pace, and ranks of one host differ in place (in a tp 2 run on a 2-core host, one rank's ops
// ran a quarter slower than the other's throughout) — whose seconds is that median, min/max that
// rank's extremes and repetitions its slice count. The first `skip_iterations` iterations of each
// rank (pid) are left out — the model's set-up and the cold first steps (first touch of every
// buffer) — an iteration starting at the rank's forward slice of microbatch 0, chunk 0; a shape
// issued only there (the set-up's parameter uploads) is timed from those slices rather than left
// out. Throws ConfigError (source = `source`) naming the event for a malformed op slice, when a
// rank has no more iterations than are skipped, and when no op slice is left (a run without
// --trace-ops).
std::vector<calibrate::OpTiming> op_timings_of_trace(const nlohmann::json& trace,
                                                     std::string_view source = "trace",
                                                     int skip_iterations = 0);

// Gives each timing the flops and bytes of the simulated shape with the same key (the
// cost model needs them to fit a per-op scale) and returns the distinct simulated shapes
// that no timing has: the ops the simulator will price from the model's scale instead.
std::vector<calibrate::OpShape> attach_simulated_work(
    std::vector<calibrate::OpTiming>& timings, std::span<const calibrate::OpShape> simulated);

}  // namespace tandem::cli
