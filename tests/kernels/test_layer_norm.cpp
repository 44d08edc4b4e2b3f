// Layer norm forward and backward against a double reference; the reference backward
// against central differences; accumulation into dγ, dβ; determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/layer_norm.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;
using testing::rms_scale;

constexpr double kEps = 1e-5;

struct Ref {
  Doubles out, mean, rstd;
};

Ref reference_forward(LayerNormShape s, const Doubles& x, const Doubles& gamma,
                      const Doubles& beta) {
  Ref r{Doubles(x.size()), Doubles(s.rows), Doubles(s.rows)};
  for (std::int64_t i = 0; i < s.rows; ++i) {
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < s.C; ++c) mean += x[i * s.C + c];
    mean /= static_cast<double>(s.C);
    for (std::int64_t c = 0; c < s.C; ++c) var += (x[i * s.C + c] - mean) * (x[i * s.C + c] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(s.C) + kEps);
    for (std::int64_t c = 0; c < s.C; ++c)
      r.out[i * s.C + c] = (x[i * s.C + c] - mean) * rstd * gamma[c] + beta[c];
    r.mean[i] = mean;
    r.rstd[i] = rstd;
  }
  return r;
}

struct Grads {
  Doubles dx, dgamma, dbeta;
  Doubles dx_scale;  // Σ |terms| of dx: dx cancels to ~0 when C = 1
};

Grads reference_backward(LayerNormShape s, const Doubles& x, const Doubles& gamma,
                         const Doubles& dy) {
  const Ref f = reference_forward(s, x, gamma, Doubles(s.C, 0.0));
  Grads g{Doubles(x.size()), Doubles(s.C, 0.0), Doubles(s.C, 0.0), Doubles(x.size())};
  for (std::int64_t i = 0; i < s.rows; ++i) {
    double mean_dnorm = 0, mean_dnorm_norm = 0;
    for (std::int64_t c = 0; c < s.C; ++c) {
      const double norm = (x[i * s.C + c] - f.mean[i]) * f.rstd[i];
      const double dnorm = dy[i * s.C + c] * gamma[c];
      mean_dnorm += dnorm / static_cast<double>(s.C);
      mean_dnorm_norm += dnorm * norm / static_cast<double>(s.C);
      g.dgamma[c] += dy[i * s.C + c] * norm;
      g.dbeta[c] += dy[i * s.C + c];
    }
    for (std::int64_t c = 0; c < s.C; ++c) {
      const double norm = (x[i * s.C + c] - f.mean[i]) * f.rstd[i];
      g.dx[i * s.C + c] =
          (dy[i * s.C + c] * gamma[c] - mean_dnorm - norm * mean_dnorm_norm) * f.rstd[i];
      g.dx_scale[i * s.C + c] = (std::fabs(dy[i * s.C + c] * gamma[c]) + std::fabs(mean_dnorm) +
                                 std::fabs(norm * mean_dnorm_norm)) *
                                f.rstd[i];
    }
  }
  return g;
}

TEST(LayerNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const LayerNormShape s{.rows = 3, .C = 7};
  const Doubles x = testing::to_double(random_floats(21, 1));
  const Doubles gamma = testing::to_double(random_floats(7, 2));
  const Doubles beta = testing::to_double(random_floats(7, 3));
  const Doubles w = testing::to_double(random_floats(21, 4));
  const Grads g = reference_backward(s, x, gamma, w);
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) {
        return testing::weighted_sum(reference_forward(s, v, gamma, beta).out, w);
      },
      x, g.dx));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) {
        return testing::weighted_sum(reference_forward(s, x, v, beta).out, w);
      },
      gamma, g.dgamma));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& v) {
        return testing::weighted_sum(reference_forward(s, x, gamma, v).out, w);
      },
      beta, g.dbeta));
}

class LayerNormShapes : public ::testing::TestWithParam<LayerNormShape> {};

TEST_P(LayerNormShapes, ForwardAndBackwardMatchDoubleReference) {
  const LayerNormShape s = GetParam();
  const std::size_t n = static_cast<std::size_t>(s.rows * s.C);
  // An offset mean exercises the two-pass variance.
  const Floats x = random_floats(n, 5, 2.0f, 4.0f);
  const Floats gamma = random_floats(s.C, 6, 0.5f, 1.5f), beta = random_floats(s.C, 7);
  const Floats dy = random_floats(n, 8);
  Floats out(n), mean(s.rows), rstd(s.rows), dx(n);
  const Floats dgamma0 = random_floats(s.C, 9), dbeta0 = random_floats(s.C, 10);
  Floats dgamma = dgamma0, dbeta = dbeta0;
  layer_norm_forward(s, x.data(), gamma.data(), beta.data(), out.data(), mean.data(), rstd.data());
  layer_norm_backward(s, dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                      dgamma.data(), dbeta.data());

  const Doubles xd = testing::to_double(x), gd = testing::to_double(gamma);
  const Ref ref = reference_forward(s, xd, gd, testing::to_double(beta));
  EXPECT_TRUE(all_close(out, ref.out, 1e-5, rms_scale(ref.out)));
  EXPECT_TRUE(all_close(mean, ref.mean, 1e-5));
  EXPECT_TRUE(all_close(rstd, ref.rstd, 1e-5));
  Grads g = reference_backward(s, xd, gd, testing::to_double(dy));
  for (std::int64_t c = 0; c < s.C; ++c) {  // accumulated onto the initial values
    g.dgamma[c] += dgamma0[c];
    g.dbeta[c] += dbeta0[c];
  }
  EXPECT_TRUE(all_close(dx, g.dx, 1e-5, g.dx_scale));
  EXPECT_TRUE(all_close(dgamma, g.dgamma, 1e-5, rms_scale(g.dgamma)));
  EXPECT_TRUE(all_close(dbeta, g.dbeta, 1e-5, rms_scale(g.dbeta)));
}

INSTANTIATE_TEST_SUITE_P(Kernels, LayerNormShapes,
                         ::testing::Values(LayerNormShape{.rows = 1, .C = 1},
                                           LayerNormShape{.rows = 7, .C = 5},
                                           LayerNormShape{.rows = 65, .C = 130},
                                           LayerNormShape{.rows = 300, .C = 768}));

TEST(LayerNorm, RepeatedRunsAreBitwiseEqual) {
  const LayerNormShape s{.rows = 200, .C = 200};
  const std::size_t n = 200 * 200;
  const Floats x = random_floats(n, 11), gamma = random_floats(200, 12),
               beta = random_floats(200, 13);
  const Floats dy = random_floats(n, 14);
  Floats results[2];
  for (Floats& r : results) {
    Floats out(n), mean(200), rstd(200), dx(n), dgamma(200, 0.0f), dbeta(200, 0.0f);
    layer_norm_forward(s, x.data(), gamma.data(), beta.data(), out.data(), mean.data(),
                       rstd.data());
    layer_norm_backward(s, dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                        dgamma.data(), dbeta.data());
    r = out;
    r.insert(r.end(), dx.begin(), dx.end());
    r.insert(r.end(), dgamma.begin(), dgamma.end());
    r.insert(r.end(), dbeta.begin(), dbeta.end());
  }
  EXPECT_TRUE(testing::bitwise_equal(results[0], results[1]));
}

}  // namespace
}  // namespace tandem::kernels::cpu
