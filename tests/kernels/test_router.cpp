// The MoE top-k router: probabilities, chosen experts, gates, counts and the Megatron
// load-balancing loss against a double-precision reference on seeded logits; ties go to
// the lower expert index; a balanced load gives exactly the coefficient (by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "kernels/cpu/router.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;

struct Routed {
  Floats probs, gates;
  std::vector<std::int32_t> top;
  std::vector<std::int64_t> counts;
};

Routed route(RouterShape s, const Floats& logits) {
  Routed r{Floats(static_cast<std::size_t>(s.tokens * s.experts)),
           Floats(static_cast<std::size_t>(s.tokens * s.top_k)),
           std::vector<std::int32_t>(static_cast<std::size_t>(s.tokens * s.top_k)),
           std::vector<std::int64_t>(static_cast<std::size_t>(s.experts))};
  router_top_k(s, logits.data(), r.probs.data(), r.top.data(), r.gates.data(), r.counts.data());
  return r;
}

// The reference, in double: a full sort of each row (stable on the expert index).
struct Reference {
  Doubles probs, gates;
  std::vector<std::int32_t> top;
  std::vector<std::int64_t> counts;
  double aux = 0;
};

Reference reference(RouterShape s, const Floats& logits, double coeff) {
  const auto T = static_cast<std::size_t>(s.tokens), E = static_cast<std::size_t>(s.experts),
             k = static_cast<std::size_t>(s.top_k);
  Reference r{Doubles(T * E), Doubles(T * k), std::vector<std::int32_t>(T * k),
              std::vector<std::int64_t>(E, 0), 0};
  for (std::size_t t = 0; t < T; ++t) {
    const float* x = logits.data() + t * E;
    double max = -1e300, sum = 0;
    for (std::size_t e = 0; e < E; ++e) max = std::max(max, double(x[e]));
    for (std::size_t e = 0; e < E; ++e) sum += std::exp(double(x[e]) - max);
    for (std::size_t e = 0; e < E; ++e) r.probs[t * E + e] = std::exp(double(x[e]) - max) / sum;
    std::vector<std::int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return x[a] > x[b]; });
    double top_max = -1e300, top_sum = 0;
    for (std::size_t j = 0; j < k; ++j) top_max = std::max(top_max, double(x[order[j]]));
    for (std::size_t j = 0; j < k; ++j) top_sum += std::exp(double(x[order[j]]) - top_max);
    for (std::size_t j = 0; j < k; ++j) {
      const auto e = static_cast<std::size_t>(order[j]);
      r.top[t * k + j] = order[j];
      ++r.counts[e];
      r.gates[t * k + j] =
          s.pre_softmax ? r.probs[t * E + e] : std::exp(double(x[e]) - top_max) / top_sum;
    }
  }
  double dot = 0;
  for (std::size_t e = 0; e < E; ++e) {
    double p = 0;
    for (std::size_t t = 0; t < T; ++t) p += r.probs[t * E + e];
    dot += p * static_cast<double>(r.counts[e]);
  }
  r.aux = coeff * double(E) / (double(k) * double(T) * double(T)) * dot;
  return r;
}

TEST(Router, MatchesTheDoubleReferenceOnSeededLogits) {
  for (const bool pre_softmax : {false, true})
    for (const auto& [T, E, k] :
         {std::tuple{64, 8, 2}, std::tuple{33, 16, 4}, std::tuple{7, 4, 1}, std::tuple{5, 6, 6}}) {
      const RouterShape s{T, E, k, pre_softmax};
      // Distinct logits, wide enough apart that float rounding cannot reorder them.
      const Floats logits = random_floats(static_cast<std::size_t>(T * E), 42 + T, -4.0f, 4.0f);
      const Routed got = route(s, logits);
      const Reference want = reference(s, logits, 1e-2);
      EXPECT_EQ(got.top, want.top) << T << "×" << E << " top " << k;
      EXPECT_EQ(got.counts, want.counts);
      EXPECT_TRUE(all_close(got.probs, want.probs, 1e-6));
      EXPECT_TRUE(all_close(got.gates, want.gates, 1e-6));
      const float aux = router_aux_loss(s, got.probs.data(), got.counts.data(), 1e-2f);
      EXPECT_NEAR(aux, want.aux, 1e-6 * want.aux);
    }
}

TEST(Router, TiesGoToTheLowerExpertIndex) {
  // Row 0: all equal. Row 1: experts 1 and 3 tie for best, 0 and 2 tie below them.
  const Floats logits{0, 0, 0, 0, 0.5f, 2, 0.5f, 2};
  const Routed r = route({2, 4, 3, false}, logits);
  EXPECT_EQ(r.top, (std::vector<std::int32_t>{0, 1, 2, 1, 3, 0}));
  EXPECT_EQ(r.counts, (std::vector<std::int64_t>{2, 2, 1, 1}));
  // Equal logits, equal gates: a third each in row 0.
  EXPECT_FLOAT_EQ(r.gates[0], 1.0f / 3);
  EXPECT_FLOAT_EQ(r.gates[1], 1.0f / 3);
}

TEST(Router, BalancedLoadGivesTheCoefficient) {
  // Token t prefers expert t (a permutation): every expert gets one token and every
  // expert's probabilities sum to the same T/E = 1 over the tokens, so
  // aux = coeff · E / (k · T²) · Σ_e 1 · 1 = coeff · 4 / 16 · 4 = coeff.
  Floats logits(16, 0.0f);
  for (int t = 0; t < 4; ++t) logits[static_cast<std::size_t>(t * 4 + t)] = 3.0f;
  const RouterShape s{4, 4, 1, false};
  const Routed r = route(s, logits);
  EXPECT_EQ(r.counts, (std::vector<std::int64_t>{1, 1, 1, 1}));
  EXPECT_NEAR(router_aux_loss(s, r.probs.data(), r.counts.data(), 0.01f), 0.01f, 1e-8);
  // Every token prefers expert 0 instead: counts (4, 0, 0, 0) and expert 0's probabilities
  // sum to 4·p0, so aux = coeff · 4/16 · (4·p0 · 4), above coeff as p0 > 1/4.
  Floats skewed(16, 0.0f);
  for (int t = 0; t < 4; ++t) skewed[static_cast<std::size_t>(t * 4)] = 3.0f;
  const Routed q = route(s, skewed);
  EXPECT_EQ(q.counts, (std::vector<std::int64_t>{4, 0, 0, 0}));
  const double p0 = std::exp(3.0) / (std::exp(3.0) + 3);  // each token's probability of 0
  EXPECT_NEAR(router_aux_loss(s, q.probs.data(), q.counts.data(), 0.01f),
              0.01 * 4.0 / 16 * (4 * p0 * 4), 1e-7);
}

TEST(Router, RefusesTopKOutsideTheExperts) {
  Floats logits(8), probs(8), gates(8);
  std::vector<std::int32_t> top(8);
  std::vector<std::int64_t> counts(4);
  EXPECT_THROW(router_top_k({2, 4, 5, false}, logits.data(), probs.data(), top.data(), gates.data(),
                            counts.data()),
               std::invalid_argument);
  EXPECT_THROW(router_top_k({2, 4, 0, false}, logits.data(), probs.data(), top.data(), gates.data(),
                            counts.data()),
               std::invalid_argument);
}

// router_backward against central differences in double of
//   L(logits) = Σ_{t,j} dg[t, j] · gates[t, j] + Σ_{t,e} aux[e] · probs[t, e]
// with the experts held where the forward put them (logits spread 0.4 apart, so a step of
// 1e-3 changes no choice): both gate modes, with the load-balancing gradient.
TEST(RouterBackward, MatchesFiniteDifferencesOfGatesAndAuxLoss) {
  for (const bool pre_softmax : {false, true}) {
    const RouterShape s{.tokens = 5, .experts = 6, .top_k = 2, .pre_softmax = pre_softmax};
    const auto T = static_cast<std::size_t>(s.tokens), E = static_cast<std::size_t>(s.experts),
               k = static_cast<std::size_t>(s.top_k);
    Floats logits(T * E);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t e = 0; e < E; ++e)
        logits[t * E + e] = 0.4f * static_cast<float>((e * 5 + t * 3) % E) - 1.0f;
    const Floats dg = random_floats(T * k, 17, -1.0f, 1.0f);
    const Floats aux = random_floats(E, 19, 0.0f, 0.5f);
    const Routed r = route(s, logits);
    Floats dlogits(T * E);
    router_backward(s, r.probs.data(), r.top.data(), r.gates.data(), dg.data(), aux.data(),
                    dlogits.data());
    // L in double, the experts fixed to r.top.
    auto loss = [&](const std::vector<double>& x) {
      double sum = 0;
      for (std::size_t t = 0; t < T; ++t) {
        const double* row = x.data() + t * E;
        const double max = *std::max_element(row, row + E);
        double z = 0;
        for (std::size_t e = 0; e < E; ++e) z += std::exp(row[e] - max);
        for (std::size_t e = 0; e < E; ++e) sum += aux[e] * std::exp(row[e] - max) / z;
        double zk = 0;
        for (std::size_t j = 0; j < k; ++j) zk += std::exp(row[r.top[t * k + j]] - max);
        for (std::size_t j = 0; j < k; ++j) {
          const double p = std::exp(row[r.top[t * k + j]] - max);
          sum += dg[t * k + j] * (pre_softmax ? p / z : p / zk);
        }
      }
      return sum;
    };
    std::vector<double> x(logits.begin(), logits.end());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i], eps = 1e-3;
      x[i] = keep + eps;
      const double up = loss(x);
      x[i] = keep - eps;
      const double down = loss(x);
      x[i] = keep;
      EXPECT_NEAR(dlogits[i], (up - down) / (2 * eps), 1e-5)
          << "pre_softmax " << pre_softmax << ", logit " << i;
    }
  }
}

// Forced balance: copy t·k + slot goes to expert (t·k + slot) mod E, whatever the logits,
// and the gates are still the softmax of the logits at those experts.
TEST(RouterForcedBalance, RoutesByPosition) {
  const RouterShape s{.tokens = 5, .experts = 4, .top_k = 2, .force_balance = true};
  const Floats logits = random_floats(20, 23, -2.0f, 2.0f);
  const Routed r = route(s, logits);
  for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(r.top[static_cast<std::size_t>(i)], i % 4);
  EXPECT_EQ(r.counts, (std::vector<std::int64_t>{3, 3, 2, 2}));
  for (std::size_t t = 0; t < 5; ++t) {
    const float a = logits[t * 4 + r.top[t * 2]], b = logits[t * 4 + r.top[t * 2 + 1]];
    EXPECT_NEAR(r.gates[t * 2], 1.0 / (1.0 + std::exp(static_cast<double>(b - a))), 1e-6);
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu
