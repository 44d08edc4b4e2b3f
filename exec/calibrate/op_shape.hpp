// What `tandem calibrate` measures: one Device op at one shape, named as the sim binding
// names it (sim/cost_model.hpp's OpDesc, of which this is exec's copy: exec does not depend
// on sim), and the seconds it took. The shape fields mean what they mean in OpDesc:
//
//   gemm                      C(m, n) = A(m, k) · B(k, n), `batch` products
//   attention, …_backward     batch = B · heads, m = T (sequence), k = head_dim
//   flash_attention, …_backward  batch = B · query heads, m = Tq, n = Tk, k = head_dim
//   rope                      m = T·B rows, n = rotated features per row, k = rotary_dim
//   upload, download, scale, fill, copy, sum_squares, adam, cross_entropy_loss
//                             m = elements of the whole buffer (n = 0)
//   every other op            m = rows, n = columns (the last dimension)
//
// flops and bytes are carried through untouched (the table keeps them so the cost model
// can fit its per-op scale); they play no part in the measurement.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/tensor.hpp"

namespace tandem::calibrate {

struct OpShape {
  std::string op;  // a Device method name: "gemm", "layer_norm", …
  DType dtype = DType::fp32;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
  double flops = 0;  // as the sim binding counted them
  double bytes = 0;

  // The identity of a shape: everything but flops and bytes (a calibration row's key).
  auto key() const { return std::tie(op, dtype, m, n, k, batch); }
};

struct OpTiming {
  OpShape shape;
  double seconds = 0;      // median over the repetitions, > 0
  double min_seconds = 0;  // the fastest and the slowest repetition: the spread
  double max_seconds = 0;
  std::int64_t repetitions = 0;  // timed runs (or traced slices) the median is of

  // How far the median sits above the fastest run: median / min − 1. A lone interrupt
  // moves the max, not this; load that slows most runs (what makes a median irreproducible)
  // does. 0.1: the median is 10% slower than the best run.
  double excess() const { return min_seconds > 0 ? seconds / min_seconds - 1 : 0; }
};

// The median (the upper one of an even count), min and max of `samples` (seconds, not
// empty), as an OpTiming of `shape`. A median below a clock tick is raised to 1 ns.
OpTiming timing_of(const OpShape& shape, std::vector<double> samples);

}  // namespace tandem::calibrate
