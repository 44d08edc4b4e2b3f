// From measured timings to the simulator's prices: the table `tandem calibrate` writes
// round-trips through save/load, and the cost model then charges the measured seconds for
// the measured shape and the fitted measured / model scale for other shapes of the op.
#include <gtest/gtest.h>

#include <filesystem>

#include "exec/calibrate/measure_op.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "kernels/cpu/threads.hpp"
#include "sim/cost_model.hpp"
#include "tools/calibration_table.hpp"
#include "topology/topology_io.hpp"

namespace tandem {
namespace {

TEST(CalibrationTable, MeasuredOpsArePricedWithTheirSeconds) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  const sim::OpDesc gemm{.op = "gemm",
                         .m = 64,
                         .n = 96,
                         .k = 128,
                         .flops = 2.0 * 64 * 96 * 128,
                         .bytes = 4.0 * (64 * 128 + 128 * 96 + 64 * 96)};
  const sim::OpDesc layer_norm{
      .op = "layer_norm", .m = 64, .n = 256, .flops = 8.0 * 64 * 256, .bytes = 4.0 * 2 * 64 * 256};
  const std::vector<calibrate::OpShape> shapes = {cli::op_shape_of(gemm),
                                                  cli::op_shape_of(layer_norm)};
  const auto timings = calibrate::measure_ops(device, shapes);
  ASSERT_EQ(timings.size(), 2u);  // sorted: gemm before layer_norm

  const auto table = cli::calibration_table_of(timings, "EPYC-Zen4-core", "test");
  const auto path = std::filesystem::path(::testing::TempDir()) / "tandem_calibration_table.json";
  sim::save_calibration(table, path);
  const auto loaded = sim::load_calibration(path);
  EXPECT_EQ(loaded, table);
  ASSERT_EQ(loaded.rows.size(), 2u);
  EXPECT_EQ(loaded.rows[0].op, "gemm");
  EXPECT_EQ(loaded.rows[0].k, 128);
  EXPECT_EQ(loaded.rows[0].flops, gemm.flops);
  EXPECT_EQ(loaded.rows[1].bytes, layer_norm.bytes);

  const Topology host = load_topology("cpu-host");
  const sim::CostModel calibrated(host.gpu, loaded), model(host.gpu);
  EXPECT_EQ(calibrated.seconds(gemm), timings[0].seconds);
  EXPECT_EQ(calibrated.seconds(layer_norm), timings[1].seconds);
  // Another gemm: the model's price times the one row's measured / modelled ratio.
  sim::OpDesc other = gemm;
  other.k = 512;
  other.flops = 2.0 * 64 * 96 * 512;
  other.bytes = 4.0 * (64 * 512 + 512 * 96 + 64 * 96);
  const double scale = timings[0].seconds / model.model_seconds(gemm);
  EXPECT_DOUBLE_EQ(calibrated.seconds(other), model.model_seconds(other) * scale);
}

TEST(CalibrationTable, IssuedOpsBecomeShapesFieldByField) {
  const std::vector<sim::IssuedOp> issued = {{{.op = "attention",
                                               .dtype = DType::bf16,
                                               .m = 2048,
                                               .n = 2048,
                                               .k = 128,
                                               .batch = 96,
                                               .flops = 1e12,
                                               .bytes = 3e9},
                                              0.5},
                                             {{.op = "fill", .m = 7, .bytes = 28}, 1e-6}};
  const auto shapes = cli::op_shapes_of(issued);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].op, "attention");
  EXPECT_EQ(shapes[0].dtype, DType::bf16);
  EXPECT_EQ(shapes[0].m, 2048);
  EXPECT_EQ(shapes[0].n, 2048);
  EXPECT_EQ(shapes[0].k, 128);
  EXPECT_EQ(shapes[0].batch, 96);
  EXPECT_EQ(shapes[0].flops, 1e12);
  EXPECT_EQ(shapes[0].bytes, 3e9);
  EXPECT_EQ(shapes[1].op, "fill");
  EXPECT_EQ(shapes[1].m, 7);
  EXPECT_EQ(shapes[1].batch, 1);
}

}  // namespace
}  // namespace tandem
