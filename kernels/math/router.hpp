// Per-row math of the mixture-of-experts top-k router (Megatron-Core's TopKRouter and
// topk_routing_with_score_function): the score function (softmax, or DeepSeek-V3's sigmoid),
// which k experts a token goes to (optionally group-limited, optionally with the
// aux-loss-free expert bias added for the choice only), the gates (top-k weights: a softmax
// of the chosen logits, the chosen probabilities, or the chosen sigmoid scores normalised to
// sum to 1; each times the top-k scaling factor), their backward, and the capacity rule of
// token dropping (apply_router_token_dropping). Experts are ranked by score, highest first;
// equal scores rank the lower expert index first, so a run routes the same tokens to the
// same experts whatever the hardware (torch.topk leaves ties unspecified).
#pragma once

#include <cfloat>
#include <cstdint>

#include "kernels/math/exp.hpp"
#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// True when expert a ranks before expert b: a higher score, or an equal one and a lower
// index.
TANDEM_HOST_DEVICE inline bool router_ranks_before(float score_a, std::int32_t a, float score_b,
                                                   std::int32_t b) {
  return score_a > score_b || (score_a == score_b && a < b);
}

// Megatron's score functions: softmax over the experts, or DeepSeek-V3's sigmoid per expert.
enum class RouterScore : std::int32_t { softmax = 0, sigmoid = 1 };

TANDEM_HOST_DEVICE inline float router_sigmoid(float x) {
  return 1.0f / (1.0f + exp_approx(-x));
}

// What an expert is chosen by: base[e], plus bias[e] when there is a bias (the aux-loss-free
// expert bias; it changes the choice, never the gates).
TANDEM_HOST_DEVICE inline float router_choice_score(const float* base, const float* bias,
                                                    std::int32_t e) {
  return bias != nullptr ? base[e] + bias[e] : base[e];
}

// The next expert in rank order after `prev` (−1: the best) among [first, first + count),
// skipping the experts `allowed` says no to; −1 when none is left. Ranking by "the best that
// ranks after the previous pick" needs no scratch and gives the sorted top-k.
template <typename Allowed>
TANDEM_HOST_DEVICE inline std::int32_t router_next_best(const float* base, const float* bias,
                                                        std::int32_t first, std::int32_t count,
                                                        std::int32_t prev, Allowed allowed) {
  const float prev_score = prev >= 0 ? router_choice_score(base, bias, prev) : 0.0f;
  std::int32_t best = -1;
  float best_score = 0;
  for (std::int32_t e = first; e < first + count; ++e) {
    if (!allowed(e)) continue;
    const float v = router_choice_score(base, bias, e);
    if (prev >= 0 && !router_ranks_before(prev_score, prev, v, e)) continue;
    if (best < 0 || router_ranks_before(v, e, best_score, best)) {
      best = e;
      best_score = v;
    }
  }
  return best;
}

// top(k) = the k best experts of one row of scores (experts), best first. O(experts · k):
// k is small (1, 2, 8) and this needs no scratch memory.
TANDEM_HOST_DEVICE inline void router_top_k(const float* scores, std::int32_t experts,
                                            std::int32_t k, std::int32_t* top) {
  std::int32_t prev = -1;
  for (std::int32_t slot = 0; slot < k; ++slot)
    top[slot] = prev =
        router_next_best(scores, nullptr, 0, experts, prev, [](std::int32_t) { return true; });
}

// Group-limited routing (Megatron's group_limited_topk; DeepSeek-V3's node-limited routing):
// the experts fall into `groups` equal groups of experts / groups; a group's score is the sum
// of its best m = k / group_topk choice scores (summed best first); the group_topk best
// groups (ties: the lower group index) are chosen, and the k best experts inside them.
// group_scores (groups) is written. Example, 8 experts in 4 groups of 2, k = 2,
// group_topk = 2 (m = 1): scores (.1 .9 | .8 .2 | .3 .3 | .7 .0) give group scores
// (.9, .8, .3, .7), groups 0 and 1, and experts 1 and 2 — not 3, whose .7 ranks second
// overall, as group 3 (.7) lost to group 1 (.8).
TANDEM_HOST_DEVICE inline void router_group_scores(const float* base, const float* bias,
                                                   std::int32_t experts, std::int32_t groups,
                                                   std::int32_t m, float* group_scores) {
  const std::int32_t size = experts / groups;
  for (std::int32_t g = 0; g < groups; ++g) {
    float sum = 0;
    std::int32_t prev = -1;
    for (std::int32_t r = 0; r < m; ++r) {
      prev = router_next_best(base, bias, g * size, size, prev, [](std::int32_t) { return true; });
      if (prev < 0) break;
      sum += router_choice_score(base, bias, prev);
    }
    group_scores[g] = sum;
  }
}

// True when group g is among the group_topk best of group_scores (groups).
TANDEM_HOST_DEVICE inline bool router_group_chosen(const float* group_scores, std::int32_t groups,
                                                   std::int32_t group_topk, std::int32_t g) {
  std::int32_t before = 0;
  for (std::int32_t h = 0; h < groups; ++h)
    before += router_ranks_before(group_scores[h], h, group_scores[g], g) ? 1 : 0;
  return before < group_topk;
}

// The k best experts by base + bias (bias null: none), best first; with group_scores (not
// null) only inside the group_topk chosen groups of `groups`.
TANDEM_HOST_DEVICE inline void router_top_k_limited(const float* base, const float* bias,
                                                    std::int32_t experts, std::int32_t k,
                                                    const float* group_scores, std::int32_t groups,
                                                    std::int32_t group_topk, std::int32_t* top) {
  const std::int32_t size = groups > 0 ? experts / groups : experts;
  auto allowed = [=](std::int32_t e) {
    return group_scores == nullptr ||
           router_group_chosen(group_scores, groups, group_topk, e / size);
  };
  std::int32_t prev = -1;
  for (std::int32_t slot = 0; slot < k; ++slot)
    top[slot] = prev = router_next_best(base, bias, 0, experts, prev, allowed);
}

// y = softmax(y) over n values, in place: from the row's max, the exps summed in index
// order, then divided (the router's probabilities and its top-k gates).
TANDEM_HOST_DEVICE inline void router_softmax_in_place(float* y, std::int64_t n) {
  float max = -FLT_MAX;
  for (std::int64_t i = 0; i < n; ++i) max = y[i] > max ? y[i] : max;
  float sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = exp_approx(y[i] - max);
    sum += y[i];
  }
  for (std::int64_t i = 0; i < n; ++i) y[i] /= sum;
}

// The gates of one token in place: g (k) holds the logits at its experts (softmax without
// pre_softmax) or their scores (softmax probabilities, sigmoid scores) and becomes their
// weights: the softmax of the logits; the probabilities; the sigmoid scores over their sum
// (+ 1e-20, Megatron's guard) when k > 1. Each is then multiplied by `scale`
// (moe_router_topk_scaling_factor; 1: none).
TANDEM_HOST_DEVICE inline void router_gates_in_place(RouterScore f, bool pre_softmax, float* g,
                                                     std::int32_t k, float scale) {
  if (f == RouterScore::softmax && !pre_softmax) {
    router_softmax_in_place(g, k);
  } else if (f == RouterScore::sigmoid && k > 1) {
    float sum = 0;
    for (std::int32_t j = 0; j < k; ++j) sum += g[j];
    for (std::int32_t j = 0; j < k; ++j) g[j] /= sum + 1e-20f;
  }
  if (scale != 1.0f)
    for (std::int32_t j = 0; j < k; ++j) g[j] *= scale;
}

// Megatron's moe_router_force_load_balancing, made deterministic: copy i = t·k + slot goes
// to expert i mod experts, so every expert gets T·k / E copies (the first T·k mod E one
// more) and a token's k experts differ (k ≤ experts).
TANDEM_HOST_DEVICE inline void router_forced_top_k(std::int64_t token, std::int32_t experts,
                                                   std::int32_t k, std::int32_t* top) {
  for (std::int32_t slot = 0; slot < k; ++slot)
    top[slot] = static_cast<std::int32_t>((token * k + slot) % experts);
}

// The backward of one token. `scores` (E) are the forward's: softmax probabilities, or
// sigmoid scores. The gradient reaches the gates as grad_gates (k) and, from the
// load-balancing loss, every expert's aux-loss score as aux_grad (E; null: none) — the
// softmax probabilities, or for sigmoid the scores normalised over all experts,
// s / (Σ s + 1e-20) (Megatron's compute_routing_scores_for_aux_loss). `scale` is the top-k
// scaling factor the gates carry (1: none). No scratch: E may be in the hundreds.

// Softmax, d probs(e) before the softmax's backward: aux_grad[e] plus, with pre_softmax
// (gates = scale · probs at top), scale · the gates' gradient at the token's experts.
TANDEM_HOST_DEVICE inline float router_probs_grad(const float* aux_grad, const std::int32_t* top,
                                                  const float* grad_gates, std::int32_t k,
                                                  bool pre_softmax, float scale, std::int32_t e) {
  float g = aux_grad != nullptr ? aux_grad[e] : 0.0f;
  if (pre_softmax)
    for (std::int32_t j = 0; j < k; ++j) g += top[j] == e ? scale * grad_gates[j] : 0.0f;
  return g;
}

// Σ_e probs(e) · d probs(e), the softmax backward's shared term, for one token.
TANDEM_HOST_DEVICE inline float router_probs_dot(const float* probs, const float* aux_grad,
                                                 const std::int32_t* top, const float* grad_gates,
                                                 std::int32_t experts, std::int32_t k,
                                                 bool pre_softmax, float scale) {
  float dot = 0;
  if (aux_grad != nullptr)
    for (std::int32_t e = 0; e < experts; ++e) dot += probs[e] * aux_grad[e];
  if (pre_softmax)
    for (std::int32_t j = 0; j < k; ++j) dot += probs[top[j]] * scale * grad_gates[j];
  return dot;
}

// Softmax, d logits(e) of one token, from router_probs_dot's `dot` and (without
// pre_softmax) gate_dot = Σ_j gates[j] · grad_gates[j]. Without pre_softmax the gates are
// scale · softmax(logits at top) = scale · q: q_j · (scale · grad_gates[j] − gate_dot) goes
// into logit top[j].
TANDEM_HOST_DEVICE inline float router_logit_grad(const float* probs, const float* aux_grad,
                                                  const std::int32_t* top, const float* gates,
                                                  const float* grad_gates, std::int32_t k,
                                                  bool pre_softmax, float scale, float dot,
                                                  float gate_dot, std::int32_t e) {
  float d =
      probs[e] * (router_probs_grad(aux_grad, top, grad_gates, k, pre_softmax, scale, e) - dot);
  if (!pre_softmax)
    for (std::int32_t j = 0; j < k; ++j)
      d += top[j] == e ? gates[j] / scale * (scale * grad_gates[j] - gate_dot) : 0.0f;
  return d;
}

// Sigmoid, d logits(e) = d s(e) · s(e) · (1 − s(e)), with d s(e) from the aux loss,
// (aux_grad[e] − aux_dot) / (Σ s + 1e-20), aux_dot = Σ_i aux_grad[i] · s_i / (Σ s + 1e-20),
// and from the gates g_j = scale · s_j / Z (Z = Σ_top s + 1e-20, k > 1):
// (scale · grad_gates[j] − gate_dot) / Z into s_{top[j]}; for k = 1, g = scale · s.
TANDEM_HOST_DEVICE inline float router_sigmoid_logit_grad(const float* s, const float* aux_grad,
                                                          const std::int32_t* top,
                                                          const float* grad_gates, std::int32_t k,
                                                          float scale, float all_sum, float aux_dot,
                                                          float top_sum, float gate_dot,
                                                          std::int32_t e) {
  float ds = aux_grad != nullptr ? (aux_grad[e] - aux_dot) / (all_sum + 1e-20f) : 0.0f;
  for (std::int32_t j = 0; j < k; ++j)
    if (top[j] == e)
      ds += k > 1 ? (scale * grad_gates[j] - gate_dot) / (top_sum + 1e-20f) : scale * grad_gates[j];
  return ds * s[e] * (1.0f - s[e]);
}

// The whole backward of one token: store(e, d logits(e)) for every expert.
template <typename Store>
TANDEM_HOST_DEVICE inline void router_backward_token(RouterScore f, const float* scores,
                                                     const float* aux_grad, const std::int32_t* top,
                                                     const float* gates, const float* grad_gates,
                                                     std::int32_t experts, std::int32_t k,
                                                     bool pre_softmax, float scale, Store store) {
  float gate_dot = 0;
  for (std::int32_t j = 0; j < k; ++j) gate_dot += gates[j] * grad_gates[j];
  if (f == RouterScore::sigmoid) {
    float all_sum = 0, aux_dot = 0, top_sum = 0;
    if (aux_grad != nullptr) {
      for (std::int32_t e = 0; e < experts; ++e) all_sum += scores[e];
      for (std::int32_t e = 0; e < experts; ++e)
        aux_dot += aux_grad[e] * (scores[e] / (all_sum + 1e-20f));
    }
    for (std::int32_t j = 0; j < k; ++j) top_sum += scores[top[j]];
    for (std::int32_t e = 0; e < experts; ++e)
      store(e, router_sigmoid_logit_grad(scores, aux_grad, top, grad_gates, k, scale, all_sum,
                                         aux_dot, top_sum, gate_dot, e));
    return;
  }
  const float dot =
      router_probs_dot(scores, aux_grad, top, grad_gates, experts, k, pre_softmax, scale);
  for (std::int32_t e = 0; e < experts; ++e)
    store(e, router_logit_grad(scores, aux_grad, top, gates, grad_gates, k, pre_softmax, scale, dot,
                               gate_dot, e));
}

// ---- token dropping (Megatron's apply_router_token_dropping) -----------------------------
// Each expert takes at most `capacity` = ceil(T·k / E · capacity_factor) of the T tokens of
// a rank's batch (get_capacity; core/device.hpp moe_expert_capacity). Policy probs keeps the copies
// with the highest gates, position the first tokens; the rest are dropped (their gate and its
// gradient become 0). When the capacity reaches T nothing is dropped. With pad_to_capacity every
// expert gets exactly min(capacity, T) rows: after its kept copies, the lowest-index tokens it was
// not routed to, with gate 0 (Megatron's capacity mask, which takes the zeros of the routing
// probabilities once the routed ones run out; ties by token index here).
enum class TokenDropPolicy : std::int32_t { probs = 0, position = 1 };

// True when routed copy (gate_a, token a) keeps its place before copy (gate_b, token b).
TANDEM_HOST_DEVICE inline bool moe_drop_ranks_before(TokenDropPolicy p, float gate_a,
                                                     std::int64_t a, float gate_b, std::int64_t b) {
  if (p == TokenDropPolicy::position) return a < b;
  return gate_a > gate_b || (gate_a == gate_b && a < b);
}

// Whether copy i (token i / k) of top (T, k) stays: fewer than `keep` (= min(capacity, T))
// copies for its expert rank before it. O(T·k): one thread per copy on the GPU.
TANDEM_HOST_DEVICE inline bool moe_copy_kept(TokenDropPolicy p, const std::int32_t* top,
                                             const float* gates, std::int64_t tokens,
                                             std::int64_t k, std::int64_t keep, std::int64_t i) {
  const std::int32_t e = top[i];
  std::int64_t before = 0;
  for (std::int64_t c = 0; c < tokens * k; ++c)
    if (c != i && top[c] == e && moe_drop_ranks_before(p, gates[c], c / k, gates[i], i / k))
      ++before;
  return before < keep;
}

// True when token t (its row of top, k entries) is routed to expert e.
TANDEM_HOST_DEVICE inline bool moe_routed_to(const std::int32_t* top_row, std::int64_t k,
                                             std::int32_t e) {
  for (std::int64_t j = 0; j < k; ++j)
    if (top_row[j] == e) return true;
  return false;
}

// Padding: expert e's `need` filler rows are the tokens below the returned bound that are not
// routed to it (the bound is T when fewer than `need` such tokens exist).
TANDEM_HOST_DEVICE inline std::int64_t moe_filler_bound(const std::int32_t* top,
                                                        std::int64_t tokens, std::int64_t k,
                                                        std::int32_t e, std::int64_t need) {
  std::int64_t found = 0, t = 0;
  for (; t < tokens && found < need; ++t)
    if (!moe_routed_to(top + t * k, k, e)) ++found;
  return t;
}

}  // namespace tandem::kernels::math
