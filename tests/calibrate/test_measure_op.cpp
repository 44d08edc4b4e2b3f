// The measuring library of `tandem calibrate` on the cpu binding: an op case builds the
// tensors its shape names and really runs the op (a gemm's product is checked against a
// product computed here), measured times are positive and grow with the work, shapes
// dedupe by their key, and bad shapes are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "exec/calibrate/measure_op.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "kernels/cpu/threads.hpp"

namespace tandem::calibrate {
namespace {

// A gemm case's output (m, n) is the product of its inputs (m, k) · (k, n), summed in double.
void expect_product(const std::vector<Tensor>& t, int m, int n, int k, double tolerance) {
  const float *a = t[0].data<float>(), *b = t[1].data<float>(), *out = t[2].data<float>();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int p = 0; p < k; ++p) want += static_cast<double>(a[i * k + p]) * b[p * n + j];
      EXPECT_NEAR(out[i * n + j], want, tolerance) << i << "," << j;
    }
}

TEST(OpCase, GemmRunsTheProductOfItsShapes) {
  CpuDevice device;
  OpCase c = make_op_case(device, {.op = "gemm", .m = 3, .n = 5, .k = 7});
  const auto& t = c.tensors();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].shape, (Shape{3, 7}));
  EXPECT_EQ(t[1].shape, (Shape{7, 5}));
  EXPECT_EQ(t[2].shape, (Shape{3, 5}));
  c.run(device.default_stream());
  expect_product(t, 3, 5, 7, 1e-5);
}

TEST(OpCase, AttentionLaysOutBatchTimesHeads) {
  CpuDevice device;
  // batch = B · heads = 6, T = 16, head_dim = 8: qkv (T, 1, 3, 6, 8), probs (1, 6, T, T).
  OpCase c = make_op_case(device, {.op = "attention", .m = 16, .n = 16, .k = 8, .batch = 6});
  EXPECT_EQ(c.tensors()[0].shape, (Shape{16, 1, 3, 6, 8}));
  EXPECT_EQ(c.tensors()[2].shape, (Shape{1, 6, 16, 16}));
  c.run(device.default_stream());
  // Row 0 of each causal softmax attends to position 0 alone: probability 1.
  const float* probs = c.tensors()[2].data<float>();
  for (int h = 0; h < 6; ++h) EXPECT_FLOAT_EQ(probs[h * 16 * 16], 1.0f) << h;
}

TEST(OpCase, EveryDeviceOpRunsOnTheCpuBinding) {
  CpuDevice device;
  for (const auto& op : measurable_ops()) {
    OpShape s{.op = op, .m = 8, .n = 16};
    if (op == "gemm" || op == "fp8_gemm") s.k = 4;
    if (op == "attention" || op == "attention_backward")
      s = {.op = op, .m = 8, .n = 8, .k = 4, .batch = 2};
    if (op == "flash_attention" || op == "flash_attention_backward")
      s = {.op = op, .m = 8, .n = 8, .k = 4, .batch = 2};
    if (op == "rope") s.k = 4;
    const OpTiming t =
        measure_op(device, s, {.warmup = 1, .repetitions = 3, .op_case = {.vocab_rows = 32}});
    EXPECT_GT(t.seconds, 0) << op;
    EXPECT_LT(t.seconds, 0.5) << op;  // tiny shapes: microseconds
  }
}

TEST(MeasureOp, GemmSecondsArePositiveAndGrowWithK) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  const MeasureOptions o{.warmup = 2, .repetitions = 9, .op_case = {}};
  const double small = measure_op(device, {.op = "gemm", .m = 128, .n = 128, .k = 32}, o).seconds;
  const double large = measure_op(device, {.op = "gemm", .m = 128, .n = 128, .k = 2048}, o).seconds;
  EXPECT_GT(small, 0);
  // 64× the multiply-adds; even a busy machine keeps the median well above 8×.
  EXPECT_GT(large, 8 * small) << "k=32: " << small << " s, k=2048: " << large << " s";
}

