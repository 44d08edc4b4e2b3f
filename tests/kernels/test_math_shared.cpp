// The host/device math added for the cuda binding, checked on the host (the CUDA kernels
// call these very functions): bf16 rounding (nearest, ties to even, NaN and infinities
// kept), the vocab-shard index, the cross-entropy logit gradient and the layer-norm rstd.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/math/bf16.hpp"
#include "kernels/math/layer_norm.hpp"
#include "kernels/math/softmax.hpp"
#include "kernels/math/vocab.hpp"

namespace tandem::kernels::math {
namespace {

TEST(Bf16, RepresentableValuesRoundTripExactly) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 1.5f, 3.0f, 65536.0f, -1.0f / 128.0f}) {
    EXPECT_EQ(float_from_bf16(bf16_from_float(x)), x) << x;
    EXPECT_EQ(std::signbit(round_to_bf16(x)), std::signbit(x)) << x;
  }
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_from_float(-2.0f), 0xc000);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just above the halfway point rounds up.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  // Relative error at most the unit roundoff 2^-8 (8 significant bits) over a sweep.
  double worst = 0;
  for (float x = 1e-30f; x < 1e30f; x *= 1.001f) {
    worst = std::max(worst, std::fabs(static_cast<double>(round_to_bf16(x)) - x) / x);
  }
  EXPECT_LE(worst, std::ldexp(1.0, -8));
  EXPECT_GT(worst, std::ldexp(1.0, -9));  // and bf16 really has only 8 significant bits
}

TEST(Bf16, KeepsNanAndInfinitiesAndOverflowsToInfinity) {
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
  EXPECT_TRUE(std::isnan(round_to_bf16(-NAN)));
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  EXPECT_TRUE(std::isnan(round_to_bf16(std::bit_cast<float>(0x7f800001u))));
  EXPECT_EQ(round_to_bf16(INFINITY), INFINITY);
  EXPECT_EQ(round_to_bf16(-INFINITY), -INFINITY);
  EXPECT_EQ(round_to_bf16(FLT_MAX), INFINITY);
  EXPECT_EQ(round_to_bf16(-FLT_MAX), -INFINITY);
}

TEST(Vocab, LocalIndexOfTheShardOrMinusOne) {
  EXPECT_EQ(vocab_local_index(30000, 25152, 25152), 4848);
  EXPECT_EQ(vocab_local_index(7, 25152, 25152), -1);
  EXPECT_EQ(vocab_local_index(25152, 25152, 25152), 0);
  EXPECT_EQ(vocab_local_index(50303, 25152, 25152), 25151);
  EXPECT_EQ(vocab_local_index(50304, 25152, 25152), -1);
  EXPECT_EQ(vocab_local_index(-1, 0, 10), -1);
}

TEST(CrossEntropyMath, LogitGradientIsSoftmaxTimesLossGradient) {
  const float xs[] = {1.0f, -2.0f, 3.5f, 0.25f};
  double sum = 0;
  float max = -FLT_MAX;
  for (float x : xs) max = std::max(max, x);
  for (float x : xs) sum += std::exp(static_cast<double>(x - max));
  const float dloss = 0.75f;
  double total = 0;
  for (float x : xs) {
    const float g = cross_entropy_logit_grad(x, max, dloss / static_cast<float>(sum));
    const double want = std::exp(static_cast<double>(x) - max) / sum * dloss;
    EXPECT_NEAR(g, want, 1e-6 * dloss);
    total += g;
  }
  EXPECT_NEAR(total, dloss, 1e-6);  // softmax sums to one
}

TEST(LayerNormMath, RstdFromSquaredDeviations) {
  EXPECT_FLOAT_EQ(layer_norm_rstd(16.0f, 4, 0.0f), 0.5f);  // variance 4
  EXPECT_FLOAT_EQ(layer_norm_rstd(0.0f, 8, 0.25f), 2.0f);  // constant row: 1/sqrt(ε)
  const float row[] = {1.0f, 2.0f, 3.0f, 6.0f};
  const RowStats s = layer_norm_row_stats(row, 4, 1e-5f);
  EXPECT_FLOAT_EQ(s.mean, 3.0f);
  EXPECT_FLOAT_EQ(s.rstd, layer_norm_rstd(14.0f, 4, 1e-5f));
}

}  // namespace
}  // namespace tandem::kernels::math
