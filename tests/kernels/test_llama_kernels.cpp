// The kernels of Llama-style layers against double references: RMSNorm, SwiGLU, RoPE and
// grouped-query attention (the blocked online-softmax kernel against a naive attention
// that keeps the whole score matrix). Each reference backward is checked against central
// differences first. The largest error against the reference is printed for the record.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;
using testing::rms_scale;
using testing::to_double;
using testing::weighted_sum;

double max_abs_error(const Floats& a, const Doubles& e) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - e[i]));
  return m;
}

void report(const char* what, const Floats& a, const Doubles& e) {
  std::printf("[ max error ] %-28s %.3g\n", what, max_abs_error(a, e));
}

// ---------------------------------------------------------------- RMSNorm

constexpr double kNormEps = 1e-5;

Doubles rms_reference(std::int64_t rows, std::int64_t C, const Doubles& x, const Doubles& g) {
  Doubles y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(C) + kNormEps);
    for (std::int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * rstd * g[c];
  }
  return y;
}

struct RmsGrads {
  Doubles dx, dgamma;
};

RmsGrads rms_reference_backward(std::int64_t rows, std::int64_t C, const Doubles& x,
                                const Doubles& g, const Doubles& dy) {
  RmsGrads out{Doubles(x.size()), Doubles(static_cast<std::size_t>(C), 0.0)};
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(C) + kNormEps);
    double dot = 0;  // Σ dy·γ·x
    for (std::int64_t c = 0; c < C; ++c) dot += dy[r * C + c] * g[c] * x[r * C + c];
    for (std::int64_t c = 0; c < C; ++c) {
      // d(x_c·rstd)/dx_k = rstd·δ_ck − x_c·rstd³·x_k / C
      out.dx[r * C + c] = dy[r * C + c] * g[c] * rstd -
                          x[r * C + c] * rstd * rstd * rstd * dot / static_cast<double>(C);
      out.dgamma[c] += dy[r * C + c] * x[r * C + c] * rstd;
    }
  }
  return out;
}

TEST(RmsNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 3, C = 6;
  const Doubles x = to_double(random_floats(18, 1)), g = to_double(random_floats(6, 2));
  const Doubles w = to_double(random_floats(18, 3));
  const RmsGrads grads = rms_reference_backward(rows, C, x, g, w);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(rms_reference(rows, C, v, g), w); }, x,
      grads.dx));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(rms_reference(rows, C, x, v), w); }, g,
      grads.dgamma));
}

TEST(RmsNorm, ForwardAndBackwardMatchDoubleReference) {
  const std::int64_t rows = 37, C = 200;
  const Floats x = random_floats(rows * C, 11, -2, 2), g = random_floats(C, 12, 0.5f, 1.5f);
  const Floats dy = random_floats(rows * C, 13);
  Floats y(x.size()), rstd(rows), dx(x.size()), dgamma(C, 0.25f);
  rms_norm_forward({rows, C}, x.data(), g.data(), y.data(), rstd.data(),
                   static_cast<float>(kNormEps));
  const Doubles y_ref = rms_reference(rows, C, to_double(x), to_double(g));
  EXPECT_TRUE(all_close(y, y_ref, 1e-5, rms_scale(y_ref)));
  report("rms_norm forward", y, y_ref);
  rms_norm_backward({rows, C}, dy.data(), x.data(), g.data(), rstd.data(), dx.data(),
                    dgamma.data());
  RmsGrads ref = rms_reference_backward(rows, C, to_double(x), to_double(g), to_double(dy));
  for (double& v : ref.dgamma) v += 0.25;  // accumulated into
  EXPECT_TRUE(all_close(dx, ref.dx, 1e-5, rms_scale(ref.dx)));
  EXPECT_TRUE(all_close(dgamma, ref.dgamma, 1e-5, rms_scale(ref.dgamma)));
  report("rms_norm backward dx", dx, ref.dx);
  report("rms_norm backward dgamma", dgamma, ref.dgamma);
}

// ---------------------------------------------------------------- SwiGLU

Doubles swiglu_reference(std::int64_t rows, std::int64_t F, const Doubles& in) {
  Doubles y(static_cast<std::size_t>(rows * F));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < F; ++c) {
      const double g = in[r * 2 * F + c], u = in[r * 2 * F + F + c];
      y[r * F + c] = g / (1.0 + std::exp(-g)) * u;
    }
  return y;
}

