// Per-row math of the mixture-of-experts top-k router (Megatron's TopKRouter with the
// softmax score function): which k experts a token goes to, deterministically. Experts
// are ranked by score, highest first; equal scores rank the lower expert index first, so
// a run routes the same tokens to the same experts whatever the hardware (torch.topk
// leaves ties unspecified).
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

// top(k) = the k best experts of one row of scores (experts), best first. O(experts · k):
// k is small (1, 2, 8) and this needs no scratch memory.
TANDEM_HOST_DEVICE inline void router_top_k(const float* scores, std::int32_t experts,
                                            std::int32_t k, std::int32_t* top) {
  for (std::int32_t slot = 0; slot < k; ++slot) {
    std::int32_t best = -1;
    for (std::int32_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (std::int32_t s = 0; s < slot; ++s) taken = taken || top[s] == e;
      if (taken) continue;
      if (best < 0 || router_ranks_before(scores[e], e, scores[best], best)) best = e;
    }
    top[slot] = best;
  }
}

// Megatron's moe_router_force_load_balancing, made deterministic: copy i = t·k + slot goes
// to expert i mod experts, so every expert gets T·k / E copies (the first T·k mod E one
// more) and a token's k experts differ (k ≤ experts).
TANDEM_HOST_DEVICE inline void router_forced_top_k(std::int64_t token, std::int32_t experts,
                                                   std::int32_t k, std::int32_t* top) {
  for (std::int32_t slot = 0; slot < k; ++slot)
    top[slot] = static_cast<std::int32_t>((token * k + slot) % experts);
}

// d logits(e) of one token. The gradient reaching the probabilities is aux_grad[e] (the
// load-balancing loss's, null: none) plus, with pre_softmax (gates = probs at top), the
// gates' gradient at the token's experts; it goes back through the softmax over all
// experts. Without pre_softmax the gates are a softmax of the logits at top, and their
// gradient goes back through it into those logits. No scratch: E may be in the hundreds.
TANDEM_HOST_DEVICE inline float router_probs_grad(const float* aux_grad, const std::int32_t* top,
                                                  const float* grad_gates, std::int32_t k,
                                                  bool pre_softmax, std::int32_t e) {
  float g = aux_grad != nullptr ? aux_grad[e] : 0.0f;
  if (pre_softmax)
    for (std::int32_t j = 0; j < k; ++j) g += top[j] == e ? grad_gates[j] : 0.0f;
  return g;
}

// Σ_e probs(e) · d probs(e), the softmax backward's shared term, for one token.
TANDEM_HOST_DEVICE inline float router_probs_dot(const float* probs, const float* aux_grad,
                                                 const std::int32_t* top, const float* grad_gates,
                                                 std::int32_t experts, std::int32_t k,
                                                 bool pre_softmax) {
  float dot = 0;
  if (aux_grad != nullptr)
    for (std::int32_t e = 0; e < experts; ++e) dot += probs[e] * aux_grad[e];
  if (pre_softmax)
    for (std::int32_t j = 0; j < k; ++j) dot += probs[top[j]] * grad_gates[j];
  return dot;
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

// d logits(e) of one token, from router_probs_dot's `dot` and (without pre_softmax)
// gate_dot = Σ_j gates[j] · grad_gates[j].
TANDEM_HOST_DEVICE inline float router_logit_grad(const float* probs, const float* aux_grad,
                                                  const std::int32_t* top, const float* gates,
                                                  const float* grad_gates, std::int32_t k,
                                                  bool pre_softmax, float dot, float gate_dot,
                                                  std::int32_t e) {
  float d = probs[e] * (router_probs_grad(aux_grad, top, grad_gates, k, pre_softmax, e) - dot);
  if (!pre_softmax)
    for (std::int32_t j = 0; j < k; ++j)
      d += top[j] == e ? gates[j] * (grad_gates[j] - gate_dot) : 0.0f;
  return d;
}

// The whole backward of one token: store(e, d logits(e)) for every expert.
template <typename Store>
TANDEM_HOST_DEVICE inline void router_backward_token(const float* probs, const float* aux_grad,
                                                     const std::int32_t* top, const float* gates,
                                                     const float* grad_gates, std::int32_t experts,
                                                     std::int32_t k, bool pre_softmax,
                                                     Store store) {
  const float dot = router_probs_dot(probs, aux_grad, top, grad_gates, experts, k, pre_softmax);
  float gate_dot = 0;
  for (std::int32_t j = 0; j < k; ++j) gate_dot += gates[j] * grad_gates[j];
  for (std::int32_t e = 0; e < experts; ++e)
    store(e, router_logit_grad(probs, aux_grad, top, gates, grad_gates, k, pre_softmax, dot,
                               gate_dot, e));
}

}  // namespace tandem::kernels::math
