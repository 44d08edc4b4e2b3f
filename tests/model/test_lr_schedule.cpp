// Megatron's learning-rate schedule and clipping coefficient, values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "model/optimizer.hpp"

namespace tandem {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  const LrSchedule s{1e-3, 1e-4, 10, 110, "cosine"};
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1e-3);
  // Halfway through the decay: cos(π/2) = 0 → midpoint between max and min.
  EXPECT_NEAR(learning_rate(s, 60), 5.5e-4, 1e-15);
  EXPECT_NEAR(learning_rate(s, 110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(s, 500), 1e-4);
}

TEST(LrSchedule, LinearAndConstant) {
  const LrSchedule lin{1.0, 0.0, 0, 100, "linear"};
  EXPECT_DOUBLE_EQ(learning_rate(lin, 0), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(lin, 25), 0.75);
  const LrSchedule con{2.0, 0.0, 4, 100, "constant"};
  EXPECT_DOUBLE_EQ(learning_rate(con, 2), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(con, 50), 2.0);
  EXPECT_THROW(learning_rate({1, 0, 0, 10, "exponential"}, 3), std::invalid_argument);
}

TEST(ClipCoefficient, MegatronsFormula) {
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_coefficient(100.0, 0.0), 1.0f);  // clipping off
}

}  // namespace
}  // namespace tandem
