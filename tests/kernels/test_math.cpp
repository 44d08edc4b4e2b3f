// The shared per-element math (kernels/math/): exp and tanh approximations across their
// range, the online-softmax combination rule.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/math/exp.hpp"
#include "kernels/math/softmax.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::math {
namespace {

TEST(Math, ExpApproxRelativeErrorBelow3e7) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    const float xf = static_cast<float>(x);
    const double exact = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(exp_approx(xf) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(exp_approx(-INFINITY), 0.0f);
}

TEST(Math, TanhApproxAbsoluteErrorBelow3e7) {
  double worst = 0;
  for (double x = -20.0; x <= 20.0; x += 0.0007) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, std::fabs(tanh_approx(xf) - std::tanh(static_cast<double>(xf))));
  }
  EXPECT_LT(worst, 3e-7);
}

TEST(Math, SoftmaxStatesOfShardsCombineToTheWhole) {
  const testing::Floats x = testing::random_floats(100, 1, -30.0f, 30.0f);
  SoftmaxState whole, left, right;
  for (std::size_t i = 0; i < x.size(); ++i) {
    whole = softmax_push(whole, x[i]);
    (i < 37 ? left : right) = softmax_push(i < 37 ? left : right, x[i]);
  }
  double max = -1e300, sum = 0;
  for (const float v : x) max = std::max(max, static_cast<double>(v));
  for (const float v : x) sum += std::exp(v - max);
  const SoftmaxState combined = softmax_combine(left, right);
  EXPECT_EQ(combined.max, static_cast<float>(max));
  EXPECT_NEAR(combined.sum, sum, 1e-5 * sum);
  EXPECT_NEAR(whole.sum, sum, 1e-5 * sum);
  // The empty state is neutral.
  EXPECT_EQ(softmax_combine(SoftmaxState{}, left).sum, left.sum);
}

}  // namespace
}  // namespace tandem::kernels::math
