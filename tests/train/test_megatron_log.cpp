// The log lines match Megatron-LM's format character for character: the
// expected strings are written out by hand from Megatron's format strings.
#include <gtest/gtest.h>

#include "train/megatron_log.hpp"

namespace tandem {
namespace {

// 2026-11-22 04:05:06 local time, the timestamp both log lines are checked with.
std::time_t at_2026_11_22_04_05_06() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 22;
  tm.tm_hour = 4;
  tm.tm_min = 5;
  tm.tm_sec = 6;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

TEST(MegatronLog, IterationLine) {
  IterationLog l{.iteration = 12,
                 .train_iters = 500,
                 .consumed_samples = 384,
                 .elapsed_ms = 1234.56,
                 .tflops_per_gpu = 0.04,
                 .learning_rate = 1.5e-4,
                 .global_batch_size = 32,
                 .lm_loss = 7.123456789,
                 .loss_scale = 1.0,
                 .grad_norm = 2.71828,
                 .skipped_iterations = 0,
                 .nan_iterations = 0};
  const std::time_t t = at_2026_11_22_04_05_06();
  EXPECT_EQ(format_iteration_log(l, t),
            " [2026-11-22 04:05:06] iteration       12/     500 | consumed samples:          384 | "
            "elapsed time per iteration (ms): 1234.6 | throughput per GPU (TFLOP/s/GPU): 0.0 | "
            "learning rate: 1.500000E-04 | global batch size:    32 | lm loss: 7.123457E+00 | "
            "loss scale: 1.0 | grad norm: 2.718 | number of skipped iterations:   0 | number of "
            "nan iterations:   0 |");
}

// fp16's loss scaler: the scale in Megatron's one-decimal format, and on a skipped step no
// grad norm (Megatron's grad_norm is None then), the interval's skipped steps counted.
TEST(MegatronLog, SkippedStepHasNoGradNorm) {
  IterationLog l{.iteration = 3,
                 .train_iters = 10,
                 .global_batch_size = 8,
                 .lm_loss = 7.0,
                 .loss_scale = 2147483648.0,
                 .grad_norm = std::nullopt,
                 .skipped_iterations = 2};
  const std::string line = format_iteration_log(l, at_2026_11_22_04_05_06());
  EXPECT_NE(line.find("| lm loss: 7.000000E+00 | loss scale: 2147483648.0 | number of skipped "
                      "iterations:   2 | number of nan iterations:   0 |"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("grad norm"), std::string::npos);
}

TEST(MegatronLog, ValidationBlock) {
  const std::string block = format_validation_log(100, 2.0);
  const std::string line =
      " validation loss at iteration 100 | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 "
      "| ";
  const std::string rule(line.size() + 1, '-');
  EXPECT_EQ(block, rule + "\n" + line + "\n" + rule);
}

TEST(MegatronLog, PerplexityExponentCappedAt20) {
  EXPECT_NE(format_validation_log(1, 50.0).find("lm loss PPL: 4.851652E+08"), std::string::npos);
}

// The end-of-run line: said whatever the log interval, and free of what log parsers grep
// for in the iteration lines ("lm loss: ", "iteration N/"), so they count it as none.
TEST(MegatronLog, TrainingDoneLine) {
  const std::time_t t = at_2026_11_22_04_05_06();
  const std::string line = format_training_done({.iterations = 3,
                                                 .train_iters = 3,
                                                 .steps_run = 3,
                                                 .last_loss = 6.5,
                                                 .elapsed_seconds = 1.234},
                                                t);
  EXPECT_EQ(
      line,
      " [after training is done] datetime: 2026-11-22 04:05:06 | iterations: 3/3 | steps run: "
      "3 | last loss: 6.500000E+00 | elapsed time (s): 1.23 |");
  EXPECT_EQ(line.find("lm loss: "), std::string::npos);
  EXPECT_EQ(line.find("iteration "), std::string::npos);
  EXPECT_NE(format_training_done({.iterations = 5, .train_iters = 5}, t)
                .find("last loss: none (no step run)"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem
