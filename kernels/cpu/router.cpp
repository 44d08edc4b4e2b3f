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
}

}  // namespace

void router_top_k(RouterShape s, const float* logits, float* probs, std::int32_t* top, float* gates,
                  std::int64_t* tokens_per_expert) {
  check(s);
  const std::int64_t E = s.experts, k = s.top_k;
  for (std::int64_t e = 0; e < E; ++e) tokens_per_expert[e] = 0;
  std::vector<float> picked(static_cast<std::size_t>(k));
  // Serial over tokens: the counts are a reduction, and the router is a sliver of the step.
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const float* row = logits + t * E;
    std::copy(row, row + E, probs + t * E);
    math::router_softmax_in_place(probs + t * E, E);
    std::int32_t* mine = top + t * k;
    // softmax is monotonic: the logits rank the experts as the probabilities do, ties
    // included, and ranking the logits keeps ties that rounding of exp could split.
    if (s.force_balance)
      math::router_forced_top_k(t, static_cast<std::int32_t>(E), static_cast<std::int32_t>(k),
                                mine);
    else
      math::router_top_k(row, static_cast<std::int32_t>(E), static_cast<std::int32_t>(k), mine);
    for (std::int64_t j = 0; j < k; ++j) {
      ++tokens_per_expert[mine[j]];
      picked[static_cast<std::size_t>(j)] = row[mine[j]];
    }
    if (s.pre_softmax) {
      for (std::int64_t j = 0; j < k; ++j) gates[t * k + j] = probs[t * E + mine[j]];
    } else {
      std::copy(picked.begin(), picked.end(), gates + t * k);
      math::router_softmax_in_place(gates + t * k, k);
    }
  }
}

void router_backward(RouterShape s, const float* probs, const std::int32_t* top, const float* gates,
                     const float* grad_gates, const float* aux_grad, float* dlogits) {
  check(s);
  const auto E = static_cast<std::int32_t>(s.experts);
  const auto k = static_cast<std::int32_t>(s.top_k);
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    float* out = dlogits + t * E;
    math::router_backward_token(probs + t * E, aux_grad, top + t * k, gates + t * k,
                                grad_gates + t * k, E, k, s.pre_softmax,
                                [out](std::int32_t e, float d) { out[e] = d; });
  }
}

float router_aux_loss(RouterShape s, const float* probs, const std::int64_t* tokens_per_expert,
                      float coeff) {
  check(s);
  if (s.tokens == 0) return 0;
  const std::int64_t E = s.experts;
  std::vector<double> per_expert(static_cast<std::size_t>(E), 0.0);  // Σ_t probs(t, e)
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t e = 0; e < E; ++e)
      per_expert[static_cast<std::size_t>(e)] += probs[t * E + e];
  double dot = 0;
  for (std::int64_t e = 0; e < E; ++e)
    dot += per_expert[static_cast<std::size_t>(e)] * static_cast<double>(tokens_per_expert[e]);
  const double T = static_cast<double>(s.tokens);
  return static_cast<float>(dot * static_cast<double>(E) * coeff /
                            (static_cast<double>(s.top_k) * T * T));
}

}  // namespace tandem::kernels::cpu
