// Elementwise kernels, bias and GeLU against double references; GeLU's and the bias's
// reference backward against central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/dropout.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gelu.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;

// Sizes below and above the parallel threshold (kMinParallelElements = 32768).
const std::int64_t kSizes[] = {1, 7, 65, 40000, 100003};

TEST(Elementwise, AddScaleFillCopy) {
  for (const std::int64_t n : kSizes) {
    const std::size_t un = static_cast<std::size_t>(n);
    const Floats a = random_floats(un, 1), b = random_floats(un, 2);
    Floats out(un);
    add(a.data(), b.data(), out.data(), n);
    Doubles sum(un), scaled(un);
    for (std::size_t i = 0; i < un; ++i) sum[i] = static_cast<double>(a[i]) + b[i];
    EXPECT_TRUE(all_close(out, sum, 1e-7, Doubles(un, 2.0)));
    Floats inplace = a;  // residual add in place: x += b
    add(inplace.data(), b.data(), inplace.data(), n);
    EXPECT_EQ(inplace, out);
    scale(out.data(), n, -0.5f);
    for (std::size_t i = 0; i < un; ++i) scaled[i] = -0.5 * static_cast<double>(inplace[i]);
    EXPECT_TRUE(all_close(out, scaled, 1e-7));
    fill(out.data(), n, 3.0f);
    EXPECT_EQ(out, Floats(un, 3.0f));
    copy(a.data(), out.data(), n);
    EXPECT_EQ(out, a);
  }
}

double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

double gelu_derivative_ref(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * std::sqrt(2.0 / std::numbers::pi) *
                               (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(Gelu, ReferenceDerivativeMatchesFiniteDifferences) {
  const Doubles x = testing::to_double(random_floats(50, 3, -6.0f, 6.0f));
  const Doubles w = testing::to_double(random_floats(50, 4));
  Doubles grad(50);
  for (std::size_t i = 0; i < 50; ++i) grad[i] = w[i] * gelu_derivative_ref(x[i]);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) {
        double s = 0;
        for (std::size_t i = 0; i < v.size(); ++i) s += w[i] * gelu_ref(v[i]);
        return s;
      },
      x, grad));
}

TEST(Gelu, ForwardAndBackwardMatchDoubleReference) {
  for (const std::int64_t n : kSizes) {
    const std::size_t un = static_cast<std::size_t>(n);
    // Wide range: deep negative tail (exp underflow), the knee and the linear part.
    const Floats x = random_floats(un, 5, -12.0f, 12.0f), dy = random_floats(un, 6);
    Floats y(un), dx(un);
    gelu_forward(x.data(), y.data(), n);
    gelu_backward(dy.data(), x.data(), dx.data(), n);
    Doubles y_ref(un), dx_ref(un), y_scale(un), dx_scale(un);
    for (std::size_t i = 0; i < un; ++i) {
      y_ref[i] = gelu_ref(x[i]);
      dx_ref[i] = dy[i] * gelu_derivative_ref(x[i]);
      // tanh's absolute error ~3e-7 enters as 0.5·|x|·error: scale by |x| (and |dy|·|x|).
      y_scale[i] = std::fabs(x[i]) * 0.1;
      dx_scale[i] = std::fabs(dy[i]) * (0.1 + std::fabs(x[i]) * 0.1);
    }
    EXPECT_TRUE(all_close(y, y_ref, 1e-5, y_scale)) << n;
    EXPECT_TRUE(all_close(dx, dx_ref, 1e-5, dx_scale)) << n;
  }
}

TEST(Bias, ReferenceGradientMatchesFiniteDifferences) {
  // out(r, c) = x(r, c) + bias(c); d Σ w·out / d bias(c) = Σ_r w(r, c).
  const std::int64_t rows = 5, C = 3;
  const Doubles bias = testing::to_double(random_floats(C, 11));
  const Doubles w = testing::to_double(random_floats(rows * C, 12));
  Doubles grad(C, 0.0);
  for (std::int64_t i = 0; i < rows * C; ++i) grad[i % C] += w[i];
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& b) {
        Doubles out(rows * C);
        for (std::int64_t i = 0; i < rows * C; ++i) out[i] = 0.5 + b[i % C];
        return testing::weighted_sum(out, w);
      },
      bias, grad));
}

