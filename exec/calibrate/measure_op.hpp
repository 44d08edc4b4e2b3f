// Timing Device ops on a real binding: an op at a shape is built once (op_case.hpp), run a
// few times untimed (first-touch page faults, cold caches, lazy library setup), then run
// `repetitions` times, each waited for (Stream::synchronize, so an asynchronous binding is
// timed to completion), and the median wall time is its price. Many shapes are measured
// round-robin — repetition 1 of every shape, then repetition 2, … — so a burst of load from
// another process spoils one repetition of many shapes, which the medians drop, instead of
// every repetition of a few. The threads the cpu kernels use are the caller's to set
// (kernels/cpu/threads.hpp), as `tandem train` does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/device.hpp"
#include "exec/calibrate/op_case.hpp"
#include "exec/calibrate/op_shape.hpp"

namespace tandem::calibrate {

struct MeasureOptions {
  int warmup = 2;        // untimed runs first (≥ 0)
  int repetitions = 11;  // timed runs at least; the median is the result (≥ 1)
  // More timed runs until a shape's runs add up to this many seconds (a short op's median
  // over 11 runs of a few µs each still moves with every interrupt), up to max_repetitions.
  double min_time_seconds = 0;
  int max_repetitions = 1000;
  // Host bytes written before each timed run, to push the op's tensors out of the caches
  // that size covers (0: the op runs on the data its previous run left in cache). In a
  // training step an op's weights and activations come from further away than a loop over
  // one op leaves them.
  std::int64_t evict_bytes = 0;
  // Flush the case's tensors out of every cache level before each timed run, so that every
  // run reads its data from memory. Without it a memory-bound case's runs are as warm as
  // what ran before them: cases that reached min_time_seconds stop running, the rounds
  // shrink, and a 7 MB adam ran 158 µs in the first rounds and 126 µs in the last (its
  // median moved 12% between two calibrations). Only for tensors in host memory (the cpu
  // binding); a flush costs about what reading the data once does.
  bool flush_host_caches = false;
  // Back-to-back runs of the op in one timed sample, waited for once; the sample is their
  // mean (≥ 1). On a GPU each run waited for alone also pays the host's launch-and-wait
  // round trip (8-10 µs on the H100 measured 2026-11-26, more than a small kernel takes),
  // which a step does not: its host runs ahead and the stream sees back-to-back kernels.
  // The cpu binding's ops run synchronously, so 1 loses nothing there.
  int runs_per_sample = 1;
  OpCaseOptions op_case;
  // measure_ops keeps shapes whose tensors total up to this many bytes alive at once and
  // goes round-robin over them (at least one shape at a time).
  std::int64_t round_robin_bytes = std::int64_t{256} << 20;
};

// The timed runs of each case, measured round-robin: `repetitions` rounds over all cases,
// then further rounds over the cases whose runs add up to less than min_time_seconds.
// Throws std::invalid_argument for options out of range.
std::vector<std::vector<double>> measure_samples(Device& device, std::span<OpCase> cases,
                                                 const MeasureOptions& options);

// The median seconds of one run of each case (measure_samples).
std::vector<double> measure_seconds(Device& device, std::span<OpCase> cases,
                                    const MeasureOptions& options);

// Builds `shape` on `device` and measures it: median, min, max and repetitions. Throws
// std::invalid_argument for a shape make_op_case rejects or options out of range.
OpTiming measure_op(Device& device, const OpShape& shape, const MeasureOptions& options = {});

// Each distinct shape once (distinct_shapes), in that order, round-robin in groups of
// round_robin_bytes; `progress(done, total)` after each group.
std::vector<OpTiming> measure_ops(
    Device& device, std::span<const OpShape> shapes, const MeasureOptions& options = {},
    const std::function<void(std::size_t, std::size_t)>& progress = {});

// The shapes with distinct key() (op, dtype, m, n, k, batch), first occurrence kept, sorted
// by key.
std::vector<OpShape> distinct_shapes(std::span<const OpShape> shapes);

}  // namespace tandem::calibrate
