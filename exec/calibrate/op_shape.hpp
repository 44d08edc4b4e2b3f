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
  double seconds = 0;  // median over the repetitions, > 0
};

}  // namespace tandem::calibrate