TEST(Bias, AddAndBackwardMatchDoubleReference) {
  for (const auto& [rows, C] :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 5}, {65, 130}, {1024, 96}}) {
    const std::size_t n = static_cast<std::size_t>(rows * C);
    const Floats bias = random_floats(C, 7), dout = random_floats(n, 8), x = random_floats(n, 9);
    Floats out = x;
    bias_add(out.data(), bias.data(), rows, C);
    Doubles out_ref(n);
    for (std::size_t i = 0; i < n; ++i) out_ref[i] = static_cast<double>(x[i]) + bias[i % C];
    EXPECT_TRUE(all_close(out, out_ref, 1e-7, Doubles(n, 2.0)));

    const Floats dbias0 = random_floats(C, 10);
    Floats dbias = dbias0;
    bias_backward(dbias.data(), dout.data(), rows, C);
    Doubles dbias_ref(dbias0.begin(), dbias0.end()), scale(C, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      dbias_ref[i % C] += dout[i];
      scale[i % C] += std::fabs(dout[i]);
    }
    EXPECT_TRUE(all_close(dbias, dbias_ref, 1e-6, scale)) << rows << "x" << C;
  }
}

// Megatron's fused bias kernels: the double reference of the sum they fuse, and the same
// bits as the two unfused kernels they replace (both round in + bias to float first), so a
// fused run trains exactly as an unfused one in fp32.
TEST(BiasFusion, BiasGeluAndBiasResidualAddMatchReferenceAndUnfusedKernels) {
  for (const auto& [rows, C] :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 5}, {65, 130}, {1024, 96}}) {
    const std::size_t n = static_cast<std::size_t>(rows * C);
    const Floats x = random_floats(n, 21, -6.0f, 6.0f), bias = random_floats(C, 22);
    const Floats dy = random_floats(n, 23), residual = random_floats(n, 24);
    Floats y(n), dx(n), out(n);
    bias_gelu_forward(x.data(), bias.data(), y.data(), rows, C);
    bias_gelu_backward(dy.data(), x.data(), bias.data(), dx.data(), rows, C);
    bias_dropout_add(x.data(), bias.data(), residual.data(), out.data(), rows, C, {});
    Doubles y_ref(n), dx_ref(n), out_ref(n), y_scale(n), dx_scale(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(x[i]) + bias[i % static_cast<std::size_t>(C)];
      y_ref[i] = gelu_ref(v);
      dx_ref[i] = dy[i] * gelu_derivative_ref(v);
      out_ref[i] = residual[i] + v;
      y_scale[i] = std::fabs(v) * 0.1;
      dx_scale[i] = std::fabs(dy[i]) * (0.1 + std::fabs(v) * 0.1);
    }
    EXPECT_TRUE(all_close(y, y_ref, 1e-5, y_scale)) << rows << "x" << C;
    EXPECT_TRUE(all_close(dx, dx_ref, 1e-5, dx_scale)) << rows << "x" << C;
    EXPECT_TRUE(all_close(out, out_ref, 1e-7, Doubles(n, 4.0))) << rows << "x" << C;

    Floats biased = x;  // the unfused kernels: bias_add, then gelu / gelu_backward / add
    bias_add(biased.data(), bias.data(), rows, C);
    Floats y2(n), dx2(n), out2(n);
    gelu_forward(biased.data(), y2.data(), rows * C);
    gelu_backward(dy.data(), biased.data(), dx2.data(), rows * C);
    add(residual.data(), biased.data(), out2.data(), rows * C);
    EXPECT_EQ(y, y2);
    EXPECT_EQ(dx, dx2);
    EXPECT_EQ(out, out2);
    Floats in_place = residual;  // output may be the residual
    bias_dropout_add(x.data(), bias.data(), in_place.data(), in_place.data(), rows, C, {});
    EXPECT_EQ(in_place, out);
  }
}

