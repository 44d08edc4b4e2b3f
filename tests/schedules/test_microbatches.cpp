// Tests of the microbatch calculator (schedules/microbatches.hpp): the constant case, the
// batch-size ramp-up at consumed-sample counts worked out by hand from Megatron's formula
// batch = start + increment · int(consumed / (samples / increments)), and every rejection.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "schedules/microbatches.hpp"

namespace tandem {
namespace {

TEST(MicrobatchConstant, GlobalOverMicroTimesDp) {
  MicrobatchCalculator c(64, 2, 4);
  EXPECT_EQ(c.num_microbatches(), 8);
  EXPECT_EQ(c.current_global_batch_size(), 64);
  EXPECT_EQ(c.micro_batch_size(), 2);
  c.update(1'000'000);  // a constant batch never changes
  EXPECT_EQ(c.num_microbatches(), 8);
  EXPECT_EQ(c.current_global_batch_size(), 64);
  EXPECT_EQ(MicrobatchCalculator(8, 8, 1).num_microbatches(), 1);
}

struct Point {
  std::int64_t consumed, batch, microbatches;
};

void expect_ramp(MicrobatchCalculator& c, const std::vector<Point>& points) {
  for (const Point& p : points) {
    c.update(p.consumed);
    EXPECT_EQ(c.current_global_batch_size(), p.batch) << "consumed " << p.consumed;
    EXPECT_EQ(c.num_microbatches(), p.microbatches) << "consumed " << p.consumed;
  }
}

TEST(MicrobatchRampup, HeaderExample) {
  // start 16, increment 16, samples 1000, global 64, micro 1, dp 4: 3 increments of 333.3
  // samples; batch = 16 + 16 · int(consumed / 333.3) while consumed <= 1000.
  MicrobatchCalculator c(64, 1, 4, RampupBatchSize{.start = 16, .increment = 16, .samples = 1000});
  EXPECT_EQ(c.current_global_batch_size(), 16);  // the constructor applies consumed = 0
  EXPECT_EQ(c.num_microbatches(), 4);
  expect_ramp(c, {{0, 16, 4},
                  {333, 16, 4},  // 333 / 333.3 = 0.999
                  {334, 32, 8},
                  {400, 32, 8},
                  {666, 32, 8},  // 1.998
                  {667, 48, 12},
                  {700, 48, 12},
                  {999, 48, 12},
                  {1000, 64, 16},  // 1000 / (1000 / 3) is exactly 3.0 in doubles
                  {1001, 64, 16},
                  {50'000, 64, 16}});
}

TEST(MicrobatchRampup, MicroTwoDpTwo) {
  // start 8, increment 4, samples 100, global 20: 3 increments of 33.3 samples; m = batch / 4.
  MicrobatchCalculator c(20, 2, 2, RampupBatchSize{.start = 8, .increment = 4, .samples = 100});
  expect_ramp(c, {{0, 8, 2},
                  {33, 8, 2},
                  {34, 12, 3},
                  {66, 12, 3},
                  {67, 16, 4},
                  {99, 16, 4},
                  {100, 20, 5},
                  {101, 20, 5},
                  {10, 8, 2}});  // going back recomputes
}

TEST(MicrobatchRampup, OneIncrement) {
  // start 4, increment 4, samples 10, global 8, micro 1, dp 1: a single step at 10 samples.
  MicrobatchCalculator c(8, 1, 1, RampupBatchSize{.start = 4, .increment = 4, .samples = 10});
  expect_ramp(c, {{0, 4, 4}, {9, 4, 4}, {10, 8, 8}, {11, 8, 8}});
}

// The violations of the ConfigError the constructor throws.
std::vector<Violation> violations_of(std::int64_t global, std::int64_t micro, int dp,
                                     std::optional<RampupBatchSize> rampup = {}) {
  try {
    MicrobatchCalculator c(global, micro, dp, rampup);
  } catch (const ConfigError& e) {
    return e.violations();
  }
  ADD_FAILURE() << "no ConfigError";
  return {};
}

void expect_violation(const Violation& v, const std::string& field, const std::string& value,
                      const std::string& rule_part) {
  EXPECT_EQ(v.field, field);
  EXPECT_EQ(v.value, value);
  EXPECT_NE(v.rule.find(rule_part), std::string::npos) << v.rule;
}

TEST(MicrobatchValidation, GlobalNotDivisibleByMicroTimesDp) {
  const auto v = violations_of(30, 4, 2);
  ASSERT_EQ(v.size(), 1U);
  expect_violation(v[0], "global_batch_size", "30",
                   "(30) must be divisible by micro_batch_size (4) x data_parallel_size (2) = 8");
}

TEST(MicrobatchValidation, NonPositiveSizes) {
  const auto v = violations_of(0, 0, 0);
  ASSERT_EQ(v.size(), 3U);
  expect_violation(v[0], "global_batch_size", "0", "at least 1");
  expect_violation(v[1], "micro_batch_size", "0", "at least 1");
  expect_violation(v[2], "data_parallel_size", "0", "at least 1");
}

TEST(MicrobatchValidation, RampupStartAndGlobalNotDivisible) {
  // micro 1 · dp 4 = 4; batches 2, 6, 10, 14: start and global fail.
  const auto v = violations_of(14, 1, 4, RampupBatchSize{.start = 2, .increment = 4, .samples = 9});
  ASSERT_EQ(v.size(), 2U);
  expect_violation(v[0], "global_batch_size", "14", "= 4");
  expect_violation(v[1], "rampup_batch_size", "2 4 9", "start (2) must be divisible by");
}

TEST(MicrobatchValidation, RampupIncrementNotDivisible) {
  // micro 2 · dp 2 = 4; batches 4, 6, 8: the increment 2 reaches 6.
  const auto v = violations_of(8, 2, 2, RampupBatchSize{.start = 4, .increment = 2, .samples = 9});
  ASSERT_EQ(v.size(), 1U);
  expect_violation(v[0], "rampup_batch_size", "4 2 9",
                   "increment (2) must be divisible by micro_batch_size (2) x data_parallel_size "
                   "(2) = 4");
}

TEST(MicrobatchValidation, RampupIntervalNotDivisibleByIncrement) {
  const auto v =
      violations_of(64, 1, 1, RampupBatchSize{.start = 16, .increment = 10, .samples = 100});
  ASSERT_EQ(v.size(), 1U);
  expect_violation(v[0], "rampup_batch_size", "16 10 100",
                   "global_batch_size - start (48) must be divisible by increment (10)");
}

TEST(MicrobatchValidation, RampupShape) {
  // start == global leaves no increment (a division by zero in Megatron).
  auto v = violations_of(64, 1, 1, RampupBatchSize{.start = 64, .increment = 16, .samples = 100});
  ASSERT_EQ(v.size(), 1U);
  expect_violation(v[0], "rampup_batch_size", "64 16 100", "start (64) must be below");
  v = violations_of(64, 1, 1, RampupBatchSize{.start = 16, .increment = 16, .samples = 0});
  ASSERT_EQ(v.size(), 1U);
  expect_violation(v[0], "rampup_batch_size", "16 16 0", "at least 1");
  v = violations_of(64, 1, 1, RampupBatchSize{.start = 16, .increment = 0, .samples = 10});
  ASSERT_EQ(v.size(), 1U);
  expect_violation(v[0], "rampup_batch_size", "16 0 10", "at least 1");
}

TEST(MicrobatchValidation, NegativeConsumedSamples) {
  MicrobatchCalculator c(8, 1, 1);
  EXPECT_THROW(c.update(-1), std::invalid_argument);
}

}  // namespace
}  // namespace tandem