Doubles swiglu_reference_backward(std::int64_t rows, std::int64_t F, const Doubles& in,
                                  const Doubles& dy) {
  Doubles din(in.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < F; ++c) {
      const double g = in[r * 2 * F + c], u = in[r * 2 * F + F + c];
      const double s = 1.0 / (1.0 + std::exp(-g));
      din[r * 2 * F + c] = dy[r * F + c] * u * (s + g * s * (1 - s));
      din[r * 2 * F + F + c] = dy[r * F + c] * g * s;
    }
  return din;
}

TEST(SwiGlu, ReferenceBackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 2, F = 5;
  const Doubles in = to_double(random_floats(20, 21, -3, 3)), w = to_double(random_floats(10, 22));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(swiglu_reference(rows, F, v), w); }, in,
      swiglu_reference_backward(rows, F, in, w)));
}

TEST(SwiGlu, ForwardAndBackwardMatchDoubleReference) {
  const std::int64_t rows = 33, F = 300;
  // Wide inputs reach the tails where σ saturates (and exp_approx clamps).
  const Floats in = random_floats(rows * 2 * F, 31, -12, 12), dy = random_floats(rows * F, 32);
  Floats y(static_cast<std::size_t>(rows * F)), din(in.size());
  swiglu_forward(in.data(), y.data(), rows, F);
  swiglu_backward(dy.data(), in.data(), din.data(), rows, F);
  const Doubles y_ref = swiglu_reference(rows, F, to_double(in));
  const Doubles din_ref = swiglu_reference_backward(rows, F, to_double(in), to_double(dy));
  EXPECT_TRUE(all_close(y, y_ref, 2e-6, Doubles(y_ref.size(), 1e-3)));
  // dgate = dy·u·σ·(1 + g·(1 − σ)) cancels near g ≈ −1.28: its error scales with the terms.
  Doubles terms(din_ref.size(), 1e-3);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < F; ++c) {
      const double g = in[static_cast<std::size_t>(r * 2 * F + c)];
      const double u = in[static_cast<std::size_t>(r * 2 * F + F + c)];
      const double sg = 1.0 / (1.0 + std::exp(-g));
      terms[static_cast<std::size_t>(r * 2 * F + c)] +=
          std::fabs(dy[static_cast<std::size_t>(r * F + c)] * u) * sg * (1.0 + std::fabs(g));
    }
  EXPECT_TRUE(all_close(din, din_ref, 2e-6, terms));
  report("swiglu forward", y, y_ref);
  report("swiglu backward", din, din_ref);
}

// ---------------------------------------------------------------- RoPE

Doubles rope_reference(const RopeShape& s, const Doubles& x, bool inverse) {
  Doubles y = x;
  const std::int64_t heads = s.groups * s.per_group, half = s.rotary_dim / 2;
  for (std::int64_t t = 0; t < s.T; ++t)
    for (std::int64_t bh = 0; bh < s.B * heads; ++bh) {
      if (bh % s.per_group >= s.rotate_per_group) continue;
      const std::int64_t at = (t * s.B * heads + bh) * s.head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const double theta =
            static_cast<double>(s.position_offset + t) *
            std::pow(static_cast<double>(s.base),
                     -2.0 * static_cast<double>(i) / static_cast<double>(s.rotary_dim));
        const double c = std::cos(theta), sn = inverse ? -std::sin(theta) : std::sin(theta);
        y[at + i] = x[at + i] * c - x[at + i + half] * sn;
        y[at + i + half] = x[at + i + half] * c + x[at + i] * sn;
      }
    }
  return y;
}

TEST(Rope, ReferenceBackwardIsTheInverseRotation) {
  // y = R·x is linear, so d(w·y)/dx = Rᵀ·w, which must equal the rotation by −θ of w.
  const RopeShape s{.T = 3,
                    .B = 1,
                    .groups = 2,
                    .per_group = 3,
                    .rotate_per_group = 2,
                    .head_dim = 6,
                    .rotary_dim = 4,
                    .position_offset = 5,
                    .base = 100.0f};
  const std::size_t n = 3 * 2 * 3 * 6;
  const Doubles x = to_double(random_floats(n, 41)), w = to_double(random_floats(n, 42));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(rope_reference(s, v, false), w); }, x,
      rope_reference(s, w, true)));
}