// Hidden dropout: about p of the elements dropped, the kept ones scaled by 1 / (1 − p);
// backward passes the gradient through the same mask; a shard of rows (sequence
// parallelism: first = row_offset · C) draws the whole's mask for its rows; the fused
// bias-dropout-add gives the unfused kernels' bits.
TEST(HiddenDropout, MaskIsDrawnPerElementOfTheWholeAndFusedMatchesUnfused) {
  const std::int64_t rows = 512, C = 96, n = rows * C;
  const std::size_t un = static_cast<std::size_t>(n);
  const float p = 0.25f;
  const math::HiddenDropoutMask m{
      .stream = math::hidden_dropout_stream(7, 3, 5), .first = 0, .p = p};
  const Floats x = random_floats(un, 31), dy = random_floats(un, 32);
  Floats y(un), dx(un);
  dropout_forward(x.data(), y.data(), n, m);
  dropout_backward(dy.data(), dx.data(), n, m);
  std::int64_t dropped = 0;
  for (std::size_t i = 0; i < un; ++i) {
    const bool kept = y[i] != 0.0f;
    dropped += !kept;
    EXPECT_EQ(y[i], kept ? x[i] / (1.0f - p) : 0.0f) << i;
    EXPECT_EQ(dx[i], kept ? dy[i] / (1.0f - p) : 0.0f) << i;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(n), p, 0.01);
  // Rows 256.. as a shard of their own.
  const std::int64_t half = rows / 2;
  Floats shard(static_cast<std::size_t>(half * C));
  dropout_forward(x.data() + half * C, shard.data(), half * C,
                  {.stream = m.stream, .first = static_cast<std::uint64_t>(half * C), .p = p});
  EXPECT_TRUE(std::equal(shard.begin(), shard.end(), y.begin() + half * C));
  // Another stream draws another mask.
  Floats other(un);
  dropout_forward(x.data(), other.data(), n,
                  {.stream = math::hidden_dropout_stream(7, 3, 6), .first = 0, .p = p});
  EXPECT_NE(other, y);
  // Fused residual + dropout(x + bias) against bias_add, dropout, add; and without a bias.
  const Floats bias = random_floats(C, 33), residual = random_floats(un, 34);
  Floats fused(un), biased = x, dropped_b(un), unfused(un);
  bias_dropout_add(x.data(), bias.data(), residual.data(), fused.data(), rows, C, m);
  bias_add(biased.data(), bias.data(), rows, C);
  dropout_forward(biased.data(), dropped_b.data(), n, m);
  add(residual.data(), dropped_b.data(), unfused.data(), n);
  EXPECT_EQ(fused, unfused);
  bias_dropout_add(x.data(), nullptr, residual.data(), fused.data(), rows, C, m);
  add(residual.data(), y.data(), unfused.data(), n);
  EXPECT_EQ(fused, unfused);
}

// The keys and values of a grouped QKV row (here 3 rows of 10 columns, 4 taken from column
// 6) into a block of their own, and gradients added back; other columns are left alone.
TEST(CopyColumns, TakesAndAddsBackTheNamedColumnsOnly) {
  Floats qkv(30);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
  Floats kv(12, -1.0f);
  copy_columns({.rows = 3, .width = 4, .from_ld = 10, .from_column = 6, .to_ld = 4}, qkv.data(),
               kv.data());
  EXPECT_EQ(kv, (Floats{6, 7, 8, 9, 16, 17, 18, 19, 26, 27, 28, 29}));
  Floats grads(30, 1.0f);
  copy_columns(
      {.rows = 3, .width = 4, .from_ld = 4, .to_ld = 10, .to_column = 6, .accumulate = true},
      kv.data(), grads.data());
  for (std::size_t i = 0; i < grads.size(); ++i)
    EXPECT_EQ(grads[i], i % 10 >= 6 ? 1.0f + static_cast<float>(i) : 1.0f) << i;
  // Large enough to run on several threads: the same result.
  Floats big(1 << 18), half(1 << 17);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  copy_columns({.rows = 1 << 12, .width = 32, .from_ld = 64, .from_column = 32, .to_ld = 32},
               big.data(), half.data());
  for (std::size_t r = 0; r < (1 << 12); r += 97)
    EXPECT_EQ(half[r * 32 + 5], big[r * 64 + 37]) << r;
}

