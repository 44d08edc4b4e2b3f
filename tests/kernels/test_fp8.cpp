// FP8 numerics (kernels/math/fp8.hpp) on values worked out by hand: exact codes, ties to
// even in the normal and subnormal ranges, the carry from the largest subnormal into the
// smallest normal, saturation, NaN and inf; every code round-trips; random values encode to
// the nearest entry of the format's table (found by brute force); the recipes' scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu/fp8.hpp"
#include "kernels/math/fp8.hpp"

namespace tandem::kernels::math {
namespace {

constexpr auto e4m3 = Fp8Format::e4m3;
constexpr auto e5m2 = Fp8Format::e5m2;

TEST(Fp8, E4m3ExactValues) {
  EXPECT_EQ(fp8_encode(1.0f, e4m3), 0x38);  // 0 0111 000
  EXPECT_EQ(fp8_encode(0.5f, e4m3), 0x30);
  EXPECT_EQ(fp8_encode(-2.0f, e4m3), 0xc0);
  EXPECT_EQ(fp8_encode(1.25f, e4m3), 0x3a);
  EXPECT_EQ(fp8_encode(448.0f, e4m3), 0x7e);                // 0 1111 110: the largest finite
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -6), e4m3), 0x08);  // smallest normal
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -9), e4m3), 0x01);  // smallest subnormal
  EXPECT_EQ(fp8_encode(0.0f, e4m3), 0x00);
  EXPECT_EQ(fp8_encode(-0.0f, e4m3), 0x80);
  EXPECT_EQ(fp8_decode(0x7e, e4m3), 448.0f);
  EXPECT_EQ(fp8_decode(0x01, e4m3), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_decode(0x07, e4m3), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_decode(0xb8, e4m3), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7f, e4m3)));
  EXPECT_TRUE(std::isnan(fp8_decode(0xff, e4m3)));
}

TEST(Fp8, E4m3TiesToEven) {
  EXPECT_EQ(fp8_encode(1.0625f, e4m3), 0x38);  // 1 + 1/16: between 1.000 and 1.125 → 1.000
  EXPECT_EQ(fp8_encode(1.1875f, e4m3), 0x3a);  // 1 + 3/16: between 1.125 and 1.25 → 1.25
  EXPECT_EQ(fp8_encode(1.07f, e4m3), 0x39);    // just above the tie
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -10), e4m3), 0x00);   // 0.5 of the least code
  EXPECT_EQ(fp8_encode(std::ldexp(1.5f, -10), e4m3), 0x01);   // 0.75
  EXPECT_EQ(fp8_encode(std::ldexp(3.0f, -10), e4m3), 0x02);   // 1.5 → 2 (even)
  EXPECT_EQ(fp8_encode(std::ldexp(5.0f, -10), e4m3), 0x02);   // 2.5 → 2 (even)
  EXPECT_EQ(fp8_encode(std::ldexp(15.0f, -10), e4m3), 0x08);  // 7.5 sub → smallest normal
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -11), e4m3), 0x00);   // a quarter of it
}

TEST(Fp8, E4m3Saturates) {
  EXPECT_EQ(fp8_encode(464.0f, e4m3), 0x7e);  // the tie with 480 (not a value) goes to 448
  EXPECT_EQ(fp8_encode(470.0f, e4m3), 0x7e);
  EXPECT_EQ(fp8_encode(1e9f, e4m3), 0x7e);
  EXPECT_EQ(fp8_encode(-1e9f, e4m3), 0xfe);
  EXPECT_EQ(fp8_encode(std::numeric_limits<float>::infinity(), e4m3), 0x7e);
  EXPECT_EQ(fp8_encode(-std::numeric_limits<float>::infinity(), e4m3), 0xfe);
  EXPECT_EQ(fp8_encode(std::numeric_limits<float>::quiet_NaN(), e4m3) & 0x7f, 0x7f);
}

TEST(Fp8, E5m2ExactValuesAndSaturation) {
  EXPECT_EQ(fp8_encode(1.0f, e5m2), 0x3c);  // 0 01111 00
  EXPECT_EQ(fp8_encode(57344.0f, e5m2), 0x7b);
  EXPECT_EQ(fp8_encode(61440.0f, e5m2), 0x7b);  // the tie with 65536 (inf) saturates
  EXPECT_EQ(fp8_encode(1e9f, e5m2), 0x7b);
  EXPECT_EQ(fp8_encode(std::numeric_limits<float>::infinity(), e5m2), 0x7b);
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -16), e5m2), 0x01);
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -14), e5m2), 0x04);
  EXPECT_EQ(fp8_encode(1.125f, e5m2), 0x3c);  // between 1.00 and 1.25 → 1.00
  EXPECT_EQ(fp8_encode(1.375f, e5m2), 0x3e);  // between 1.25 and 1.5 → 1.5
  EXPECT_EQ(fp8_decode(0x7c, e5m2), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_decode(0xfc, e5m2), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp8_decode(0x7d, e5m2)));
  EXPECT_EQ(fp8_decode(0x7b, e5m2), 57344.0f);
}

bool is_special(std::uint8_t code, Fp8Format f) {
  const int m = code & 0x7f;
  return f == e4m3 ? m == 0x7f : m >= 0x7c;
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (auto f : {e4m3, e5m2})
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      if (is_special(code, f)) continue;
      EXPECT_EQ(fp8_encode(fp8_decode(code, f), f), code) << c;
    }
}

// The nearest finite table entry by brute force; ties to the even code.
std::uint8_t nearest_by_search(float x, Fp8Format f) {
  int best = -1;
  double best_distance = 0;
  for (int c = 0; c < 128; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    if (is_special(code, f)) continue;
    const double d = std::fabs(std::fabs(static_cast<double>(x)) - fp8_decode(code, f));
    if (best < 0 || d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return static_cast<std::uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8, RandomValuesEncodeToTheNearestEntry) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-20, 17);
  for (auto f : {e4m3, e5m2})
    for (int i = 0; i < 20000; ++i) {
      const float x = std::ldexp(mantissa(rng), exponent(rng));
      if (std::fabs(x) > fp8_max(f)) continue;  // saturation is tested above
      ASSERT_EQ(fp8_encode(x, f), nearest_by_search(x, f)) << x;
    }
}

TEST(Fp8, E8m0) {
  EXPECT_EQ(e8m0_decode(127), 1.0f);
  EXPECT_EQ(e8m0_decode(254), std::ldexp(1.0f, 127));
  EXPECT_EQ(e8m0_decode(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_decode(255)));
  EXPECT_EQ(e8m0_from_exponent(-3), 124);
  EXPECT_EQ(e8m0_from_exponent(-500), 0);
}

TEST(Fp8, RecipeScales) {
  // Delayed: 448 / 2 / 2^margin; the old scale kept for amax 0, inf or NaN.
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, 448.0f, 0), 224.0f);
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, 448.0f, 1), 112.0f);
  EXPECT_EQ(delayed_scale(0.0f, 3.0f, 448.0f, 0), 3.0f);
  EXPECT_EQ(delayed_scale(std::numeric_limits<float>::infinity(), 3.0f, 448.0f, 0), 3.0f);
  EXPECT_EQ(delayed_scale(std::numeric_limits<float>::quiet_NaN(), 3.0f, 448.0f, 0), 3.0f);
  // As TE's delayed_scaling.cu: an amax too tiny for fp32 gives the largest float, not the
  // old scale; the history's max passes over a NaN entry (fmaxf); most_recent takes it.
  EXPECT_EQ(delayed_scale(1e-38f, 3.0f, 448.0f, 0), std::numeric_limits<float>::max());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float history[] = {1.0f, nan, 3.0f, 2.0f};
  EXPECT_EQ(history_amax(history, 4, true), 3.0f);
  EXPECT_TRUE(std::isnan(history_amax(history + 1, 3, false)));
  const float all_nan[] = {nan, nan};
  EXPECT_EQ(history_amax(all_nan, 2, true), 0.0f);  // then the old scale stays
  // Current: 448 / amax, 1 for a zero tensor.
  EXPECT_EQ(current_scale(448.0f, 448.0f), 1.0f);
  EXPECT_EQ(current_scale(0.0f, 448.0f), 1.0f);
  EXPECT_EQ(current_scale(3.5f, 57344.0f), 16384.0f);
  // Block: the power of two at or below 448 / amax.
  EXPECT_EQ(block_scale(3.0f, 448.0f), 128.0f);  // 149.3 → 128
  EXPECT_EQ(block_scale(448.0f, 448.0f), 1.0f);
  EXPECT_EQ(block_scale(449.0f, 448.0f), 0.5f);
  EXPECT_EQ(block_scale(0.0f, 448.0f), 1.0f);
  // MX, as Transformer Engine's float_to_e8m0: 2^ceil(log2(amax / fp8_max)).
  EXPECT_EQ(mx_scale_code(448.0f, e4m3), 127);  // 2^0: 448 / 448 = 1 exactly
  EXPECT_EQ(mx_scale_code(449.0f, e4m3), 128);  // 2^1
  EXPECT_EQ(mx_scale_code(1.0f, e4m3), 119);    // 1/448 = 2^−8.8 → 2^−8
  // 1.9/448 = 2^−7.9 → 2^−7, so 1.9 lands at 243 (OCP's round-down rule would give 2^−8
  // and saturate it at 448 for 486).
  EXPECT_EQ(mx_scale_code(1.9f, e4m3), 120);
  EXPECT_EQ(mx_scale_code(1.75f, e4m3), 119);  // 1.75/448 = 2^−8 exactly
  EXPECT_EQ(mx_scale_code(1.0f, e5m2), 112);   // 1/57344 = 2^−15.8 → 2^−15
  EXPECT_EQ(mx_scale_code(0.0f, e4m3), 0);
  // A quotient below the least normal rounds up only past half of it, as TE's rule.
  EXPECT_EQ(mx_scale_code(std::ldexp(1.0f, -140), e4m3), 0);
  EXPECT_EQ(mx_scale_code(std::ldexp(336.0f, -126), e4m3), 1);  // 0.75 · 2^−126 → 2^−126
  EXPECT_EQ(floor_log2(std::ldexp(1.0f, -140)), -140);          // an fp32 subnormal
}

// The cpu kernels: per-tensor with a given scale, current scaling, 1×128 / 128×128 blocks
// and MX blocks of 32, each element against fp8_round with its block's scale.
TEST(Fp8, QuantizeKernels) {
  const std::int64_t rows = 130, cols = 260;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  x[5] = 40.0f;  // one outlier in the first block row
  std::vector<std::uint8_t> codes(x.size());
  std::vector<float> out(x.size());
  for (auto mode : {cpu::Fp8Blocks{0, 0}, cpu::Fp8Blocks{1, 128}, cpu::Fp8Blocks{128, 128},
                    cpu::Fp8Blocks{1, 32}, cpu::Fp8Blocks{32, 1}}) {
    for (auto mx : {false, true}) {
      if (mx && mode.cols != 32 && mode.rows != 32) continue;
      const auto grid = cpu::fp8_scale_grid(rows, cols, mode);
      std::vector<float> scale_inv(static_cast<std::size_t>(grid.rows * grid.cols));
      cpu::fp8_quantize({.input = x.data(),
                         .rows = rows,
                         .cols = cols,
                         .format = e4m3,
                         .blocks = mode,
                         .mx = mx,
                         .given_scale = 0},
                        codes.data(), scale_inv.data(), nullptr);
      cpu::fp8_dequantize(codes.data(), scale_inv.data(), rows, cols, e4m3, mode, out.data());
      auto block_of = [&](std::int64_t r, std::int64_t c) {
        return (mode.rows ? r / mode.rows : 0) * grid.cols + (mode.cols ? c / mode.cols : 0);
      };
      std::vector<float> amax(scale_inv.size(), 0.0f);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          float& m = amax[static_cast<std::size_t>(block_of(r, c))];
          m = std::max(m, std::fabs(x[static_cast<std::size_t>(r * cols + c)]));
        }
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto b = static_cast<std::size_t>(block_of(r, c));
          const float scale = mx ? 1.0f / e8m0_decode(mx_scale_code(amax[b], e4m3))
                              : mode.rows || mode.cols ? block_scale(amax[b], 448.0f)
                                                       : current_scale(amax[b], 448.0f);
          const auto i = static_cast<std::size_t>(r * cols + c);
          ASSERT_EQ(scale_inv[b], 1.0f / scale);
          ASSERT_EQ(out[i], fp8_round(x[i], scale, 1.0f / scale, e4m3)) << r << ' ' << c;
        }
      if (!mode.rows && !mode.cols) break;
    }
  }
}

// What the block recipes' sequence-parallel gathers rest on (model/fp8_linear.hpp
// gathers_codes): a tensor's rows cut into shards of whole blocks, each shard quantized on
// its own, give the whole tensor's codes and block scales back to back — along the columns
// (1 × 128, MXFP8's 1 × 32) and along the rows (128 × 1, 32 × 1). With shards that cut a row
// block (64 rows of 128 × 1 blocks) the scales of that block differ.
TEST(Fp8, ShardsOfWholeBlocksQuantizeAsTheWholeTensor) {
  const std::int64_t rows = 256, cols = 256, half = rows / 2;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  x[static_cast<std::size_t>(200 * cols + 3)] = 60.0f;  // an outlier in the second shard
  auto quantized = [&](const float* input, std::int64_t n, cpu::Fp8Blocks blocks, bool mx) {
    const auto grid = cpu::fp8_scale_grid(n, cols, blocks);
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(n * cols));
    std::vector<float> scale_inv(static_cast<std::size_t>(grid.rows * grid.cols));
    cpu::fp8_quantize({.input = input,
                       .rows = n,
                       .cols = cols,
                       .format = e4m3,
                       .blocks = blocks,
                       .mx = mx,
                       .given_scale = 0},
                      codes.data(), scale_inv.data(), nullptr);
    return std::pair{codes, scale_inv};
  };
  for (auto [blocks, mx] :
       {std::pair{cpu::Fp8Blocks{1, 128}, false}, std::pair{cpu::Fp8Blocks{128, 1}, false},
        std::pair{cpu::Fp8Blocks{1, 32}, true}, std::pair{cpu::Fp8Blocks{32, 1}, true}}) {
    const auto whole = quantized(x.data(), rows, blocks, mx);
    auto first = quantized(x.data(), half, blocks, mx);
    const auto second = quantized(x.data() + half * cols, half, blocks, mx);
    first.first.insert(first.first.end(), second.first.begin(), second.first.end());
    first.second.insert(first.second.end(), second.second.begin(), second.second.end());
    EXPECT_EQ(first.first, whole.first) << blocks.rows << " x " << blocks.cols;
    EXPECT_EQ(first.second, whole.second) << blocks.rows << " x " << blocks.cols;
  }
  // Shards of 64 rows cut the 128 × 1 blocks: the outlier's block scale is no longer shared.
  const cpu::Fp8Blocks columnwise{128, 1};
  const auto whole = quantized(x.data(), rows, columnwise, false);
  auto cut = quantized(x.data() + 128 * cols, 64, columnwise, false);
  EXPECT_NE(cut.second[3], whole.second[cols + 3]);
}

TEST(Fp8, GivenScaleAndAmax) {
  const std::vector<float> x = {1.0f, -3.0f, 0.5f, 1000.0f};
  std::vector<std::uint8_t> codes(4);
  float scale_inv = 0, amax = 0;
  cpu::fp8_quantize({.input = x.data(),
                     .rows = 1,
                     .cols = 4,
                     .format = e4m3,
                     .blocks = {},
                     .mx = false,
                     .given_scale = 2.0f},
                    codes.data(), &scale_inv, &amax);
  EXPECT_EQ(amax, 1000.0f);
  EXPECT_EQ(scale_inv, 0.5f);
  EXPECT_EQ(codes[0], fp8_encode(2.0f, e4m3));
  EXPECT_EQ(codes[1], fp8_encode(-6.0f, e4m3));
  EXPECT_EQ(codes[3], 0x7e);  // 2000 saturates
}

}  // namespace
}  // namespace tandem::kernels::math