TEST(Rope, ForwardAndInverseMatchDoubleReference) {
  // Llama-like: 4 groups of (2 queries, key, value), rotary on 3/4 of a 16-dim head.
  const RopeShape s{.T = 50,
                    .B = 2,
                    .groups = 4,
                    .per_group = 4,
                    .rotate_per_group = 3,
                    .head_dim = 16,
                    .rotary_dim = 12,
                    .position_offset = 7,
                    .base = 10000.0f};
  const std::size_t n = 50 * 2 * 4 * 4 * 16;
  const Floats x = random_floats(n, 51);
  Floats y = x;
  rope_apply(s, y.data(), false);
  const Doubles y_ref = rope_reference(s, to_double(x), false);
  // fp32 angles: θ = 56·1 at the highest frequency carries ~4e-6 of rounding.
  EXPECT_TRUE(all_close(y, y_ref, 2e-5, Doubles(n, 1.0)));
  report("rope forward", y, y_ref);
  // Values (per_group index 3) and features past rotary_dim pass through bit for bit.
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t head = (i / 16) % 4, feature = i % 16;
    if (head == 3 || feature >= 12) {
      ASSERT_EQ(y[i], x[i]) << i;
    }
  }
  Floats back = y;
  rope_apply(s, back.data(), true);
  EXPECT_TRUE(all_close(back, to_double(x), 1e-5, Doubles(n, 1.0)));
}

// Megatron-Core's MLA RoPE (rope_utils.py with mla_rotary_interleaved) on one head's
// rotated features, in double: de-interleave x into [x0 x2 x4 … | x1 x3 x5 …], then rotate
// the halves by θ_i = position·base^(−2i/d), leaving the features in that order.
Doubles megatron_mla_rope(const Doubles& x, std::int64_t position, double base) {
  const std::size_t d = x.size(), half = d / 2;
  Doubles t(d), y(d);
  for (std::size_t i = 0; i < half; ++i) {
    t[i] = x[2 * i];
    t[i + half] = x[2 * i + 1];
  }
  for (std::size_t i = 0; i < half; ++i) {
    const double theta = static_cast<double>(position) *
                         std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    y[i] = t[i] * std::cos(theta) - t[i + half] * std::sin(theta);
    y[i + half] = t[i + half] * std::cos(theta) + t[i] * std::sin(theta);
  }
  return y;
}

// Multi-latent attention's decoupled RoPE: heads of 3 unrotated and 6 positional features
// (first_feature 3), the positional ones in adjacent pairs. The kernel gives Megatron's
// result with its features put back in their own order (feature 2i holds Megatron's i,
// 2i + 1 its i + 3), so every q·k between two rotated heads is Megatron's; the unrotated
// features and the heads left out pass bit for bit, and the inverse undoes it.
TEST(Rope, InterleavedPositionalFeaturesAreMegatronsMlaRopeInTheirOwnOrder) {
  const RopeShape s{.T = 5,
                    .B = 2,
                    .groups = 3,
                    .per_group = 2,
                    .rotate_per_group = 1,
                    .head_dim = 9,
                    .rotary_dim = 6,
                    .position_offset = 11,
                    .base = 10000.0f,
                    .first_feature = 3,
                    .interleaved = true};
  const std::size_t n = 5 * 2 * 3 * 2 * 9;
  const Floats x = random_floats(n, 57);
  Floats y = x;
  rope_apply(s, y.data(), false);
  for (std::int64_t t = 0; t < s.T; ++t)
    for (std::int64_t bh = 0; bh < s.B * s.groups * s.per_group; ++bh) {
      const std::size_t at = static_cast<std::size_t>((t * s.B * s.groups * s.per_group + bh) * 9);
      if (bh % 2 == 1) {
        for (std::size_t f = 0; f < 9; ++f) ASSERT_EQ(y[at + f], x[at + f]);
        continue;
      }
      for (std::size_t f = 0; f < 3; ++f) ASSERT_EQ(y[at + f], x[at + f]);
      const Doubles pe(x.begin() + static_cast<std::ptrdiff_t>(at + 3),
                       x.begin() + static_cast<std::ptrdiff_t>(at + 9));
      const Doubles meg = megatron_mla_rope(pe, s.position_offset + t, 10000.0);
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(y[at + 3 + 2 * i], meg[i], 2e-6) << t << " " << bh << " " << i;
        EXPECT_NEAR(y[at + 3 + 2 * i + 1], meg[i + 3], 2e-6) << t << " " << bh << " " << i;
      }
    }
  // q·k of two positions: the same under both orders.
  const Doubles qv = to_double(random_floats(6, 58)), kv = to_double(random_floats(6, 59));
  Floats qf(qv.begin(), qv.end()), kf(kv.begin(), kv.end());
  const RopeShape one{.T = 1,
                      .B = 1,
                      .groups = 1,
                      .per_group = 1,
                      .rotate_per_group = 1,
                      .head_dim = 6,
                      .rotary_dim = 6,
                      .position_offset = 0,
                      .base = 10000.0f,
                      .interleaved = true};
  RopeShape at_q = one, at_k = one;
  at_q.position_offset = 9;
  at_k.position_offset = 4;
  rope_apply(at_q, qf.data(), false);
  rope_apply(at_k, kf.data(), false);
  const Doubles mq = megatron_mla_rope(qv, 9, 10000.0), mk = megatron_mla_rope(kv, 4, 10000.0);
  double ours = 0, megatron = 0;
  for (std::size_t i = 0; i < 6; ++i) {
    ours += static_cast<double>(qf[i]) * static_cast<double>(kf[i]);
    megatron += mq[i] * mk[i];
  }
  EXPECT_NEAR(ours, megatron, 1e-6);
  Floats back = y;
  rope_apply(s, back.data(), true);
  EXPECT_TRUE(all_close(back, to_double(x), 1e-5, Doubles(n, 1.0)));
}

// ---------------------------------------------------------------- attention

// Naive grouped-query attention in double with the whole (Tq, Tk) matrix, in the layout
// of flash_attention.hpp; also returns the log-sum-exp of every row.
struct AttnRef {
  Doubles out, lse;
};

// A group's row: P query slots and the key slot of HD features, then the value slot of VD
// (= HD unless set: multi-latent attention).
struct Idx {
  FlashShape s;
  std::int64_t row() const { return (s.P + 1) * s.HD + s.vd(); }
  std::size_t src(std::int64_t t, std::int64_t b, std::int64_t g, std::int64_t slot,
                  std::int64_t d) const {
    return static_cast<std::size_t>(((t * s.B + b) * s.G + g) * row() + slot * s.HD + d);
  }
  std::size_t out(std::int64_t t, std::int64_t b, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((t * s.B + b) * s.G * s.P + h) * s.vd() + d);
  }
};

bool ref_visible(const FlashShape& s, std::int64_t i, std::int64_t j) {
  return s.mask == math::AttentionMask::none || s.k_offset + j <= s.q_offset + i;
}

AttnRef attention_reference(const FlashShape& s, const Doubles& q, const Doubles& kv) {
  const Idx I{s};
  const std::int64_t NH = s.G * s.P;
  AttnRef r{Doubles(static_cast<std::size_t>(s.Tq * s.B * NH * s.vd()), 0.0),
            Doubles(static_cast<std::size_t>(s.B * NH * s.Tq), -DBL_MAX)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  Doubles sc(static_cast<std::size_t>(s.Tk));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < NH; ++h) {
      const std::int64_t g = h / s.P, p = h % s.P;
      for (std::int64_t i = 0; i < s.Tq; ++i) {
        double m = -DBL_MAX;
        for (std::int64_t j = 0; j < s.Tk; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < s.HD; ++d)
            dot += q[I.src(i, b, g, p, d)] * kv[I.src(j, b, g, s.P, d)];
          sc[j] = dot * scale;
          if (ref_visible(s, i, j)) m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < s.Tk; ++j)
          sum += ref_visible(s, i, j) ? std::exp(sc[j] - m) : 0;
        if (sum == 0) continue;
        r.lse[static_cast<std::size_t>((b * NH + h) * s.Tq + i)] = m + std::log(sum);
        for (std::int64_t j = 0; j < s.Tk; ++j) {
          if (!ref_visible(s, i, j)) continue;
          const double pr = std::exp(sc[j] - m) / sum;
          for (std::int64_t d = 0; d < s.vd(); ++d)
            r.out[I.out(i, b, h, d)] += pr * kv[I.src(j, b, g, s.P + 1, d)];
        }
      }
    }
  return r;
}