// Multi-latent attention's blocks: two heads of 3 query features out of a 2-row projection
// (head stride 3) into rows of 2 heads × 8 features (stride 8, from column 1); one
// positional block of 2 features copied to both heads (from_stride 0); and the way back,
// both heads' blocks summed into one (to_stride 0), written and accumulated. Expected
// values written out by hand.
TEST(CopyColumns, StridedBlocksBroadcastAndSum) {
  const Floats q{1, 2, 3, 4,  5,  6,  // row 0: head 0 = 1 2 3, head 1 = 4 5 6
                 7, 8, 9, 10, 11, 12};
  Floats rows(2 * 16, 0.0f);
  copy_columns({.rows = 2,
                .width = 3,
                .from_ld = 6,
                .to_ld = 16,
                .to_column = 1,
                .count = 2,
                .from_stride = 3,
                .to_stride = 8},
               q.data(), rows.data());
  const Floats want_q{0, 1, 2, 3, 0, 0, 0, 0, 0, 4,  5,  6,  0, 0, 0, 0,
                      0, 7, 8, 9, 0, 0, 0, 0, 0, 10, 11, 12, 0, 0, 0, 0};
  EXPECT_EQ(rows, want_q);
  const Floats pe{-1, -2, -3, -4};  // (2 rows, 2 features)
  copy_columns({.rows = 2,
                .width = 2,
                .from_ld = 2,
                .to_ld = 16,
                .to_column = 5,
                .count = 2,
                .from_stride = 0,
                .to_stride = 8},
               pe.data(), rows.data());
  const Floats want_pe{0, 1, 2, 3, 0, -1, -2, 0, 0, 4,  5,  6,  0, -1, -2, 0,
                       0, 7, 8, 9, 0, -3, -4, 0, 0, 10, 11, 12, 0, -3, -4, 0};
  EXPECT_EQ(rows, want_pe);
  // Back: the positional columns of both heads summed: row 0 (-1 + -1, -2 + -2).
  Floats sum(4, 100.0f);
  const kernels::math::ColumnCopy back{.rows = 2,
                                       .width = 2,
                                       .from_ld = 16,
                                       .from_column = 5,
                                       .to_ld = 2,
                                       .count = 2,
                                       .from_stride = 8,
                                       .to_stride = 0};
  copy_columns(back, rows.data(), sum.data());
  EXPECT_EQ(sum, (Floats{-2, -4, -6, -8}));
  auto accumulated = back;
  accumulated.accumulate = true;
  copy_columns(accumulated, rows.data(), sum.data());
  EXPECT_EQ(sum, (Floats{-4, -8, -12, -16}));
  EXPECT_EQ(back.elements(), 4);
  // Many rows (several threads): each row's sum of 16 blocks of 4 against a plain loop.
  const std::int64_t n = 1 << 12, blocks = 16, w = 4;
  Floats wide(static_cast<std::size_t>(n * blocks * w)), got(static_cast<std::size_t>(n * w));
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<float>(i % 13) - 6.0f;
  copy_columns({.rows = n,
                .width = w,
                .from_ld = blocks * w,
                .to_ld = w,
                .count = blocks,
                .from_stride = w,
                .to_stride = 0},
               wide.data(), got.data());
  for (std::int64_t r = 0; r < n; r += 37)
    for (std::int64_t c = 0; c < w; ++c) {
      float want = 0;
      for (std::int64_t k = 0; k < blocks; ++k)
        want += wide[static_cast<std::size_t>(r * blocks * w + k * w + c)];
      EXPECT_EQ(got[static_cast<std::size_t>(r * w + c)], want) << r;
    }
}

}  // namespace
}  // namespace tandem::kernels::cpu
