#include "kernels/cpu/router.hpp"

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/math/exp.hpp"
#include "kernels/math/router.hpp"

namespace tandem::kernels::cpu {

namespace {

void check(RouterShape s) {
  if (s.tokens < 0 || s.top_k < 1 || s.top_k > s.experts)
    throw std::invalid_argument("router: tokens " + std::to_string(s.tokens) + ", experts " +
                                std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) +
                                ": need tokens ≥ 0 and 1 ≤ top_k ≤ experts");
  check_router_groups(s);
  if (s.grad_gates_width != 0 && s.grad_gates_width < s.top_k)
    throw std::invalid_argument("router: grad_gates_width " + std::to_string(s.grad_gates_width) +
                                " must be 0 or at least top_k " + std::to_string(s.top_k));
}

// What the experts are chosen by: the logits for softmax (monotonic: they rank the
// experts as the probabilities do, ties included, and keep ties that rounding of exp could
// split), the probabilities when groups sum them (pre_softmax), the sigmoid scores.
const float* choice_base(RouterShape s, const float* logits_row, const float* probs_row) {
  if (s.score == RouterScore::sigmoid) return probs_row;
  return s.pre_softmax && s.num_groups > 0 ? probs_row : logits_row;
}

}  // namespace

void check_router_groups(RouterShape s) {
  if (s.num_groups == 0 && s.group_topk == 0) return;
  const bool ok = s.num_groups >= 1 && s.experts % s.num_groups == 0 && s.group_topk >= 1 &&
                  s.group_topk <= s.num_groups &&
                  s.top_k <= s.group_topk * (s.experts / s.num_groups);
  if (!ok)
    throw std::invalid_argument(
        "router: num_groups " + std::to_string(s.num_groups) + ", group_topk " +
        std::to_string(s.group_topk) + ", experts " + std::to_string(s.experts) + ", top_k " +
        std::to_string(s.top_k) +
        ": need num_groups dividing the experts, 1 ≤ group_topk ≤ num_groups and top_k ≤ "
        "group_topk · experts / num_groups");
}

void router_top_k(RouterShape s, const float* logits, float* probs, std::int32_t* top, float* gates,
                  std::int64_t* tokens_per_expert, const float* expert_bias,
                  std::int64_t* aux_tokens_per_expert) {
  check(s);
  const std::int64_t E = s.experts, k = s.top_k;
  const auto Ei = static_cast<std::int32_t>(E), ki = static_cast<std::int32_t>(k);
  for (std::int64_t e = 0; e < E; ++e) tokens_per_expert[e] = 0;
  if (aux_tokens_per_expert != nullptr)
    for (std::int64_t e = 0; e < E; ++e) aux_tokens_per_expert[e] = 0;
  const float* bias = s.score == RouterScore::sigmoid ? expert_bias : nullptr;
  // The aux loss counts the plain top-k of its scores, which the routing's choice equals
  // unless a bias or groups changed it (or the experts are forced).
  const bool aux_differs = !s.force_balance && (bias != nullptr || s.num_groups > 0);
  std::vector<float> group_scores(static_cast<std::size_t>(std::max(1, s.num_groups)));
  std::vector<std::int32_t> plain(static_cast<std::size_t>(k));
  // Serial over tokens: the counts are a reduction, and the router is a sliver of the step.
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const float* row = logits + t * E;
    float* p = probs + t * E;
    if (s.score == RouterScore::sigmoid) {
      for (std::int64_t e = 0; e < E; ++e) p[e] = math::router_sigmoid(row[e]);
    } else {
      std::copy(row, row + E, p);
      math::router_softmax_in_place(p, E);
    }
    std::int32_t* mine = top + t * k;
    if (s.force_balance) {
      math::router_forced_top_k(t, Ei, ki, mine);
    } else {
      const float* base = choice_base(s, row, p);
      if (s.num_groups > 0)
        math::router_group_scores(base, bias, Ei, s.num_groups, ki / s.group_topk,
                                  group_scores.data());
      math::router_top_k_limited(base, bias, Ei, ki,
                                 s.num_groups > 0 ? group_scores.data() : nullptr, s.num_groups,
                                 s.group_topk, mine);
    }
    float* g = gates + t * k;
    for (std::int64_t j = 0; j < k; ++j) {
      ++tokens_per_expert[mine[j]];
      g[j] = s.score == RouterScore::softmax && !s.pre_softmax ? row[mine[j]] : p[mine[j]];
    }
    math::router_gates_in_place(s.score, s.pre_softmax, g, ki, s.scale);
    if (aux_tokens_per_expert == nullptr) continue;
    if (!aux_differs) {
      for (std::int64_t j = 0; j < k; ++j) ++aux_tokens_per_expert[mine[j]];
    } else {
      math::router_top_k(row, Ei, ki, plain.data());
      for (std::int64_t j = 0; j < k; ++j)
        ++aux_tokens_per_expert[plain[static_cast<std::size_t>(j)]];
    }
  }
}

void router_backward(RouterShape s, const float* probs, const std::int32_t* top, const float* gates,
                     const float* grad_gates, const float* aux_grad, float* dlogits) {
  check(s);
  const auto E = static_cast<std::int32_t>(s.experts);
  const auto k = static_cast<std::int32_t>(s.top_k);
  const std::int64_t W = s.grad_gates_width > 0 ? s.grad_gates_width : s.top_k;
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    float* out = dlogits + t * E;
    math::router_backward_token(s.score, probs + t * E, aux_grad, top + t * k, gates + t * k,
                                grad_gates + t * W, E, k, s.pre_softmax, s.scale,
                                [out](std::int32_t e, float d) { out[e] = d; });
  }
}

float router_aux_loss(RouterShape s, const float* probs, const std::int64_t* tokens_per_expert,
                      float coeff) {
  check(s);
  if (s.tokens == 0) return 0;
  const std::int64_t E = s.experts;
  std::vector<double> per_expert(static_cast<std::size_t>(E), 0.0);  // Σ_t p(t, e)
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    // Sigmoid scores are normalised over the row first (compute_routing_scores_for_aux_loss).
    double row_sum = 1.0;
    if (s.score == RouterScore::sigmoid) {
      row_sum = 1e-20;
      for (std::int64_t e = 0; e < E; ++e) row_sum += probs[t * E + e];
    }
    for (std::int64_t e = 0; e < E; ++e)
      per_expert[static_cast<std::size_t>(e)] += probs[t * E + e] / row_sum;
  }
  double dot = 0;
  for (std::int64_t e = 0; e < E; ++e)
    dot += per_expert[static_cast<std::size_t>(e)] * static_cast<double>(tokens_per_expert[e]);
  const double T = static_cast<double>(s.tokens);
  return static_cast<float>(dot * static_cast<double>(E) * coeff /
                            (static_cast<double>(s.top_k) * T * T));
}

void moe_drop_tokens(TokenDropShape s, const std::int32_t* top, const float* gates,
                     std::int32_t* dispatch_top, float* dispatch_gates,
                     std::int64_t* tokens_per_expert) {
  if (s.tokens < 0 || s.top_k < 1 || s.top_k > s.experts || s.capacity < 0)
    throw std::invalid_argument(
        "moe_drop_tokens: tokens " + std::to_string(s.tokens) + ", experts " +
        std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) + ", capacity " +
        std::to_string(s.capacity) + ": need tokens ≥ 0, 1 ≤ top_k ≤ experts and capacity ≥ 0");
  const std::int64_t T = s.tokens, k = s.top_k, E = s.experts, W = s.width();
  const std::int64_t keep = std::min(s.capacity, T);
  for (std::int64_t i = 0; i < T * k; ++i)
    if (top[i] < 0 || top[i] >= E)
      throw std::invalid_argument("moe_drop_tokens: top[" + std::to_string(i / k) + ", " +
                                  std::to_string(i % k) + "] = " + std::to_string(top[i]) +
                                  ": need an expert index in [0, experts = " + std::to_string(E) +
                                  ")");
  std::fill(dispatch_top, dispatch_top + T * W, -1);
  std::fill(dispatch_gates, dispatch_gates + T * W, 0.0f);
  // Each expert's routed copies in the policy's order; the first `keep` stay.
  std::vector<std::vector<std::int64_t>> copies(static_cast<std::size_t>(E));
  for (std::int64_t i = 0; i < T * k; ++i) copies[static_cast<std::size_t>(top[i])].push_back(i);
  for (std::int64_t e = 0; e < E; ++e) {
    auto& c = copies[static_cast<std::size_t>(e)];
    std::stable_sort(c.begin(), c.end(), [&](std::int64_t a, std::int64_t b) {
      return math::moe_drop_ranks_before(s.policy, gates[a], a / k, gates[b], b / k);
    });
    const auto kept = std::min<std::int64_t>(keep, static_cast<std::int64_t>(c.size()));
    for (std::int64_t r = 0; r < kept; ++r) {
      const std::int64_t i = c[static_cast<std::size_t>(r)];
      dispatch_top[(i / k) * W + i % k] = static_cast<std::int32_t>(e);
      dispatch_gates[(i / k) * W + i % k] = gates[i];
    }
    tokens_per_expert[e] = kept;
  }
  if (!s.pad_to_capacity) return;
  // Filler rows, expert by expert, so each token's fillers sit in expert order.
  std::vector<std::int64_t> fillers(static_cast<std::size_t>(T), 0);
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t need = keep - tokens_per_expert[e];
    const std::int64_t bound =
        math::moe_filler_bound(top, T, k, static_cast<std::int32_t>(e), need);
    for (std::int64_t t = 0; t < bound; ++t) {
      if (math::moe_routed_to(top + t * k, k, static_cast<std::int32_t>(e))) continue;
      const std::int64_t slot = k + fillers[static_cast<std::size_t>(t)]++;
      dispatch_top[t * W + slot] = static_cast<std::int32_t>(e);
      ++tokens_per_expert[e];
    }
  }
}

}  // namespace tandem::kernels::cpu
