// The host/device math added for the cuda binding, checked on the host (the CUDA kernels
// call these very functions): bf16 and fp16 rounding (nearest, ties to even, NaN and
// infinities kept; fp16's subnormals and overflow), the vocab-shard index, the cross-entropy logit
// gradient and the layer-norm rstd.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/math/bf16.hpp"
#include "kernels/math/fp16.hpp"
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

// IEEE half, worked by hand: 1 = 0x3c00, the largest finite 65504 = 0x7bff, the smallest
// subnormal 2^-24 = 0x0001, the smallest normal 2^-14 = 0x0400, 1/3 ≈ 0x3555.
TEST(Fp16, EncodesTheKnownPatterns) {
  EXPECT_EQ(fp16_from_float(1.0f), 0x3c00);
  EXPECT_EQ(fp16_from_float(-2.0f), 0xc000);
  EXPECT_EQ(fp16_from_float(65504.0f), 0x7bff);
  EXPECT_EQ(fp16_from_float(0x1p-24f), 0x0001);
  EXPECT_EQ(fp16_from_float(0x1p-14f), 0x0400);
  EXPECT_EQ(fp16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(fp16_from_float(-INFINITY), 0xfc00);
  EXPECT_EQ(fp16_from_float(NAN) & 0x7e00, 0x7e00);
  EXPECT_EQ(fp16_from_float(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(float_from_fp16(0x3555), 0.333251953125f);
  EXPECT_EQ(float_from_fp16(0x0001), 0x1p-24f);
  EXPECT_EQ(float_from_fp16(0x03ff), 1023 * 0x1p-24f);  // the largest subnormal
  EXPECT_TRUE(std::isnan(float_from_fp16(0x7e00)));
  EXPECT_EQ(float_from_fp16(0xfc00), -INFINITY);
}

TEST(Fp16, RoundsToNearestTiesToEvenAndOverflowsToInfinity) {
  EXPECT_EQ(round_to_fp16(1.0f + 0x1p-11f), 1.0f);                // tie: to even (1)
  EXPECT_EQ(round_to_fp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);  // tie: to even, up
  EXPECT_EQ(round_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 1.0f + 0x1p-10f);
  EXPECT_EQ(round_to_fp16(65519.0f), 65504.0f);  // below the halfway point to 65536
  EXPECT_EQ(round_to_fp16(65520.0f), INFINITY);  // the halfway point: to even, inf
  EXPECT_EQ(round_to_fp16(1e6f), INFINITY);
  EXPECT_EQ(round_to_fp16(0x1p-25f), 0.0f);                 // half the smallest subnormal: to 0
  EXPECT_EQ(round_to_fp16(0x1.8p-25f), 0x1p-24f);           // above half: up
  EXPECT_EQ(round_to_fp16(3 * 0x1p-25f), 2 * 0x1p-24f);     // 1.5 steps: tie to even (2)
  EXPECT_EQ(round_to_fp16(0x1p-14f - 0x1p-26f), 0x1p-14f);  // rounds up into the normals
  // Every pattern but the NaNs decodes and encodes back to itself.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) continue;
    ASSERT_EQ(fp16_from_float(float_from_fp16(b)), b) << std::hex << h;
  }
  // Relative error at most 2^-11 over the normal range.
  double worst = 0;
  for (float x = 0x1p-14f; x < 65504.0f; x *= 1.001f)
    worst = std::max(worst, std::fabs(static_cast<double>(round_to_fp16(x)) - x) / x);
  EXPECT_LE(worst, std::ldexp(1.0, -11));
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