// Gradients with respect to q_source (query slots) and kv_source (key/value slots).
struct AttnGrads {
  Doubles dq, dkv;
};

AttnGrads attention_reference_backward(const FlashShape& s, const Doubles& q, const Doubles& kv,
                                       const Doubles& dout) {
  const Idx I{s};
  const std::int64_t NH = s.G * s.P;
  AttnGrads gr{Doubles(q.size(), 0.0), Doubles(kv.size(), 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
  // Scratch rows allocated once (GCC 12 warns falsely about vectors made inside the loop).
  Doubles sc(static_cast<std::size_t>(s.Tk)), pr(sc.size()), dp(sc.size());
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < NH; ++h) {
      const std::int64_t g = h / s.P, p = h % s.P;
      for (std::int64_t i = 0; i < s.Tq; ++i) {
        std::fill(pr.begin(), pr.end(), 0.0);
        std::fill(dp.begin(), dp.end(), 0.0);
        double m = -DBL_MAX;
        for (std::int64_t j = 0; j < s.Tk; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < s.HD; ++d)
            dot += q[I.src(i, b, g, p, d)] * kv[I.src(j, b, g, s.P, d)];
          sc[j] = dot * scale;
          if (ref_visible(s, i, j)) m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < s.Tk; ++j)
          sum += ref_visible(s, i, j) ? std::exp(sc[j] - m) : 0;
        if (sum == 0) continue;
        double dot_p_dp = 0;
        for (std::int64_t j = 0; j < s.Tk; ++j) {
          if (!ref_visible(s, i, j)) continue;
          pr[j] = std::exp(sc[j] - m) / sum;
          for (std::int64_t d = 0; d < s.vd(); ++d) {
            dp[j] += dout[I.out(i, b, h, d)] * kv[I.src(j, b, g, s.P + 1, d)];
            gr.dkv[I.src(j, b, g, s.P + 1, d)] += pr[j] * dout[I.out(i, b, h, d)];
          }
          dot_p_dp += pr[j] * dp[j];
        }
        for (std::int64_t j = 0; j < s.Tk; ++j) {
          if (!ref_visible(s, i, j)) continue;
          const double ds = pr[j] * (dp[j] - dot_p_dp) * scale;
          for (std::int64_t d = 0; d < s.HD; ++d) {
            gr.dq[I.src(i, b, g, p, d)] += ds * kv[I.src(j, b, g, s.P, d)];
            gr.dkv[I.src(j, b, g, s.P, d)] += ds * q[I.src(i, b, g, p, d)];
          }
        }
      }
    }
  return gr;
}

std::size_t source_size(const FlashShape& s, std::int64_t T) {
  return static_cast<std::size_t>(T * s.B * s.G * Idx{s}.row());
}

TEST(GqaAttention, ReferenceBackwardMatchesFiniteDifferences) {
  // Separate query and key/value blocks with offsets, 2 groups of 2 queries.
  const FlashShape s{
      .B = 1, .Tq = 3, .Tk = 4, .G = 2, .P = 2, .HD = 3, .q_offset = 2, .k_offset = 1};
  const Doubles q = to_double(random_floats(source_size(s, s.Tq), 61));
  const Doubles kv = to_double(random_floats(source_size(s, s.Tk), 62));
  const Doubles w = to_double(random_floats(static_cast<std::size_t>(3 * 4 * 3), 63));
  const AttnGrads g = attention_reference_backward(s, q, kv, w);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(attention_reference(s, v, kv).out, w); }, q,
      g.dq));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(attention_reference(s, q, v).out, w); }, kv,
      g.dkv));
}

// Runs the flash kernel forward and backward on `s` and compares with the reference.
void check_flash(const FlashShape& s, bool same_source, const char* name) {
  const std::size_t nq = source_size(s, s.Tq), nk = source_size(s, s.Tk);
  const Floats q = random_floats(nq, 71, -2, 2);
  const Floats kv = same_source ? q : random_floats(nk, 72, -2, 2);
  const std::size_t no = static_cast<std::size_t>(s.Tq * s.B * s.G * s.P * s.vd());
  const Floats dout = random_floats(no, 73);
  Floats out(no), lse(static_cast<std::size_t>(s.B * s.G * s.P * s.Tq));
  flash_attention_forward(s, q.data(), kv.data(), out.data(), lse.data());
  const AttnRef ref = attention_reference(s, to_double(q), to_double(kv));
  EXPECT_TRUE(all_close(out, ref.out, 1e-5, rms_scale(ref.out))) << name;
  EXPECT_TRUE(all_close(lse, ref.lse, 1e-6, Doubles(lse.size(), 1.0))) << name;
  // Slots an output does not own keep their sentinel (the kernel leaves them alone).
  constexpr float kSentinel = 7.0f;
  Floats dq(nq, kSentinel), dkv(nk, kSentinel);
  Floats& dkv_target = same_source ? dq : dkv;
  flash_attention_backward(s, dout.data(), q.data(), kv.data(), out.data(), lse.data(), dq.data(),
                           dkv_target.data());
  const AttnGrads g = attention_reference_backward(s, to_double(q), to_double(kv), to_double(dout));
  Doubles dq_ref = g.dq, dkv_ref = g.dkv;
  const auto query_slot = [&](std::size_t i) {
    return static_cast<std::int64_t>(i) % Idx{s}.row() < s.P * s.HD;
  };
  for (std::size_t i = 0; i < nq; ++i) {
    if (same_source)
      dq_ref[i] += dkv_ref[i];
    else if (!query_slot(i))
      dq_ref[i] = kSentinel;
  }
  if (!same_source)
    for (std::size_t i = 0; i < nk; ++i)
      if (query_slot(i)) dkv_ref[i] = kSentinel;
  EXPECT_TRUE(all_close(dq, dq_ref, 1e-4, rms_scale(dq_ref))) << name;
  if (!same_source) {
    EXPECT_TRUE(all_close(dkv, dkv_ref, 1e-4, rms_scale(dkv_ref))) << name;
  }
  std::printf("[ max error ] flash %-22s out %.3g lse %.3g dqkv %.3g%s\n", name,
              max_abs_error(out, ref.out), max_abs_error(lse, ref.lse), max_abs_error(dq, dq_ref),
              same_source ? "" : " (dq)");
  if (!same_source) report("  dkv", dkv, dkv_ref);
}

TEST(FlashAttention, CausalSelfAttentionWithGroupsMatchesReference) {
  // 70 and 131 positions cross the 64-row blocks; 2 groups of 3 queries.
  check_flash({.B = 2, .Tq = 70, .Tk = 70, .G = 2, .P = 3, .HD = 16}, true, "causal gqa T=70");
  check_flash({.B = 1, .Tq = 131, .Tk = 131, .G = 1, .P = 4, .HD = 8}, true, "causal mqa T=131");
  check_flash({.B = 2, .Tq = 65, .Tk = 65, .G = 3, .P = 1, .HD = 8}, true, "causal mha T=65");
}

TEST(FlashAttention, BlocksWithOffsetsAndMasksMatchReference) {
  // Ring-attention blocks: a query block later in the sequence against an earlier,
  // partly overlapping key block (causal), and a wholly past block (no mask).
  check_flash(
      {.B = 1, .Tq = 40, .Tk = 90, .G = 2, .P = 2, .HD = 8, .q_offset = 100, .k_offset = 30}, false,
      "causal offsets");
  check_flash({.B = 2,
               .Tq = 33,
               .Tk = 70,
               .G = 1,
               .P = 2,
               .HD = 8,
               .q_offset = 0,
               .k_offset = 0,
               .mask = math::AttentionMask::none},
              false, "no mask");
}

TEST(FlashAttention, RowsThatSeeNoKeyAreZeroAndGetNoGradient) {
  // Keys at positions 50.. are all in the future of queries 0..9.
  const FlashShape s{
      .B = 1, .Tq = 10, .Tk = 8, .G = 1, .P = 2, .HD = 4, .q_offset = 0, .k_offset = 50};
  const Floats q = random_floats(source_size(s, 10), 81), kv = random_floats(source_size(s, 8), 82);
  Floats out(10 * 2 * 4, 1.0f), lse(20);
  flash_attention_forward(s, q.data(), kv.data(), out.data(), lse.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  for (float v : lse) EXPECT_EQ(v, math::kEmptyRowLse);
  const Floats dout = random_floats(out.size(), 83);
  Floats dq(q.size(), NAN), dkv(kv.size(), NAN);
  flash_attention_backward(s, dout.data(), q.data(), kv.data(), out.data(), lse.data(), dq.data(),
                           dkv.data());
  const Idx I{s};
  for (std::int64_t t = 0; t < 10; ++t)
    for (std::int64_t p = 0; p < 2; ++p)
      for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(dq[I.src(t, 0, 0, p, d)], 0.0f);
  for (std::int64_t t = 0; t < 8; ++t)
    for (std::int64_t slot = 2; slot < 4; ++slot)
      for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(dkv[I.src(t, 0, 0, slot, d)], 0.0f);
}

// Ring attention as context parallelism runs it: the queries of one chunk meet the keys
// block by block, each block holding keys and values only, the later calls extending the
// earlier ones' output and lse (accumulate); backward adds each block's share into dq.
// Together they equal one call over the whole sequence in the grouped layout.
TEST(FlashAttention, KeyValueBlocksMergedInTurnEqualOneCall) {
  const std::int64_t B = 2, G = 2, P = 2, HD = 8, T = 96, Tq = 32, block = 32;
  const FlashShape whole{.B = B, .Tq = Tq, .Tk = T, .G = G, .P = P, .HD = HD, .q_offset = 64};
  const Floats qkv = random_floats(source_size(whole, T), 91, -2, 2);
  const auto at = [&](std::int64_t t, std::int64_t b, std::int64_t g, std::int64_t slot,
                      std::int64_t width) { return (((t * B + b) * G + g) * width + slot) * HD; };
  // The queries: positions 64..95 of the grouped tensor.
  const Floats q(qkv.begin() + at(64, 0, 0, 0, P + 2), qkv.end());
  const std::size_t no = static_cast<std::size_t>(Tq * B * G * P * HD);
  Floats out(no), lse(static_cast<std::size_t>(B * G * P * Tq));
  flash_attention_forward(whole, q.data(), qkv.data(), out.data(), lse.data());
  // Blocks of keys and values only, (block, B, G, 2, HD).
  std::vector<Floats> kv(3, Floats(static_cast<std::size_t>(block * B * G * 2 * HD)));
  for (std::int64_t k = 0; k < 3; ++k)
    for (std::int64_t t = 0; t < block; ++t)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t g = 0; g < G; ++g)
          for (std::int64_t slot = 0; slot < 2; ++slot)
            std::copy_n(qkv.begin() + at(k * block + t, b, g, P + slot, P + 2), HD,
                        kv[k].begin() + at(t, b, g, slot, 2));
  auto block_shape = [&](std::int64_t k, bool accumulate) {
    FlashShape s{.B = B,
                 .Tq = Tq,
                 .Tk = block,
                 .G = G,
                 .P = P,
                 .HD = HD,
                 .q_offset = 64,
                 .k_offset = k * block,
                 .kv_only = true,
                 .accumulate = accumulate};
    if (k < 2) s.mask = math::AttentionMask::none;  // wholly in the past
    return s;
  };
  Floats ring_out(no, 5.0f), ring_lse(lse.size(), 5.0f);
  // The diagonal block first (as the ring does), then the earlier ones.
  for (std::int64_t k : {2, 0, 1})
    flash_attention_forward(block_shape(k, k != 2), q.data(), kv[k].data(), ring_out.data(),
                            ring_lse.data());
  const Doubles out_ref = to_double(out), lse_ref = to_double(lse);
  EXPECT_TRUE(all_close(ring_out, out_ref, 1e-5, rms_scale(out_ref)));
  EXPECT_TRUE(all_close(ring_lse, lse_ref, 1e-5, Doubles(lse.size(), 1.0)));

  const Floats dout = random_floats(no, 92);
  Floats dqkv(qkv.size(), 0.0f), dq(q.size(), 0.0f);
  FlashShape q_only = whole;  // one call: dq into its own tensor, dk dv into the whole one
  flash_attention_backward(q_only, dout.data(), q.data(), qkv.data(), out.data(), lse.data(),
                           dq.data(), dqkv.data());
  // dq adds up over the blocks (the first call writes it, the others accumulate); each
  // block's dk dv is its share of the whole call's.
  Floats ring_dq(q.size(), 0.0f);
  for (std::int64_t k : {2, 0, 1}) {
    Floats dkv(kv[k].size(), 9.0f);
    FlashShape s = block_shape(k, k != 2);
    if (s.accumulate) std::fill(dkv.begin(), dkv.end(), 0.0f);  // accumulate adds into it
    flash_attention_backward(s, dout.data(), q.data(), kv[k].data(), out.data(), lse.data(),
                             ring_dq.data(), dkv.data());
    Doubles dkv_ref(dkv.size());
    for (std::int64_t t = 0; t < block; ++t)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t g = 0; g < G; ++g)
          for (std::int64_t slot = 0; slot < 2; ++slot)
            for (std::int64_t d = 0; d < HD; ++d)
              dkv_ref[static_cast<std::size_t>(at(t, b, g, slot, 2) + d)] =
                  dqkv[static_cast<std::size_t>(at(k * block + t, b, g, P + slot, P + 2) + d)];
    EXPECT_TRUE(all_close(dkv, dkv_ref, 1e-5, rms_scale(dkv_ref))) << "block " << k;
  }
  Doubles dq_ref = to_double(dq);
  for (std::size_t i = 0; i < dq_ref.size(); ++i)
    if (static_cast<std::int64_t>(i) / HD % (P + 2) >= P) dq_ref[i] = 0;  // key/value slots
  EXPECT_TRUE(all_close(ring_dq, dq_ref, 1e-5, rms_scale(dq_ref)));
}

