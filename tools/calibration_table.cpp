// OpDesc → OpShape and OpTiming → CalibrationRow; see calibration_table.hpp.
#include "tools/calibration_table.hpp"

namespace tandem::cli {

calibrate::OpShape op_shape_of(const sim::OpDesc& op) {
  return {.op = op.op,
          .dtype = op.dtype,
          .m = op.m,
          .n = op.n,
          .k = op.k,
          .batch = op.batch,
          .flops = op.flops,
          .bytes = op.bytes};
}

std::vector<calibrate::OpShape> op_shapes_of(std::span<const sim::IssuedOp> ops) {
  std::vector<calibrate::OpShape> out;
  out.reserve(ops.size());
  for (const auto& issued : ops) out.push_back(op_shape_of(issued.op));
  return out;
}

sim::CalibrationTable calibration_table_of(std::span<const calibrate::OpTiming> timings,
                                           std::string gpu, std::string source) {
  sim::CalibrationTable table{.gpu = std::move(gpu), .source = std::move(source), .rows = {}};
  table.rows.reserve(timings.size());
  for (const auto& t : timings)
    table.rows.push_back({.op = t.shape.op,
                          .dtype = t.shape.dtype,
                          .m = t.shape.m,
                          .n = t.shape.n,
                          .k = t.shape.k,
                          .batch = t.shape.batch,
                          .seconds = t.seconds,
                          .flops = t.shape.flops,
                          .bytes = t.shape.bytes});
  return table;
}

}  // namespace tandem::cli
