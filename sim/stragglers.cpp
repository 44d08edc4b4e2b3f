#include "sim/stragglers.hpp"

#include <cmath>
#include <numbers>

namespace tandem::sim {

double expected_max_of_normals(int n) {
  if (n <= 1) return 0;
  // E[max] = ∫ x · n · φ(x) · Φ(x)^(n−1) dx, by Simpson's rule on [−9, 9] (the integrand is
  // below 1e-15 outside it for any n up to millions).
  const int steps = 4000;  // even
  const double lo = -9, hi = 9, h = (hi - lo) / steps;
  const auto f = [n](double x) {
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    return x * n * pdf * std::pow(cdf, n - 1);
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < steps; ++i) sum += f(lo + i * h) * (i % 2 == 1 ? 4 : 2);
  return sum * h / 3;
}

double straggler_wait_fraction(double spread, int nodes) {
  return spread > 0 ? spread * expected_max_of_normals(nodes) : 0;
}

}  // namespace tandem::sim