// Multi-latent attention: query and key heads 12 wide (DeepSeek's 128 + 64 in miniature),
// value heads 8 wide; the reference's backward against central differences first, then the
// kernel across the 64-row blocks, as self-attention and as separate blocks with offsets,
// multi-head as MLA runs it and with groups (the layout allows both).
TEST(FlashAttention, ValueHeadsNarrowerThanQueryAndKeyHeadsMatchReference) {
  const FlashShape small{
      .B = 1, .Tq = 3, .Tk = 4, .G = 2, .P = 1, .HD = 5, .VD = 3, .q_offset = 2, .k_offset = 1};
  const Doubles q = to_double(random_floats(source_size(small, small.Tq), 64));
  const Doubles kv = to_double(random_floats(source_size(small, small.Tk), 65));
  const Doubles w = to_double(random_floats(static_cast<std::size_t>(3 * 2 * 3), 66));
  const AttnGrads g = attention_reference_backward(small, q, kv, w);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(attention_reference(small, v, kv).out, w); }, q,
      g.dq));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) { return weighted_sum(attention_reference(small, q, v).out, w); }, kv,
      g.dkv));
  check_flash({.B = 2, .Tq = 70, .Tk = 70, .G = 3, .P = 1, .HD = 12, .VD = 8}, true, "mla T=70");
  check_flash({.B = 1, .Tq = 65, .Tk = 65, .G = 2, .P = 2, .HD = 6, .VD = 10}, true,
              "gqa vd > hd T=65");
  check_flash({.B = 1,
               .Tq = 40,
               .Tk = 90,
               .G = 2,
               .P = 1,
               .HD = 12,
               .VD = 8,
               .q_offset = 100,
               .k_offset = 30},
              false, "mla offsets");
}

TEST(FlashAttention, VisiblePairsCountTheCausalTriangle) {
  // T(T+1)/2 pairs for causal self-attention; Tq·Tk without a mask.
  EXPECT_EQ(flash_visible_pairs({.B = 1, .Tq = 100, .Tk = 100, .G = 1, .P = 1, .HD = 1}), 5050.0);
  EXPECT_EQ(
      flash_visible_pairs(
          {.B = 1, .Tq = 10, .Tk = 30, .G = 1, .P = 1, .HD = 1, .mask = math::AttentionMask::none}),
      300.0);
}

}  // namespace
}  // namespace tandem::kernels::cpu
