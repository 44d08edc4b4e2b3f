// Helpers of the kernel tests: seeded random buffers, float-vs-double comparisons with
// an error scale, and a central-difference gradient check of double reference code.
// Every kernel test compares the float kernel with a naive double reference written in
// the test, and checks that reference's backward against finite differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

namespace tandem::kernels::testing {

using Floats = std::vector<float>;
using Doubles = std::vector<double>;

// n values uniform in [lo, hi), the same for the same seed.
inline Floats random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// n token ids uniform in [0, vocab), the same for the same seed.
inline std::vector<std::int32_t> random_ids(std::size_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, vocab - 1);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = static_cast<std::int32_t>(dist(rng));
  return t;
}

inline Doubles to_double(const Floats& v) {
  return Doubles(v.begin(), v.end());
}

// Each |actual[i] - expected[i]| ≤ rtol·(|expected[i]| + scale[i]); scale is the size of
// the terms that were summed (where cancellation makes |expected| meaningless), or empty.
inline ::testing::AssertionResult all_close(const Floats& actual, const Doubles& expected,
                                            double rtol, const Doubles& scale = {}) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " vs " << expected.size();
  std::size_t worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double bound = rtol * (std::fabs(expected[i]) + (scale.empty() ? 0.0 : scale[i])) + 1e-30;
    const double ratio = std::fabs(static_cast<double>(actual[i]) - expected[i]) / bound;
    if (!(ratio <= worst_ratio)) {  // also catches NaN
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst << ": " << actual[worst] << " vs " << expected[worst] << " (error "
         << worst_ratio << "× the bound, rtol " << rtol << ")";
}

// A per-element scale equal to the RMS of the reference (for outputs whose elements can
// cancel to near zero while their neighbours are O(1)).
inline Doubles rms_scale(const Doubles& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return Doubles(v.size(), v.empty() ? 0.0 : std::sqrt(s / static_cast<double>(v.size())));
}

// Checks grad = d loss / d x by central differences of loss at x (double precision).
inline ::testing::AssertionResult matches_finite_differences(
    const std::function<double(const Doubles&)>& loss, Doubles x, const Doubles& grad,
    double h = 1e-5, double rtol = 1e-6) {
  double norm = 0;
  for (double g : grad) norm = std::max(norm, std::fabs(g));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss(x);
    x[i] = saved - h;
    const double down = loss(x);
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    if (std::fabs(numeric - grad[i]) > rtol * (std::fabs(grad[i]) + norm) + 1e-12) {
      return ::testing::AssertionFailure() << "d loss / d x[" << i << "]: analytic " << grad[i]
                                           << ", central difference " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

// Σ w·y, the scalar loss whose gradient with respect to y is w.
inline double weighted_sum(const Doubles& y, const Doubles& w) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
  return s;
}

inline bool bitwise_equal(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof(float)) == 0;
         });
}

}  // namespace tandem::kernels::testing