TEST(MeasureOp, DistinctShapesKeyOnEverythingButFlopsAndBytes) {
  const std::vector<OpShape> shapes = {
      {.op = "gemm", .m = 4, .n = 4, .k = 8, .flops = 256},
      {.op = "add", .m = 2, .n = 3},
      {.op = "gemm", .m = 4, .n = 4, .k = 8, .flops = 999},  // same key as the first
      {.op = "gemm", .m = 4, .n = 4, .k = 16},
      {.op = "gemm", .dtype = DType::bf16, .m = 4, .n = 4, .k = 8},
  };
  const auto d = distinct_shapes(shapes);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].op, "add");
  EXPECT_EQ(d[1].op, "gemm");
  EXPECT_EQ(d[1].flops, 256);  // the first occurrence is kept
  EXPECT_EQ(d[2].k, 16);
  EXPECT_EQ(d[3].dtype, DType::bf16);
}

TEST(MeasureOp, OneTimingPerDistinctShapeWhateverTheRoundRobinGroups) {
  CpuDevice device;
  const std::vector<OpShape> shapes = {{.op = "gelu", .m = 64, .n = 64},
                                       {.op = "add", .m = 8, .n = 8},
                                       {.op = "gelu", .m = 64, .n = 64},
                                       {.op = "gemm", .m = 16, .n = 16, .k = 16}};
  for (const std::int64_t group_bytes : {std::int64_t{1}, std::int64_t{1} << 30}) {
    std::vector<std::size_t> done;
    const auto t = measure_ops(device, shapes, {.repetitions = 3, .round_robin_bytes = group_bytes},
                               [&](std::size_t d, std::size_t total) {
                                 EXPECT_EQ(total, 3u);
                                 done.push_back(d);
                               });
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t[0].shape.op, "add");
    EXPECT_EQ(t[1].shape.op, "gelu");
    EXPECT_EQ(t[2].shape.op, "gemm");
    for (const auto& x : t) EXPECT_GT(x.seconds, 0) << x.shape.op;
    // One shape per group when each group's budget is a byte; all three at once otherwise.
    EXPECT_EQ(done, group_bytes == 1 ? (std::vector<std::size_t>{1, 2, 3})
                                     : (std::vector<std::size_t>{3}));
  }
}

TEST(MeasureOp, BadShapesAndOptionsAreRefused) {
  CpuDevice device;
  EXPECT_THROW(make_op_case(device, {.op = "gemmm", .m = 1, .n = 1, .k = 1}),
               std::invalid_argument);
  EXPECT_THROW(make_op_case(device, {.op = "gemm", .m = 4, .n = 4, .k = 0}), std::invalid_argument);
  EXPECT_THROW(make_op_case(device, {.op = "add", .m = 4, .n = -1}), std::invalid_argument);
  EXPECT_THROW(make_op_case(device, {.op = "scale", .m = 0}), std::invalid_argument);
  EXPECT_THROW(
      measure_op(device, {.op = "scale", .m = 4}, {.warmup = 0, .repetitions = 0, .op_case = {}}),
      std::invalid_argument);
  EXPECT_THROW(measure_op(device, {.op = "scale", .m = 4}, {.evict_bytes = -1}),
               std::invalid_argument);
}

TEST(Timing, MedianMinMaxAndCountOfTheSamples) {
  // Hand-picked samples: sorted 1, 2, 3, 10, 40 → median 3, min 1, max 40; the median
  // is 3 / 1 − 1 = 200% above the fastest run.
  const OpTiming t = timing_of({.op = "add", .m = 8}, {10, 1, 40, 3, 2});
  EXPECT_EQ(t.seconds, 3);
  EXPECT_EQ(t.min_seconds, 1);
  EXPECT_EQ(t.max_seconds, 40);
  EXPECT_EQ(t.repetitions, 5);
  EXPECT_DOUBLE_EQ(t.excess(), 2);
  // An even count takes the upper median; a zero time is raised to one clock tick.
  EXPECT_EQ(timing_of({.op = "add"}, {4, 1, 3, 2}).seconds, 3);
  EXPECT_EQ(timing_of({.op = "add"}, {0}).seconds, 1e-9);
  EXPECT_THROW(timing_of({.op = "add"}, {}), std::invalid_argument);
}

TEST(MeasureOp, KeepsTheSpreadAndTheRepetitions) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  MeasureOptions o;
  o.warmup = 1;
  o.repetitions = 9;
  const OpTiming t = measure_op(device, {.op = "gemm", .m = 64, .n = 64, .k = 64}, o);
  EXPECT_EQ(t.repetitions, 9);
  EXPECT_GT(t.min_seconds, 0);
  EXPECT_LE(t.min_seconds, t.seconds);
  EXPECT_LE(t.seconds, t.max_seconds);
}

TEST(MeasureOp, MinTimeRunsShortOpsMoreOften) {
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  MeasureOptions o;
  o.warmup = 0;
  o.repetitions = 3;
  o.max_repetitions = 200;
  // A 16-element add takes well under 50 µs, so 5 ms of runs needs more than 100 of them;
  // the cap stops it at 200. Without min_time it runs exactly `repetitions` times.
  o.min_time_seconds = 0.005;
  const OpTiming capped = measure_op(device, {.op = "add", .m = 16}, o);
  EXPECT_GT(capped.repetitions, 100);
  EXPECT_LE(capped.repetitions, 200);
  o.min_time_seconds = 0;
  EXPECT_EQ(measure_op(device, {.op = "add", .m = 16}, o).repetitions, 3);
  o.max_repetitions = 2;  // fewer than repetitions
  EXPECT_THROW(measure_op(device, {.op = "add", .m = 16}, o), std::invalid_argument);
}

TEST(MeasureOp, ASampleIsTheMeanOfItsBackToBackRuns) {
  // An op that counts its runs, takes at least 3 ms each and records how long each really
  // took: with 4 runs per sample, 3 samples issue it 12 times (after the warm-up), and each
  // sample is one run's time, not four's. Judged against the runs' own recorded times, so
  // that a busy machine stretching the runs cannot fail it.
  CpuDevice device;
  std::vector<double> took;
  std::vector<OpCase> cases;
  cases.emplace_back(device, std::vector<Tensor>{}, [&](Device&, Stream&, std::vector<Tensor>&) {
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + std::chrono::milliseconds(3);
    while (std::chrono::steady_clock::now() < until) {
    }
    took.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
  MeasureOptions o;
  o.warmup = 1;
  o.repetitions = 3;
  o.runs_per_sample = 4;
  const auto samples = measure_samples(device, cases, o);
  ASSERT_EQ(took.size(), 1u + 3 * 4);
  ASSERT_EQ(samples.size(), 1u);
  ASSERT_EQ(samples[0].size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    double sum = 0, shortest = 1e9;
    for (std::size_t r = 0; r < 4; ++r) {
      sum += took[1 + 4 * k + r];
      shortest = std::min(shortest, took[1 + 4 * k + r]);
    }
    const double t = samples[0][k];
    EXPECT_GE(t, 0.003);
    EXPECT_GE(t, 0.999 * shortest);  // at least the mean of its runs, which is ≥ the shortest
    EXPECT_LT(t, 0.5 * sum) << "a sample of 4 runs reads as their sum, not their mean";
  }
  o.runs_per_sample = 0;
  EXPECT_THROW(measure_samples(device, cases, o), std::invalid_argument);
}

TEST(MeasureOp, FlushingTheCachesKeepsWhatTheOpWrote) {
  // A flush writes dirty lines back before it drops them: the product a gemm left in its
  // output must still be there, and be the product, after runs measured with flushes.
  CpuDevice device;
  kernels::cpu::set_num_threads(1);
  std::vector<OpCase> cases;
  cases.push_back(make_op_case(device, {.op = "gemm", .m = 33, .n = 17, .k = 65}));
  MeasureOptions o;
  o.warmup = 1;
  o.repetitions = 5;
  o.flush_host_caches = true;
  const auto samples = measure_samples(device, cases, o);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].size(), 5u);
  expect_product(cases[0].tensors(), 33, 17, 65, 1e-4);
}

}  // namespace
}  // namespace tandem::calibrate
