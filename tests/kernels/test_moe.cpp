// The MoE token dispatch (permute, unpermute, the experts' grouped GEMM and their backward
// passes) against a double-precision reference written here with plain loops: the
// reference finds the expert-major order by scanning experts, then tokens, then slots, as
// Megatron's stable argsort of the (E, T) routing map orders them, and its backward passes
// are checked against central differences. Hand-worked maps, ties and duplicate experts,
// experts left without tokens, identity experts (out = k·x exactly), thread-count
// independence and the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/router.hpp"
#include "kernels/cpu/threads.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::bitwise_equal;
using testing::Doubles;
using testing::Floats;
using testing::matches_finite_differences;
using testing::random_floats;
using testing::to_double;
using testing::weighted_sum;

using Index = std::vector<std::int64_t>;
using Top = std::vector<std::int32_t>;

std::size_t z(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

// Seeded routing: every token's k distinct experts drawn from `allowed` (so the experts
// not in it get no tokens).
Top random_top(std::int64_t T, std::int64_t k, std::vector<std::int32_t> allowed,
               std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Top top;
  for (std::int64_t t = 0; t < T; ++t) {
    std::shuffle(allowed.begin(), allowed.end(), rng);
    top.insert(top.end(), allowed.begin(), allowed.begin() + k);
  }
  return top;
}

std::vector<std::int32_t> experts_up_to(std::int64_t E) {
  std::vector<std::int32_t> all;
  for (std::int32_t e = 0; e < E; ++e) all.push_back(e);
  return all;
}

// The kernel's permute, its outputs pre-filled with garbage that must be overwritten.
struct Permuted {
  Floats rows;
  Index source_of_row, row_of_copy, counts;
};

Permuted permute(MoeShape s, const Floats& x, const Top& top) {
  const std::size_t copies = z(s.tokens * s.top_k);
  Permuted p{Floats(copies * z(s.hidden), NAN), Index(copies, -7), Index(copies, -7),
             Index(z(s.experts), 99)};
  moe_permute(s, x.data(), top.data(), p.rows.data(), p.source_of_row.data(), p.row_of_copy.data(),
              p.counts.data());
  return p;
}

// ---- The reference, in double -------------------------------------------------------

struct RefMap {
  Index source_of_row, row_of_copy, counts;
};

// For each expert in turn, the copies (token, slot) routed to it, in token then slot order.
RefMap reference_map(MoeShape s, const Top& top) {
  const std::int64_t T = s.tokens, k = s.top_k;
  RefMap m{{}, Index(z(T * k), -1), Index(z(s.experts), 0)};
  for (std::int64_t e = 0; e < s.experts; ++e)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t slot = 0; slot < k; ++slot)
        if (top[z(t * k + slot)] == e) {
          m.row_of_copy[z(t * k + slot)] = static_cast<std::int64_t>(m.source_of_row.size());
          m.source_of_row.push_back(t * k + slot);
          ++m.counts[z(e)];
        }
  return m;
}

// xp (T·k, H): row r holds the token of the r-th copy.
Doubles ref_permute(MoeShape s, const Doubles& x, const RefMap& m) {
  const std::size_t H = z(s.hidden);
  Doubles xp;
  for (const std::int64_t copy : m.source_of_row) {
    const std::size_t t = z(copy / s.top_k);
    xp.insert(xp.end(), x.begin() + long(t * H), x.begin() + long((t + 1) * H));
  }
  return xp;
}

// dx (T, H) = the sum of the gradients of each token's copies.
Doubles ref_permute_backward(MoeShape s, const Doubles& dxp, const RefMap& m) {
  const std::size_t H = z(s.hidden), k = z(s.top_k);
  Doubles dx(z(s.tokens) * H, 0.0);
  for (std::size_t t = 0; t < z(s.tokens); ++t)
    for (std::size_t slot = 0; slot < k; ++slot)
      for (std::size_t c = 0; c < H; ++c)
        dx[t * H + c] += dxp[z(m.row_of_copy[t * k + slot]) * H + c];
  return dx;
}

Doubles ref_unpermute(MoeShape s, const Doubles& y, const Doubles& gates, const RefMap& m) {
  const std::size_t H = z(s.hidden), k = z(s.top_k);
  Doubles out(z(s.tokens) * H, 0.0);
  for (std::size_t t = 0; t < z(s.tokens); ++t)
    for (std::size_t slot = 0; slot < k; ++slot)
      for (std::size_t c = 0; c < H; ++c)
        out[t * H + c] += gates[t * k + slot] * y[z(m.row_of_copy[t * k + slot]) * H + c];
  return out;
}

struct UnpermuteGrads {
  Doubles dy, dgates;
};

UnpermuteGrads ref_unpermute_backward(MoeShape s, const Doubles& dout, const Doubles& y,
                                      const Doubles& gates, const RefMap& m) {
  const std::size_t H = z(s.hidden), k = z(s.top_k);
  UnpermuteGrads g{Doubles(z(s.tokens) * k * H, 0.0), Doubles(z(s.tokens) * k, 0.0)};
  for (std::size_t t = 0; t < z(s.tokens); ++t)
    for (std::size_t slot = 0; slot < k; ++slot) {
      const std::size_t row = z(m.row_of_copy[t * k + slot]);
      for (std::size_t c = 0; c < H; ++c) {
        g.dy[row * H + c] = gates[t * k + slot] * dout[t * H + c];
        g.dgates[t * k + slot] += dout[t * H + c] * y[row * H + c];
      }
    }
  return g;
}

// The experts as the reference sees them: which expert each permuted row belongs to
// (from the map and the routing, not from the counts) and where w_e[h][f] is stored.
struct Experts {
  std::vector<std::size_t> of_row;
  std::size_t H = 0, F = 0;
  ExpertWeightLayout layout = ExpertWeightLayout::kInOut;

  std::size_t w(std::size_t e, std::size_t h, std::size_t f) const {
    return layout == ExpertWeightLayout::kInOut ? (e * H + h) * F + f : (e * F + f) * H + h;
  }
};

Experts experts_of(const Top& top, const RefMap& m, std::int64_t H, std::int64_t F,
                   ExpertWeightLayout layout) {
  Experts ex{{}, z(H), z(F), layout};
  for (const std::int64_t copy : m.source_of_row) ex.of_row.push_back(z(top[z(copy)]));
  return ex;
}

// y (rows, F): y[r][f] = Σ_h x[r][h] · w_e[h][f], e the row's expert.
Doubles ref_experts(const Doubles& x, const Doubles& w, const Experts& ex) {
  const std::size_t H = ex.H, F = ex.F;
  Doubles y(ex.of_row.size() * F, 0.0);
  for (std::size_t r = 0; r < ex.of_row.size(); ++r)
    for (std::size_t f = 0; f < F; ++f)
      for (std::size_t h = 0; h < H; ++h)
        y[r * F + f] += x[r * H + h] * w[ex.w(ex.of_row[r], h, f)];
  return y;
}

struct ExpertGrads {
  Doubles dx, dw;
};

// dx written, dw = dw0 + the gradient.
ExpertGrads ref_experts_backward(const Doubles& x, const Doubles& w, const Doubles& dy,
                                 const Experts& ex, Doubles dw0) {
  const std::size_t H = ex.H, F = ex.F;
  ExpertGrads g{Doubles(ex.of_row.size() * H, 0.0), std::move(dw0)};
  for (std::size_t r = 0; r < ex.of_row.size(); ++r)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t f = 0; f < F; ++f) {
        const std::size_t at = ex.w(ex.of_row[r], h, f);
        g.dx[r * H + h] += dy[r * F + f] * w[at];
        g.dw[at] += x[r * H + h] * dy[r * F + f];
      }
  return g;
}

Doubles abs_of(Doubles v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

Doubles slice(const Doubles& v, std::size_t from, std::size_t n) {
  return Doubles(v.begin() + long(from), v.begin() + long(from + n));
}

Doubles concat(const Doubles& a, const Doubles& b) {
  Doubles v = a;
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

// The shapes of the seeded tests: k = 1, 2, 3, 4; experts without tokens; one token.
struct Case {
  MoeShape s;
  std::vector<std::int32_t> allowed;  // the experts tokens may pick
};

std::vector<Case> cases() {
  return {
      {{7, 5, 4, 1}, {0, 1, 2, 3}},
      {{13, 9, 6, 2}, {0, 2, 3}},  // experts 1, 4, 5 get nothing
      {{33, 16, 8, 2}, experts_up_to(8)},
      {{20, 6, 8, 4}, {1, 2, 4, 6, 7}},  // 0, 3, 5 get nothing
      {{5, 3, 3, 3}, {0, 1, 2}},         // k = E: every token everywhere
      {{1, 1, 1, 1}, {0}},
  };
}

// ---- Permute -------------------------------------------------------------------------

TEST(MoePermute, GroupsTheHandWorkedExample) {
  // kernels/math/moe.hpp's example: T = 3, k = 2, E = 4, expert 3 gets nothing.
  const MoeShape s{3, 2, 4, 2};
  const Floats x{1, 2, 3, 4, 5, 6};  // token t = (2t + 1, 2t + 2)
  const Permuted p = permute(s, x, {1, 0, 1, 2, 0, 1});
  EXPECT_EQ(p.counts, (Index{2, 3, 1, 0}));
  EXPECT_EQ(p.source_of_row, (Index{1, 4, 0, 2, 5, 3}));
  EXPECT_EQ(p.row_of_copy, (Index{2, 0, 3, 5, 1, 4}));
  // Rows: expert 0 gets tokens 0, 2; expert 1 tokens 0, 1, 2; expert 2 token 1.
  EXPECT_EQ(p.rows, (Floats{1, 2, 5, 6, 1, 2, 3, 4, 5, 6, 3, 4}));
}

TEST(MoePermute, TiesKeepTokenThenSlotOrder) {
  // Every token picks experts 2 and 0: within each expert the copies keep token order.
  const Permuted all = permute({3, 1, 3, 2}, {10, 11, 12}, {2, 0, 2, 0, 2, 0});
  EXPECT_EQ(all.counts, (Index{3, 0, 3}));
  EXPECT_EQ(all.source_of_row, (Index{1, 3, 5, 0, 2, 4}));
  EXPECT_EQ(all.rows, (Floats{10, 11, 12, 10, 11, 12}));
  // A token sent to one expert twice (the router never does; Megatron's mask cannot say
  // it) keeps both copies, in slot order.
  const Permuted dup = permute({2, 1, 2, 2}, {7, 8}, {1, 1, 0, 1});
  EXPECT_EQ(dup.counts, (Index{1, 3}));
  EXPECT_EQ(dup.source_of_row, (Index{2, 0, 1, 3}));
  EXPECT_EQ(dup.row_of_copy, (Index{1, 2, 0, 3}));
  EXPECT_EQ(dup.rows, (Floats{8, 7, 7, 8}));
}

TEST(MoePermute, NoTokensGivesZeroCounts) {
  const Permuted p = permute({0, 4, 3, 2}, {}, {});
  EXPECT_EQ(p.counts, (Index{0, 0, 0}));  // overwrites the 99s
  EXPECT_TRUE(p.rows.empty());
}

TEST(MoePermute, MatchesTheReferenceOnSeededRouting) {
  for (const Case& c : cases()) {
    const MoeShape s = c.s;
    const Top top = random_top(s.tokens, s.top_k, c.allowed, 7 + z(s.tokens));
    const Floats x = random_floats(z(s.tokens * s.hidden), 3);
    const Permuted p = permute(s, x, top);
    const RefMap m = reference_map(s, top);
    EXPECT_EQ(p.source_of_row, m.source_of_row) << s.tokens << " tokens, k " << s.top_k;
    EXPECT_EQ(p.row_of_copy, m.row_of_copy);
    EXPECT_EQ(p.counts, m.counts);
    for (const std::int32_t e : experts_up_to(s.experts)) {  // the experts left out get nothing
      if (std::find(c.allowed.begin(), c.allowed.end(), e) == c.allowed.end()) {
        EXPECT_EQ(p.counts[z(e)], 0);
      }
    }
    // A copy is exact: compare bitwise.
    const Doubles want = ref_permute(s, to_double(x), m);
    EXPECT_EQ(to_double(p.rows), want);
  }
}

TEST(MoePermute, BackwardSumsEachTokensCopies) {
  for (const Case& c : cases()) {
    const MoeShape s = c.s;
    const Top top = random_top(s.tokens, s.top_k, c.allowed, 11 + z(s.tokens));
    const RefMap m = reference_map(s, top);
    const std::size_t copies = z(s.tokens * s.top_k), H = z(s.hidden);
    const Floats dxp = random_floats(copies * H, 5);
    // The reference backward against central differences of the reference forward.
    const Doubles x = to_double(random_floats(z(s.tokens) * H, 6));
    const Doubles want = ref_permute_backward(s, to_double(dxp), m);
    EXPECT_TRUE(matches_finite_differences(
        [&](const Doubles& v) { return weighted_sum(ref_permute(s, v, m), to_double(dxp)); }, x,
        want));
    Floats dx(z(s.tokens) * H, NAN);
    moe_permute_backward(s, dxp.data(), m.row_of_copy.data(), dx.data());
    EXPECT_TRUE(all_close(dx, want, 1e-6, ref_permute_backward(s, abs_of(to_double(dxp)), m)))
        << s.tokens << " tokens, k " << s.top_k;
  }
}

// ---- Unpermute (combine) -------------------------------------------------------------

TEST(MoeUnpermute, MatchesTheReferenceCombine) {
  for (const Case& c : cases()) {
    const MoeShape s = c.s;
    const Top top = random_top(s.tokens, s.top_k, c.allowed, 13 + z(s.tokens));
    const RefMap m = reference_map(s, top);
    const std::size_t copies = z(s.tokens * s.top_k), H = z(s.hidden);
    const Floats y = random_floats(copies * H, 8), gates = random_floats(copies, 9, 0.0f, 1.0f);
    Floats out(z(s.tokens) * H, NAN);
    moe_unpermute(s, y.data(), gates.data(), m.row_of_copy.data(), out.data());
    const Doubles want = ref_unpermute(s, to_double(y), to_double(gates), m);
    const Doubles scale = ref_unpermute(s, abs_of(to_double(y)), to_double(gates), m);
    EXPECT_TRUE(all_close(out, want, 1e-6, scale)) << s.tokens << " tokens, k " << s.top_k;
  }
}

TEST(MoeUnpermute, BackwardMatchesTheReferenceAndFiniteDifferences) {
  for (const Case& c : cases()) {
    const MoeShape s = c.s;
    const Top top = random_top(s.tokens, s.top_k, c.allowed, 17 + z(s.tokens));
    const RefMap m = reference_map(s, top);
    const std::size_t copies = z(s.tokens * s.top_k), H = z(s.hidden);
    const Floats y = random_floats(copies * H, 10), gates = random_floats(copies, 11, 0.0f, 1.0f),
                 dout = random_floats(z(s.tokens) * H, 12);
    const Doubles yd = to_double(y), gd = to_double(gates), dd = to_double(dout);
    const UnpermuteGrads want = ref_unpermute_backward(s, dd, yd, gd, m);
    // d loss / d (y, gates) of loss = Σ dout · unpermute(y, gates), by central differences.
    const auto loss = [&](const Doubles& v) {
      return weighted_sum(ref_unpermute(s, slice(v, 0, yd.size()), slice(v, yd.size(), copies), m),
                          dd);
    };
    EXPECT_TRUE(matches_finite_differences(loss, concat(yd, gd), concat(want.dy, want.dgates)));

    Floats dy(copies * H, NAN), dgates(copies, NAN);
    moe_unpermute_backward(s, dout.data(), y.data(), gates.data(), m.source_of_row.data(),
                           m.row_of_copy.data(), dy.data(), dgates.data());
    EXPECT_TRUE(all_close(dy, want.dy, 1e-6)) << s.tokens << " tokens, k " << s.top_k;
    const UnpermuteGrads scale = ref_unpermute_backward(s, abs_of(dd), abs_of(yd), gd, m);
    EXPECT_TRUE(all_close(dgates, want.dgates, 1e-6, scale.dgates));
  }
}

TEST(MoeDispatch, IdentityExpertsWithUnitGatesGiveKTimesTheInput) {
  // permute, then experts returning their input, then unpermute with gates of 1: every
  // token comes back k times, summed. x + x and (x + x) + x are exact or rounded once, so
  // the result is the float nearest k·x, bit for bit.
  for (const std::int64_t k : {1, 2, 3}) {
    const MoeShape s{9, 5, 4, k};
    const Top top = random_top(s.tokens, k, experts_up_to(4), 19 + z(k));
    const Floats x = random_floats(z(s.tokens * s.hidden), 20, -3.0f, 3.0f);
    const Permuted p = permute(s, x, top);
    const Floats ones(z(s.tokens * k), 1.0f);
    Floats out(x.size(), NAN);
    moe_unpermute(s, p.rows.data(), ones.data(), p.row_of_copy.data(), out.data());
    Floats want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      want[i] = static_cast<float>(static_cast<double>(k) * x[i]);
    EXPECT_TRUE(bitwise_equal(out, want)) << "k " << k;
  }
  // A token sent to one expert twice with gates 0.25 and 0.75 comes back whole.
  const Permuted p = permute({2, 2, 2, 2}, {1.5f, -2, 4, 8}, {1, 1, 0, 1});
  const Floats gates{0.25f, 0.75f, 0.5f, 0.5f};
  Floats out(4, NAN);
  moe_unpermute({2, 2, 2, 2}, p.rows.data(), gates.data(), p.row_of_copy.data(), out.data());
  EXPECT_EQ(out, (Floats{1.5f, -2, 4, 8}));
}

// ---- The experts' grouped GEMM --------------------------------------------------------

TEST(MoeGroupedGemm, MatchesThePerExpertReference) {
  for (const auto layout : {ExpertWeightLayout::kInOut, ExpertWeightLayout::kOutIn})
    for (const Case& c : cases()) {
      const MoeShape s = c.s;
      const Top top = random_top(s.tokens, s.top_k, c.allowed, 23 + z(s.tokens));
      const RefMap m = reference_map(s, top);
      const std::size_t rows = z(s.tokens * s.top_k), H = z(s.hidden), E = z(s.experts);
      const std::size_t F = H + 3;
      const GroupedGemmShape g{s.tokens * s.top_k, s.experts, s.hidden, std::int64_t(F), layout};
      const Floats x = random_floats(rows * H, 24), w = random_floats(E * H * F, 25),
                   dy = random_floats(rows * F, 26), dw0 = random_floats(E * H * F, 27);
      const Experts ex = experts_of(top, m, s.hidden, std::int64_t(F), layout);
      const Doubles xd = to_double(x), wd = to_double(w), dyd = to_double(dy);

      Floats y(rows * F, NAN);
      moe_grouped_gemm(g, x.data(), w.data(), m.counts.data(), y.data());
      EXPECT_TRUE(
          all_close(y, ref_experts(xd, wd, ex), 1e-5, ref_experts(abs_of(xd), abs_of(wd), ex)))
          << s.tokens << " tokens, k " << s.top_k << ", layout " << int(layout);

      const ExpertGrads want = ref_experts_backward(xd, wd, dyd, ex, to_double(dw0));
      const ExpertGrads scale =
          ref_experts_backward(abs_of(xd), abs_of(wd), abs_of(dyd), ex, abs_of(to_double(dw0)));
      Floats dx(rows * H, NAN), dw = dw0;
      moe_grouped_gemm_backward(g, x.data(), w.data(), dy.data(), m.counts.data(), dx.data(),
                                dw.data());
      EXPECT_TRUE(all_close(dx, want.dx, 1e-5, scale.dx));
      EXPECT_TRUE(all_close(dw, want.dw, 1e-5, scale.dw));  // accumulated onto dw0
      // Experts without rows keep their gradient bit for bit.
      for (std::size_t e = 0; e < E; ++e) {
        if (m.counts[e] != 0) continue;
        const auto from = long(e * H * F), to = long((e + 1) * H * F);
        EXPECT_TRUE(bitwise_equal(Floats(dw.begin() + from, dw.begin() + to),
                                  Floats(dw0.begin() + from, dw0.begin() + to)))
            << "expert " << e;
      }

      // The reference backward against central differences, over x and w together (on the
      // smaller cases: each variable costs two forward passes).
      if (xd.size() + wd.size() > 2000) continue;
      const auto loss = [&](const Doubles& v) {
        return weighted_sum(ref_experts(slice(v, 0, xd.size()), slice(v, xd.size(), wd.size()), ex),
                            dyd);
      };
      const ExpertGrads fresh = ref_experts_backward(xd, wd, dyd, ex, Doubles(wd.size(), 0));
      EXPECT_TRUE(matches_finite_differences(loss, concat(xd, wd), concat(fresh.dx, fresh.dw)));
    }
}

// ---- The three composed, as the MoE layer runs them ----------------------------------

TEST(MoeLayer, ComposedForwardAndBackwardMatchTheReference) {
  // Router (seeded logits, softmax over the top k) → permute → experts → unpermute, and
  // back; the kernels' maps feed each other. Checked against the reference chain, whose
  // gradients with respect to x, w and the gates are checked by central differences.
  const std::int64_t T = 11, H = 6, E = 5, k = 2, F = 4;
  const MoeShape s{T, H, E, k};
  const RouterShape rs{T, E, k, false};
  const Floats logits = random_floats(z(T * E), 30, -3.0f, 3.0f);
  Floats probs(z(T * E)), gates(z(T * k));
  Top top(z(T * k));
  Index router_counts(z(E));
  router_top_k(rs, logits.data(), probs.data(), top.data(), gates.data(), router_counts.data());
  const Floats x = random_floats(z(T * H), 31), w = random_floats(z(E * H * F), 32),
               dout = random_floats(z(T * F), 33);
  const std::size_t copies = z(T * k);

  // Forward with the kernels. The experts map H → F, so unpermute runs on rows of F.
  const Permuted p = permute(s, x, top);
  EXPECT_EQ(p.counts, router_counts);
  const GroupedGemmShape g{T * k, E, H, F, ExpertWeightLayout::kOutIn};
  Floats y(copies * z(F), NAN), out(z(T * F), NAN);
  moe_grouped_gemm(g, p.rows.data(), w.data(), p.counts.data(), y.data());
  const MoeShape sf{T, F, E, k};
  moe_unpermute(sf, y.data(), gates.data(), p.row_of_copy.data(), out.data());

  // Backward with the kernels.
  Floats dy(copies * z(F), NAN), dgates(copies, NAN), dxp(copies * z(H), NAN), dx(z(T * H), NAN),
      dw(w.size(), 0.0f);
  moe_unpermute_backward(sf, dout.data(), y.data(), gates.data(), p.source_of_row.data(),
                         p.row_of_copy.data(), dy.data(), dgates.data());
  moe_grouped_gemm_backward(g, p.rows.data(), w.data(), dy.data(), p.counts.data(), dxp.data(),
                            dw.data());
  moe_permute_backward(s, dxp.data(), p.row_of_copy.data(), dx.data());

  // The reference chain.
  const RefMap m = reference_map(s, top);
  const Experts ex = experts_of(top, m, H, F, ExpertWeightLayout::kOutIn);
  const auto forward = [&](const Doubles& xv, const Doubles& wv, const Doubles& gv) {
    return ref_unpermute(sf, ref_experts(ref_permute(s, xv, m), wv, ex), gv, m);
  };
  const Doubles xd = to_double(x), wd = to_double(w), gd = to_double(gates), dd = to_double(dout);
  const Doubles want_out = forward(xd, wd, gd);
  const Doubles xpd = ref_permute(s, xd, m);
  const UnpermuteGrads ug = ref_unpermute_backward(sf, dd, ref_experts(xpd, wd, ex), gd, m);
  const ExpertGrads eg = ref_experts_backward(xpd, wd, ug.dy, ex, Doubles(wd.size(), 0.0));
  const Doubles want_dx = ref_permute_backward(s, eg.dx, m);

  const auto loss = [&](const Doubles& v) {
    return weighted_sum(forward(slice(v, 0, xd.size()), slice(v, xd.size(), wd.size()),
                                slice(v, xd.size() + wd.size(), gd.size())),
                        dd);
  };
  EXPECT_TRUE(matches_finite_differences(loss, concat(concat(xd, wd), gd),
                                         concat(concat(want_dx, eg.dw), ug.dgates)));
  // Errors relative to the RMS of each output: the sums cancel.
  EXPECT_TRUE(all_close(out, want_out, 1e-5, testing::rms_scale(want_out)));
  EXPECT_TRUE(all_close(dgates, ug.dgates, 1e-5, testing::rms_scale(ug.dgates)));
  EXPECT_TRUE(all_close(dw, eg.dw, 1e-5, testing::rms_scale(eg.dw)));
  EXPECT_TRUE(all_close(dx, want_dx, 1e-5, testing::rms_scale(want_dx)));
}

// ---- Determinism and argument checks ---------------------------------------------------

TEST(MoeDispatch, ResultsDoNotDependOnTheThreadCount) {
  // T·k·H = 76,800 elements: above kMinParallelElements, so two threads split the rows.
  const MoeShape s{300, 128, 8, 2};
  const Top top = random_top(s.tokens, s.top_k, experts_up_to(s.experts), 40);
  const std::size_t copies = z(s.tokens * s.top_k), H = z(s.hidden);
  const Floats x = random_floats(z(s.tokens) * H, 41), y = random_floats(copies * H, 42),
               gates = random_floats(copies, 43), dout = random_floats(z(s.tokens) * H, 44);
  std::array<std::vector<Floats>, 2> results;
  const int threads = num_threads();
  for (const int n : {1, 2}) {
    set_num_threads(n);
    const Permuted p = permute(s, x, top);
    Floats out(z(s.tokens) * H), dy(copies * H), dgates(copies), dx(z(s.tokens) * H);
    moe_unpermute(s, y.data(), gates.data(), p.row_of_copy.data(), out.data());
    moe_unpermute_backward(s, dout.data(), y.data(), gates.data(), p.source_of_row.data(),
                           p.row_of_copy.data(), dy.data(), dgates.data());
    moe_permute_backward(s, y.data(), p.row_of_copy.data(), dx.data());
    results[z(n - 1)] = {p.rows, out, dy, dgates, dx};
  }
  set_num_threads(threads);
  for (std::size_t i = 0; i < results[0].size(); ++i)
    EXPECT_TRUE(bitwise_equal(results[0][i], results[1][i])) << "output " << i;
}

// Runs f, expecting std::invalid_argument whose message contains `text`.
::testing::AssertionResult refuses(const std::function<void()>& f, const std::string& text) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find(text) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "message \"" << e.what() << "\" lacks \"" << text << "\"";
  }
  return ::testing::AssertionFailure() << "no std::invalid_argument";
}

TEST(MoeDispatch, RefusesInvalidArguments) {
  Floats x(8), rows(16), gates(4), out(8);
  Index source(4), row_of(4), counts(4);
  const auto run_permute = [&](MoeShape s, const Top& top) {
    return [&, s, top] {
      moe_permute(s, x.data(), top.data(), rows.data(), source.data(), row_of.data(),
                  counts.data());
    };
  };
  EXPECT_TRUE(refuses(run_permute({2, 2, 4, 2}, {0, 1, 4, 2}), "top[1, 0] = 4"));
  EXPECT_TRUE(refuses(run_permute({2, 2, 4, 2}, {0, -2, 1, 2}), "top[0, 1] = -2"));
  // −1 is a dropped slot: then the permuted rows must be the copies (3), not T·k.
  EXPECT_TRUE(refuses(run_permute({2, 2, 4, 2}, {0, -1, 1, 2}), "3 copies for 4 permuted rows"));
  EXPECT_TRUE(refuses(run_permute({2, 2, 4, 0}, {}), "top_k 0"));
  EXPECT_TRUE(refuses(run_permute({2, 0, 4, 1}, {0, 1}), "hidden 0"));
  EXPECT_TRUE(refuses(run_permute({-1, 2, 4, 1}, {}), "tokens -1"));
  const Index bad_rows{0, 1, 4, 2};  // T·k = 4 rows: 4 is out of range
  EXPECT_TRUE(refuses(
      [&] {
        moe_unpermute({2, 2, 4, 2}, rows.data(), gates.data(), bad_rows.data(), out.data());
      },
      "row_of_copy[2] = 4"));
  EXPECT_TRUE(refuses(
      [&] {
        moe_permute_backward({2, 2, 4, 2}, rows.data(), bad_rows.data(), out.data());
      },
      "row_of_copy[2] = 4"));
  Floats dy(16), dgates(4);
  const Index good_rows{0, 1, 2, 3};
  EXPECT_TRUE(refuses(
      [&] {
        moe_unpermute_backward({2, 2, 4, 2}, out.data(), rows.data(), gates.data(), bad_rows.data(),
                               good_rows.data(), dy.data(), dgates.data());
      },
      "source_of_row[2] = 4"));

  Floats w(4 * 2 * 3), y(4 * 3), dx(4 * 2), dw(w.size());
  const auto run_gemm = [&](GroupedGemmShape g, const Index& tpe) {
    return [&, g, tpe] { moe_grouped_gemm(g, rows.data(), w.data(), tpe.data(), y.data()); };
  };
  EXPECT_TRUE(refuses(run_gemm({4, 4, 2, 3}, {1, 1, 1, 0}), "sums to 3, rows 4"));
  EXPECT_TRUE(refuses(run_gemm({4, 4, 2, 3}, {3, -1, 2, 0}), "tokens_per_expert[1] = -1"));
  EXPECT_TRUE(refuses(run_gemm({4, 0, 2, 3}, {}), "experts 0"));
  const Index tpe{4, 1, 0, 0};
  EXPECT_TRUE(refuses(
      [&] {
        moe_grouped_gemm_backward({4, 4, 2, 3}, rows.data(), w.data(), y.data(), tpe.data(),
                                  dx.data(), dw.data());
      },
      "moe_grouped_gemm_backward: tokens_per_expert sums to 5"));
}

}  // namespace
}  // namespace tandem::kernels::cpu
