// DeepSeek-V3's router and Megatron's token dropping on the CPU (the reference binding):
// sigmoid scores against a double-precision reference; group-limited routing and the
// expert bias on a hand-built score table whose chosen experts follow from the rules by
// hand (Megatron-Core's group_limited_topk, topk_routing_with_score_function); the
// sigmoid router's backward against central differences in double; dropping by gate and
// by position, padding to the capacity, and the permutation of a table with dropped slots,
// each on a table worked out by hand (apply_router_token_dropping).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/device.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/router.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using tandem::moe_expert_capacity;

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;

struct Routed {
  Floats probs, gates;
  std::vector<std::int32_t> top;
  std::vector<std::int64_t> counts, aux_counts;
};

Routed route(RouterShape s, const Floats& logits, const Floats* bias = nullptr) {
  const auto T = static_cast<std::size_t>(s.tokens), E = static_cast<std::size_t>(s.experts),
             k = static_cast<std::size_t>(s.top_k);
  Routed r{Floats(T * E), Floats(T * k), std::vector<std::int32_t>(T * k),
           std::vector<std::int64_t>(E), std::vector<std::int64_t>(E)};
  router_top_k(s, logits.data(), r.probs.data(), r.top.data(), r.gates.data(), r.counts.data(),
               bias != nullptr ? bias->data() : nullptr, r.aux_counts.data());
  return r;
}

// The logit whose sigmoid is p.
float logit_of(double p) {
  return static_cast<float>(std::log(p / (1 - p)));
}

// One token, 8 experts in 4 groups of 2, k = 4 from group_topk = 2 groups: a group's score
// is the sum of its best k / group_topk = 2 sigmoid scores.
//   scores   g0 (.90 .05)  g1 (.50 .50)  g2 (.60 .45)  g3 (.70 .10)
//   sums         .95           1.00          1.05          .80
// Groups 2 and 1 win; inside them the best four are 4 (.60), 2 (.50), 3 (.50, the tie to
// the lower index), 5 (.45). Without groups it would be 0, 6, 4, 2. The gates are the
// chosen scores over their sum 2.05, times the scaling factor 2.5.
const double kScores[8] = {0.90, 0.05, 0.50, 0.50, 0.60, 0.45, 0.70, 0.10};

Floats score_logits() {
  Floats l;
  for (double p : kScores) l.push_back(logit_of(p));
  return l;
}

TEST(RouterSigmoid, GroupLimitedChoiceOnAHandTable) {
  const RouterShape s{.tokens = 1,
                      .experts = 8,
                      .top_k = 4,
                      .score = RouterScore::sigmoid,
                      .num_groups = 4,
                      .group_topk = 2,
                      .scale = 2.5f};
  const Routed r = route(s, score_logits());
  EXPECT_EQ(r.top, (std::vector<std::int32_t>{4, 2, 3, 5}));
  const double sum = 0.60 + 0.50 + 0.50 + 0.45;
  for (std::size_t j = 0; j < 4; ++j)
    EXPECT_NEAR(r.gates[j], 2.5 * kScores[r.top[j]] / sum, 2e-6) << j;
  EXPECT_EQ(r.counts, (std::vector<std::int64_t>{0, 0, 1, 1, 1, 1, 0, 0}));
  // The aux loss counts the plain top-4 of the scores: 0, 6, 4, 2.
  EXPECT_EQ(r.aux_counts, (std::vector<std::int64_t>{1, 0, 1, 0, 1, 0, 1, 0}));
  for (std::size_t e = 0; e < 8; ++e) EXPECT_NEAR(r.probs[e], kScores[e], 1e-6);
  // Without groups: the four best scores.
  RouterShape plain = s;
  plain.num_groups = plain.group_topk = 0;
  EXPECT_EQ(route(plain, score_logits()).top, (std::vector<std::int32_t>{0, 6, 4, 2}));
}

// The expert bias changes the choice, never the weights: +0.40 on expert 6 lifts group 3 to
// (1.10 + .10) = 1.20, the best; groups 3 and 2 win, and by score + bias the four are
// 6 (1.10), 4 (.60), 5 (.45), 7 (.10). Their gates are the unbiased .70, .60, .45, .10 over
// their sum.
TEST(RouterSigmoid, ExpertBiasChoosesButDoesNotWeigh) {
  const RouterShape s{.tokens = 1,
                      .experts = 8,
                      .top_k = 4,
                      .score = RouterScore::sigmoid,
                      .num_groups = 4,
                      .group_topk = 2};
  const Floats bias{0, 0, 0, 0, 0, 0, 0.40f, 0};
  const Routed r = route(s, score_logits(), &bias);
  EXPECT_EQ(r.top, (std::vector<std::int32_t>{6, 4, 5, 7}));
  const double sum = 0.70 + 0.60 + 0.45 + 0.10;
  for (std::size_t j = 0; j < 4; ++j) EXPECT_NEAR(r.gates[j], kScores[r.top[j]] / sum, 2e-6) << j;
  EXPECT_EQ(r.aux_counts, (std::vector<std::int64_t>{1, 0, 1, 0, 1, 0, 1, 0}));
  // A softmax router ignores the bias (Megatron's refuses it; the kernel reads none).
  const RouterShape soft{.tokens = 1, .experts = 8, .top_k = 4};
  EXPECT_EQ(route(soft, score_logits(), &bias).top, (std::vector<std::int32_t>{0, 6, 4, 2}));
}

// Seeded logits against a double reference: sigmoid scores, the four best (a stable sort on
// the expert index), gates the scores over their sum (k > 1) or the score itself (k = 1).
TEST(RouterSigmoid, MatchesTheDoubleReferenceOnSeededLogits) {
  for (const int k : {1, 2, 4}) {
    const RouterShape s{.tokens = 37, .experts = 8, .top_k = k, .score = RouterScore::sigmoid};
    const auto T = static_cast<std::size_t>(s.tokens), E = static_cast<std::size_t>(s.experts);
    const Floats logits = random_floats(T * E, 7 + static_cast<std::uint64_t>(k), -4.0f, 4.0f);
    const Routed r = route(s, logits);
    Doubles probs(T * E), gates(T * static_cast<std::size_t>(k));
    std::vector<std::int32_t> top;
    for (std::size_t t = 0; t < T; ++t) {
      const float* x = logits.data() + t * E;
      for (std::size_t e = 0; e < E; ++e) probs[t * E + e] = 1 / (1 + std::exp(-double(x[e])));
      std::vector<std::int32_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return x[a] > x[b]; });
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += probs[t * E + static_cast<std::size_t>(order[j])];
      for (int j = 0; j < k; ++j) {
        top.push_back(order[j]);
        const double p = probs[t * E + static_cast<std::size_t>(order[j])];
        gates[t * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)] = k > 1 ? p / sum : p;
      }
    }
    EXPECT_EQ(r.top, top) << "k " << k;
    EXPECT_TRUE(all_close(r.probs, probs, 1e-6));
    EXPECT_TRUE(all_close(r.gates, gates, 1e-6));
    EXPECT_EQ(r.counts, r.aux_counts);  // no bias, no groups: the aux loss counts the same
  }
}

// The sigmoid router's backward against central differences in double of
//   L = Σ_{t,j} dg[t, j] · gates[t, j] + Σ_{t,e} aux[e] · s(t, e) / Σ_e' s(t, e')
// (gates = scale · s at top over their sum, or scale · s for k = 1; s = sigmoid(logits)),
// the experts held where the forward put them (groups and a bias chose them).
TEST(RouterSigmoidBackward, MatchesFiniteDifferences) {
  for (const int k : {1, 2}) {
    const RouterShape s{.tokens = 5,
                        .experts = 6,
                        .top_k = k,
                        .score = RouterScore::sigmoid,
                        .num_groups = 3,
                        .group_topk = k,
                        .scale = 2.5f,
                        .grad_gates_width = k + 6};  // a padded dispatch table's width
    const auto T = static_cast<std::size_t>(s.tokens), E = static_cast<std::size_t>(s.experts),
               W = static_cast<std::size_t>(s.grad_gates_width), kk = static_cast<std::size_t>(k);
    Floats logits(T * E);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t e = 0; e < E; ++e)
        logits[t * E + e] = 0.4f * static_cast<float>((e * 5 + t * 3) % E) - 1.0f;
    const Floats bias{0.1f, -0.2f, 0.0f, 0.3f, 0.0f, -0.1f};
    const Floats dg = random_floats(T * W, 29, -1.0f, 1.0f);  // columns ≥ k unread
    const Floats aux = random_floats(E, 31, 0.0f, 0.5f);
    const Routed r = route(s, logits, &bias);
    Floats dlogits(T * E);
    router_backward(s, r.probs.data(), r.top.data(), r.gates.data(), dg.data(), aux.data(),
                    dlogits.data());
    auto loss = [&](const std::vector<double>& x) {
      double sum = 0;
      for (std::size_t t = 0; t < T; ++t) {
        std::vector<double> sg(E);
        double all = 0;
        for (std::size_t e = 0; e < E; ++e) all += sg[e] = 1 / (1 + std::exp(-x[t * E + e]));
        for (std::size_t e = 0; e < E; ++e) sum += aux[e] * sg[e] / all;
        double top_sum = 0;
        for (std::size_t j = 0; j < kk; ++j)
          top_sum += sg[static_cast<std::size_t>(r.top[t * kk + j])];
        for (std::size_t j = 0; j < kk; ++j) {
          const double p = sg[static_cast<std::size_t>(r.top[t * kk + j])];
          sum += dg[t * W + j] * 2.5 * (k > 1 ? p / top_sum : p);
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
      EXPECT_NEAR(dlogits[i], (up - down) / (2 * eps), 2e-5) << "k " << k << ", logit " << i;
    }
  }
}

// Softmax with a scaling factor: the gradient is the unscaled one times the factor.
TEST(RouterBackward, ScalingFactorScalesTheGatesGradient) {
  const Floats logits = random_floats(4 * 6, 3, -2.0f, 2.0f);
  const Floats dg = random_floats(4 * 2, 5, -1.0f, 1.0f);
  for (const bool pre : {false, true}) {
    const RouterShape one{.tokens = 4, .experts = 6, .top_k = 2, .pre_softmax = pre};
    RouterShape scaled = one;
    scaled.scale = 3.0f;
    const Routed a = route(one, logits), b = route(scaled, logits);
    for (std::size_t i = 0; i < a.gates.size(); ++i)
      EXPECT_NEAR(b.gates[i], 3.0 * a.gates[i], 1e-6);
    Floats da(24), db(24);
    router_backward(one, a.probs.data(), a.top.data(), a.gates.data(), dg.data(), nullptr,
                    da.data());
    router_backward(scaled, b.probs.data(), b.top.data(), b.gates.data(), dg.data(), nullptr,
                    db.data());
    for (std::size_t i = 0; i < da.size(); ++i) EXPECT_NEAR(db[i], 3.0 * da[i], 1e-5) << i;
  }
}

TEST(RouterGroups, RefusesGroupsThatCannotHoldTheExperts) {
  EXPECT_THROW(check_router_groups({.experts = 8, .top_k = 2, .num_groups = 3, .group_topk = 1}),
               std::invalid_argument);  // 3 does not divide 8
  EXPECT_THROW(check_router_groups({.experts = 8, .top_k = 2, .num_groups = 4, .group_topk = 5}),
               std::invalid_argument);
  EXPECT_THROW(check_router_groups({.experts = 8, .top_k = 6, .num_groups = 4, .group_topk = 2}),
               std::invalid_argument);  // two groups of 2 hold 4 experts, not 6
  EXPECT_NO_THROW(
      check_router_groups({.experts = 8, .top_k = 4, .num_groups = 4, .group_topk = 2}));
}

// ---- token dropping -----------------------------------------------------------------------
// T = 4 tokens, k = 2, E = 4:
//   token   experts   gates
//   0       0, 1      .60 .40
//   1       0, 2      .70 .30
//   2       1, 0      .55 .45
//   3       3, 0      .80 .20
const std::vector<std::int32_t> kTop{0, 1, 0, 2, 1, 0, 3, 0};
const Floats kGates{0.60f, 0.40f, 0.70f, 0.30f, 0.55f, 0.45f, 0.80f, 0.20f};

struct Dropped {
  std::vector<std::int32_t> top;
  Floats gates;
  std::vector<std::int64_t> counts;
};

Dropped drop(double factor, TokenDropPolicy policy, bool pad) {
  TokenDropShape s{.tokens = 4,
                   .experts = 4,
                   .top_k = 2,
                   .capacity = moe_expert_capacity(4, 2, 4, factor),
                   .policy = policy,
                   .pad_to_capacity = pad};
  const auto n = static_cast<std::size_t>(4 * s.width());
  Dropped d{std::vector<std::int32_t>(n), Floats(n), std::vector<std::int64_t>(4)};
  moe_drop_tokens(s, kTop.data(), kGates.data(), d.top.data(), d.gates.data(), d.counts.data());
  return d;
}

TEST(TokenDrop, CapacityIsMegatronsCeiling) {
  EXPECT_EQ(moe_expert_capacity(4, 2, 4, 0.5), 1);  // ceil(8 / 4 · 0.5)
  EXPECT_EQ(moe_expert_capacity(4, 2, 4, 1.0), 2);
  EXPECT_EQ(moe_expert_capacity(64, 2, 8, 1.1), 18);  // ceil(17.6)
  EXPECT_EQ(moe_expert_capacity(5, 1, 2, 1.0), 3);    // ceil(2.5)
}

// Capacity 1 by gate: expert 0 keeps token 1 (.70 of .60, .70, .45, .20), expert 1 token 2
// (.55 over .40); experts 2 and 3 have one copy each.
TEST(TokenDrop, ByProbsKeepsTheHighestGates) {
  const Dropped d = drop(0.5, TokenDropPolicy::probs, false);
  EXPECT_EQ(d.top, (std::vector<std::int32_t>{-1, -1, 0, 2, 1, -1, 3, -1}));
  EXPECT_EQ(d.gates, (Floats{0, 0, 0.70f, 0.30f, 0.55f, 0, 0.80f, 0}));
  EXPECT_EQ(d.counts, (std::vector<std::int64_t>{1, 1, 1, 1}));
}

// Capacity 1 by position: experts 0 and 1 keep token 0, their first.
TEST(TokenDrop, ByPositionKeepsTheFirstTokens) {
  const Dropped d = drop(0.5, TokenDropPolicy::position, false);
  EXPECT_EQ(d.top, (std::vector<std::int32_t>{0, 1, -1, 2, -1, -1, 3, -1}));
  EXPECT_EQ(d.counts, (std::vector<std::int64_t>{1, 1, 1, 1}));
}

// Capacity 2, padded: expert 0 keeps tokens 1 and 0 (.70, .60), expert 1 both its copies;
// experts 2 and 3 have one copy each and take token 0 — the first token not routed to
// them — as a filler with gate 0, in token 0's slots after its k = 2, in expert order.
TEST(TokenDrop, PaddingFillsEveryExpertToItsCapacity) {
  const Dropped d = drop(1.0, TokenDropPolicy::probs, true);
  EXPECT_EQ(d.top, (std::vector<std::int32_t>{0, 1,  2,  3,  -1, -1,  //
                                              0, 2,  -1, -1, -1, -1,  //
                                              1, -1, -1, -1, -1, -1,  //
                                              3, -1, -1, -1, -1, -1}));
  EXPECT_EQ(d.counts, (std::vector<std::int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(d.gates[0], 0.60f);
  EXPECT_EQ(d.gates[2], 0.0f);
  EXPECT_EQ(d.gates[3], 0.0f);
  EXPECT_EQ(d.gates[12], 0.55f);
  EXPECT_EQ(d.gates[13], 0.0f);  // token 2's copy for expert 0 (.45) was dropped
}

// A capacity above the tokens drops nothing; padded, every expert takes every token.
TEST(TokenDrop, CapacityAboveTheTokensDropsNothing) {
  const Dropped d = drop(4.0, TokenDropPolicy::probs, false);
  EXPECT_EQ(d.top, kTop);
  EXPECT_EQ(d.gates, kGates);
  EXPECT_EQ(drop(4.0, TokenDropPolicy::probs, true).counts,
            (std::vector<std::int64_t>{4, 4, 4, 4}));
}

// Seeded routing against a brute-force rule: a copy stays when fewer than the capacity of
// its expert's copies have a higher gate (or an equal gate and an earlier token).
TEST(TokenDrop, MatchesTheBruteForceRuleOnSeededRouting) {
  const std::int64_t T = 50, E = 6, k = 2;
  Floats logits = random_floats(static_cast<std::size_t>(T * E), 11, -2.0f, 2.0f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(T); ++i) logits[i * 6] += 1.0f;  // skew
  const Routed r = route({.tokens = T, .experts = E, .top_k = k}, logits);
  for (const double factor : {0.5, 1.0, 1.3})
    for (const auto policy : {TokenDropPolicy::probs, TokenDropPolicy::position}) {
      const TokenDropShape s{.tokens = T,
                             .experts = E,
                             .top_k = k,
                             .capacity = moe_expert_capacity(T, k, E, factor),
                             .policy = policy};
      std::vector<std::int32_t> top(static_cast<std::size_t>(T * k));
      Floats gates(top.size());
      std::vector<std::int64_t> counts(static_cast<std::size_t>(E));
      moe_drop_tokens(s, r.top.data(), r.gates.data(), top.data(), gates.data(), counts.data());
      std::vector<std::int64_t> want(static_cast<std::size_t>(E), 0);
      for (std::size_t i = 0; i < top.size(); ++i) {
        std::int64_t better = 0;
        for (std::size_t c = 0; c < top.size(); ++c) {
          if (c == i || r.top[c] != r.top[i]) continue;
          const bool earlier = c / 2 < i / 2;
          better += policy == TokenDropPolicy::position ? earlier
                                                        : double(r.gates[c]) > double(r.gates[i]) ||
                                                              (r.gates[c] == r.gates[i] && earlier);
        }
        const bool kept = better < std::min<std::int64_t>(s.capacity, T);
        EXPECT_EQ(top[i], kept ? r.top[i] : -1) << factor << " copy " << i;
        EXPECT_EQ(gates[i], kept ? r.gates[i] : 0.0f);
        want[static_cast<std::size_t>(r.top[i])] += kept;
      }
      EXPECT_EQ(counts, want);
      for (std::int64_t c : counts) EXPECT_LE(c, s.capacity);
    }
}

// The dispatch of a table with dropped slots: only the copies move, and the combine skips
// the dropped slots (their gradient is 0).
TEST(TokenDrop, PermuteAndCombineSkipDroppedSlots) {
  const Dropped d = drop(0.5, TokenDropPolicy::probs, false);  // 4 copies of 8 slots
  const MoeShape s{.tokens = 4, .hidden = 3, .experts = 4, .top_k = 2, .rows = 4};
  const Floats x{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  Floats permuted(12), out(12);
  std::vector<std::int64_t> source(4), row_of_copy(8), counts(4);
  moe_permute(s, x.data(), d.top.data(), permuted.data(), source.data(), row_of_copy.data(),
              counts.data());
  // Expert-major: token 1 (expert 0), token 2 (1), token 1 (2), token 3 (3).
  EXPECT_EQ(permuted, (Floats{4, 5, 6, 7, 8, 9, 4, 5, 6, 10, 11, 12}));
  EXPECT_EQ(row_of_copy, (std::vector<std::int64_t>{-1, -1, 0, 2, 1, -1, 3, -1}));
  moe_unpermute(s, permuted.data(), d.gates.data(), row_of_copy.data(), out.data());
  // Token 0 lost both experts: 0. Token 1: (.70 + .30) · its row. Token 2: .55, token 3: .80.
  const Doubles want{0, 0, 0, 4, 5, 6, .55 * 7, .55 * 8, .55 * 9, .8 * 10, .8 * 11, .8 * 12};
  EXPECT_TRUE(all_close(out, want, 1e-6));
  Floats dy(12), dgates(8);
  const Floats dout(12, 1.0f);
  moe_unpermute_backward(s, dout.data(), permuted.data(), d.gates.data(), source.data(),
                         row_of_copy.data(), dy.data(), dgates.data());
  EXPECT_EQ(dgates[0], 0.0f);
  EXPECT_EQ(dgates[1], 0.0f);
  EXPECT_FLOAT_EQ(dgates[2], 4 + 5 + 6);
  Floats dx(12);
  moe_permute_backward(s, dy.data(), row_of_copy.data(), dx.data());
  EXPECT_EQ(dx[0], 0.0f);  // token 0 reached no expert
  EXPECT_FLOAT_EQ(dx[3], 0.70f + 0.30f);
}

}  // namespace
}  // namespace tandem::kernels::cpu
