// Causal attention forward and backward against a double reference (per head, naive
// loops), the reference backward against central differences, causality, determinism;
// attention dropout against the same reference with the mask of kernels/math/dropout.hpp.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/attention.hpp"
#include "kernels/math/dropout.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;
using testing::rms_scale;

struct Ref {
  Doubles out;  // (T, B, NH, HD)
  Doubles att;  // (B, NH, T, T)
};

std::size_t size_qkv(AttentionShape s) {
  return static_cast<std::size_t>(s.B * s.T * 3 * s.NH * s.HD);
}
std::size_t size_out(AttentionShape s) {
  return static_cast<std::size_t>(s.B * s.T * s.NH * s.HD);
}
std::size_t size_att(AttentionShape s) {
  return static_cast<std::size_t>(s.B * s.NH * s.T * s.T);
}

// Index helpers for the sequence-first (T, B, 3, NH, HD) and (T, B, NH, HD).
struct Index {
  AttentionShape s;
  std::size_t qkv(std::int64_t b, std::int64_t t, std::int64_t which, std::int64_t h,
                  std::int64_t d) const {
    return static_cast<std::size_t>((((t * s.B + b) * 3 + which) * s.NH + h) * s.HD + d);
  }
  std::size_t out(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((t * s.B + b) * s.NH + h) * s.HD + d);
  }
  std::size_t att(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return static_cast<std::size_t>(((b * s.NH + h) * s.T + i) * s.T + j);
  }
};

// The factor dropout puts on probability (b, h, i, j): 0 or 1 / (1 − p); 1 without dropout.
double dropout_factor(AttentionShape s, AttentionDropout d, std::int64_t b, std::int64_t h,
                      std::int64_t i, std::int64_t j) {
  if (d.p <= 0) return 1.0;
  return math::dropout_keep(d.stream, dropout_index(s, d, b * s.NH + h, i, j), d.p)
             ? 1.0 / (1.0 - static_cast<double>(d.p))
             : 0.0;
}

Ref reference_forward(AttentionShape s, const Doubles& qkv, AttentionDropout drop = {}) {
  const Index ix{s};
  Ref r{Doubles(size_out(s), 0.0), Doubles(size_att(s), 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  for (std::int64_t b = 0; b < s.B; ++b) {
    for (std::int64_t h = 0; h < s.NH; ++h) {
      for (std::int64_t i = 0; i < s.T; ++i) {
        Doubles score(static_cast<std::size_t>(i + 1));
        double max = -1e300;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < s.HD; ++d)
            dot += qkv[ix.qkv(b, i, 0, h, d)] * qkv[ix.qkv(b, j, 1, h, d)];
          score[j] = dot * scale;
          max = std::max(max, score[j]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - max));
        for (std::int64_t j = 0; j <= i; ++j) {
          const double p = score[j] / sum;
          r.att[ix.att(b, h, i, j)] = p;
          const double kept = p * dropout_factor(s, drop, b, h, i, j);
          for (std::int64_t d = 0; d < s.HD; ++d)
            r.out[ix.out(b, i, h, d)] += kept * qkv[ix.qkv(b, j, 2, h, d)];
        }
      }
    }
  }
  return r;
}

Doubles reference_backward(AttentionShape s, const Doubles& qkv, const Doubles& att,
                           const Doubles& dout, AttentionDropout drop = {}) {
  const Index ix{s};
  Doubles dqkv(size_qkv(s), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  for (std::int64_t b = 0; b < s.B; ++b) {
    for (std::int64_t h = 0; h < s.NH; ++h) {
      for (std::int64_t i = 0; i < s.T; ++i) {
        Doubles dp(static_cast<std::size_t>(i + 1));
        double dot = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          const double p = att[ix.att(b, h, i, j)];
          const double factor = dropout_factor(s, drop, b, h, i, j);
          for (std::int64_t d = 0; d < s.HD; ++d) {
            dp[j] += dout[ix.out(b, i, h, d)] * qkv[ix.qkv(b, j, 2, h, d)];
            dqkv[ix.qkv(b, j, 2, h, d)] += p * factor * dout[ix.out(b, i, h, d)];
          }
          dp[j] *= factor;
          dot += p * dp[j];
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double ds = att[ix.att(b, h, i, j)] * (dp[j] - dot) * scale;
          for (std::int64_t d = 0; d < s.HD; ++d) {
            dqkv[ix.qkv(b, i, 0, h, d)] += ds * qkv[ix.qkv(b, j, 1, h, d)];
            dqkv[ix.qkv(b, j, 1, h, d)] += ds * qkv[ix.qkv(b, i, 0, h, d)];
          }
        }
      }
    }
  }
  return dqkv;
}

TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  const AttentionShape s{.B = 2, .T = 5, .NH = 2, .HD = 3};
  const Doubles qkv = testing::to_double(random_floats(size_qkv(s), 1));
  const Doubles w = testing::to_double(random_floats(size_out(s), 2));
  const Ref fwd = reference_forward(s, qkv);
  const Doubles grad = reference_backward(s, qkv, fwd.att, w);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& x) { return testing::weighted_sum(reference_forward(s, x).out, w); }, qkv,
      grad));
}

class AttentionShapes : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(AttentionShapes, ForwardAndBackwardMatchDoubleReference) {
  const AttentionShape s = GetParam();
  const Floats qkv = random_floats(size_qkv(s), 3, -2.0f, 2.0f);
  const Floats dout = random_floats(size_out(s), 4);
  Floats out(size_out(s)), att(size_att(s), -1.0f), dqkv(size_qkv(s), 99.0f);
  attention_forward(s, qkv.data(), out.data(), att.data());
  attention_backward(s, dout.data(), qkv.data(), att.data(), dqkv.data());

  const Ref ref = reference_forward(s, testing::to_double(qkv));
  EXPECT_TRUE(all_close(out, ref.out, 1e-5, rms_scale(ref.out)));
  EXPECT_TRUE(all_close(att, ref.att, 1e-5, rms_scale(ref.att)));
  // The float backward against the double backward given the float forward's probabilities.
  const Doubles dref = reference_backward(s, testing::to_double(qkv), testing::to_double(att),
                                          testing::to_double(dout));
  EXPECT_TRUE(all_close(dqkv, dref, 1e-5, rms_scale(dref)));
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionShapes,
                         ::testing::Values(AttentionShape{.B = 1, .T = 1, .NH = 1, .HD = 1},
                                           AttentionShape{.B = 2, .T = 7, .NH = 3, .HD = 5},
                                           AttentionShape{.B = 1, .T = 65, .NH = 2, .HD = 8},
                                           AttentionShape{.B = 2, .T = 130, .NH = 1, .HD = 4}));

TEST(Attention, FutureTokensDoNotChangeEarlierOutputs) {
  const AttentionShape s{.B = 2, .T = 70, .NH = 2, .HD = 4};
  const Index ix{s};
  const Floats qkv = random_floats(size_qkv(s), 5);
  Floats changed = qkv;
  const std::int64_t t0 = 40;
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t t = t0 + 1; t < s.T; ++t)
      for (std::int64_t w = 0; w < 3; ++w)
        for (std::int64_t h = 0; h < s.NH; ++h)
          for (std::int64_t d = 0; d < s.HD; ++d) changed[ix.qkv(b, t, w, h, d)] += 1.0f;
  Floats out1(size_out(s)), out2(size_out(s)), att1(size_att(s)), att2(size_att(s));
  attention_forward(s, qkv.data(), out1.data(), att1.data());
  attention_forward(s, changed.data(), out2.data(), att2.data());
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t t = 0; t <= t0; ++t)
      for (std::int64_t h = 0; h < s.NH; ++h)
        for (std::int64_t d = 0; d < s.HD; ++d)
          ASSERT_EQ(out1[ix.out(b, t, h, d)], out2[ix.out(b, t, h, d)]) << b << " " << t;
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.NH; ++h)
      for (std::int64_t i = 0; i < s.T; ++i)
        for (std::int64_t j = i + 1; j < s.T; ++j) ASSERT_EQ(att1[ix.att(b, h, i, j)], 0.0f);
}

TEST(Attention, RepeatedRunsAreBitwiseEqual) {
  const AttentionShape s{.B = 2, .T = 100, .NH = 3, .HD = 8};
  const Floats qkv = random_floats(size_qkv(s), 6), dout = random_floats(size_out(s), 7);
  Floats out[2], att[2], dqkv[2];
  for (int run = 0; run < 2; ++run) {
    out[run].resize(size_out(s));
    att[run].resize(size_att(s));
    dqkv[run].resize(size_qkv(s));
    attention_forward(s, qkv.data(), out[run].data(), att[run].data());
    attention_backward(s, dout.data(), qkv.data(), att[run].data(), dqkv[run].data());
  }
  EXPECT_TRUE(testing::bitwise_equal(out[0], out[1]));
  EXPECT_TRUE(testing::bitwise_equal(att[0], att[1]));
  EXPECT_TRUE(testing::bitwise_equal(dqkv[0], dqkv[1]));
}

}  // namespace
}  // namespace tandem::kernels::cpu

namespace tandem::kernels::cpu {
namespace {

TEST(AttentionDropout, KeepsOneMinusPOfTheElementsDeterministically) {
  const std::uint64_t stream = math::dropout_stream(1234, 7, 3);
  for (const float p : {0.0f, 0.1f, 0.5f}) {
    const int n = 200000;
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      const bool k = math::dropout_keep(stream, static_cast<std::uint64_t>(i), p);
      ASSERT_EQ(k, math::dropout_keep(stream, static_cast<std::uint64_t>(i), p));
      kept += k ? 1 : 0;
    }
    // Binomial: 5 standard deviations of n·p·(1 − p) at most (exact at p = 0).
    const double sd = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(kept, n * (1.0 - p), 5 * sd + 1e-9) << p;
  }
  // Another microbatch or layer draws another mask.
  const std::uint64_t other = math::dropout_stream(1234, 8, 3);
  int same = 0;
  for (int i = 0; i < 1000; ++i)
    same += math::dropout_keep(stream, static_cast<std::uint64_t>(i), 0.5f) ==
                    math::dropout_keep(other, static_cast<std::uint64_t>(i), 0.5f)
                ? 1
                : 0;
  EXPECT_GT(same, 400);
  EXPECT_LT(same, 600);
  EXPECT_EQ(math::dropout_apply(2.0f, stream, 0, 0.0f), 2.0f);
}

TEST(AttentionDropout, ForwardAndBackwardMatchTheReferenceWithTheSameMask) {
  for (const AttentionShape s : {AttentionShape{.B = 2, .T = 7, .NH = 3, .HD = 5},
                                 AttentionShape{.B = 1, .T = 130, .NH = 2, .HD = 4}}) {
    const AttentionDropout drop{.p = 0.3f, .stream = math::dropout_stream(9, 1, 2)};
    const Floats qkv = random_floats(size_qkv(s), 3, -2.0f, 2.0f);
    const Floats dout = random_floats(size_out(s), 4);
    Floats out(size_out(s)), att(size_att(s), -1.0f), dqkv(size_qkv(s), 99.0f);
    attention_forward(s, qkv.data(), out.data(), att.data(), drop);
    attention_backward(s, dout.data(), qkv.data(), att.data(), dqkv.data(), drop);

    const Ref ref = reference_forward(s, testing::to_double(qkv), drop);
    EXPECT_TRUE(all_close(out, ref.out, 1e-5, rms_scale(ref.out)));
    EXPECT_TRUE(all_close(att, ref.att, 1e-5, rms_scale(ref.att)));  // saved before dropout
    const Doubles dref = reference_backward(s, testing::to_double(qkv), testing::to_double(att),
                                            testing::to_double(dout), drop);
    EXPECT_TRUE(all_close(dqkv, dref, 1e-5, rms_scale(dref)));
    // Dropout did something: the output differs from the output without it.
    const Ref plain = reference_forward(s, testing::to_double(qkv));
    EXPECT_FALSE(all_close(out, plain.out, 1e-3, rms_scale(plain.out)));
  }
}

TEST(AttentionDropout, TheReferenceBackwardMatchesFiniteDifferences) {
  const AttentionShape s{.B = 2, .T = 5, .NH = 2, .HD = 3};
  const AttentionDropout drop{.p = 0.4f, .stream = math::dropout_stream(3, 0, 0)};
  const Doubles qkv = testing::to_double(random_floats(size_qkv(s), 1));
  const Doubles w = testing::to_double(random_floats(size_out(s), 2));
  const Ref fwd = reference_forward(s, qkv, drop);
  const Doubles grad = reference_backward(s, qkv, fwd.att, w, drop);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& x) { return testing::weighted_sum(reference_forward(s, x, drop).out, w); },
      qkv, grad));
}

// Two tensor-parallel ranks holding one head each draw the mask one rank with both heads
// draws: the mask follows the global head, not the split.
TEST(AttentionDropout, TheMaskDoesNotDependOnTheTensorParallelSplit) {
  const AttentionShape whole{.B = 2, .T = 9, .NH = 2, .HD = 3};
  const AttentionShape half{.B = 2, .T = 9, .NH = 1, .HD = 3};
  const std::uint64_t stream = math::dropout_stream(5, 4, 1);
  const Index iw{whole}, ih{half};
  const Floats qkv = random_floats(size_qkv(whole), 8);
  Floats out(size_out(whole)), att(size_att(whole));
  attention_forward(whole, qkv.data(), out.data(), att.data(), {.p = 0.5f, .stream = stream});
  for (std::int64_t h = 0; h < 2; ++h) {
    Floats part(size_qkv(half)), part_out(size_out(half)), part_att(size_att(half));
    for (std::int64_t b = 0; b < half.B; ++b)
      for (std::int64_t t = 0; t < half.T; ++t)
        for (std::int64_t w = 0; w < 3; ++w)
          for (std::int64_t d = 0; d < half.HD; ++d)
            part[ih.qkv(b, t, w, 0, d)] = qkv[iw.qkv(b, t, w, h, d)];
    attention_forward(half, part.data(), part_out.data(), part_att.data(),
                      {.p = 0.5f, .stream = stream, .head_offset = h, .heads_total = 2});
    for (std::int64_t b = 0; b < half.B; ++b)
      for (std::int64_t t = 0; t < half.T; ++t)
        for (std::int64_t d = 0; d < half.HD; ++d)
          ASSERT_NEAR(part_out[ih.out(b, t, 0, d)], out[iw.out(b, t, h, d)], 1e-6f)
              << h << " " << t;
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu
