// AdamW over several steps against a double reference of PyTorch's AdamW, and the
// sum of squares behind gradient clipping; determinism across thread counts.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/adam.hpp"
#include "kernels/cpu/threads.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;

// torch.optim.AdamW.step for one element, in double.
void reference_step(double& p, double g, double& m, double& v, const math::AdamHyperparameters& h,
                    int step) {
  p *= 1.0 - static_cast<double>(h.lr) * h.weight_decay;
  m = h.beta1 * m + (1.0 - h.beta1) * g;
  v = h.beta2 * v + (1.0 - h.beta2) * g * g;
  const double c1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double c2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  p -= h.lr / c1 * m / (std::sqrt(v) / std::sqrt(c2) + h.epsilon);
}

TEST(Adam, SeveralStepsMatchDoubleReference) {
  const math::AdamHyperparameters h{
      .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f, .weight_decay = 0.1f};
  for (const std::int64_t n : {1, 7, 65, 100003}) {
    const std::size_t un = static_cast<std::size_t>(n);
    Floats p = random_floats(un, 1), m(un, 0.0f), v(un, 0.0f);
    Doubles pr = testing::to_double(p), mr(un, 0.0), vr(un, 0.0);
    for (int step = 1; step <= 5; ++step) {
      const Floats g = random_floats(un, 10 + step, -0.1f, 0.1f);
      adamw(p.data(), g.data(), m.data(), v.data(), n, h, step);
      for (std::size_t i = 0; i < un; ++i) reference_step(pr[i], g[i], mr[i], vr[i], h, step);
    }
    // Parameters move by ~lr per step: compare with a scale of 1 (their size).
    EXPECT_TRUE(all_close(p, pr, 1e-6, Doubles(un, 1.0))) << n;
    EXPECT_TRUE(all_close(m, mr, 1e-5, testing::rms_scale(mr))) << n;
    EXPECT_TRUE(all_close(v, vr, 1e-5, testing::rms_scale(vr))) << n;
  }
}

TEST(Adam, FirstStepMovesEachParameterByLearningRate) {
  // With bias correction the first update is lr·g/|g| (ε aside), whatever the β's.
  Floats p = {1.0f, -2.0f}, m = {0, 0}, v = {0, 0};
  const Floats g = {0.3f, -0.001f};
  adamw(p.data(), g.data(), m.data(), v.data(), 2, {.lr = 0.01f}, 1);
  EXPECT_NEAR(p[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[1], -1.99f, 1e-5);
}

TEST(SumSquares, MatchesDoubleReferenceAndIgnoresThreadCount) {
  for (const std::int64_t n : {0, 1, 7, 65, 200001}) {
    const Floats x = random_floats(static_cast<std::size_t>(n), 2);
    double ref = 0;
    for (const float v : x) ref += static_cast<double>(v) * v;
    const double got = sum_squares(x.data(), n);
    EXPECT_NEAR(got, ref, 1e-12 * (ref + 1));
    const int threads = num_threads();
    set_num_threads(1);
    EXPECT_EQ(sum_squares(x.data(), n), got);
    set_num_threads(threads);
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu
