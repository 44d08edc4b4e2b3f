// The mixture-of-experts top-k router on the CPU, as Megatron's TopKRouter computes it
// with the softmax score function and the "aux_loss" load balancing:
//   probs  = softmax(logits) over all experts (what the auxiliary loss reads)
//   top    = the k best experts of each token (ties: the lower expert index first)
//   gates  = pre_softmax ? probs at top : softmax of the logits at top (Megatron's default,
//            moe_router_pre_softmax = false: the k weights of a token sum to 1)
//   tokens_per_expert = how many tokens picked each expert
//   aux_loss = coeff · E / (k · T²) · Σ_e (Σ_t probs(t, e)) · tokens_per_expert(e)
//            (switch_load_balancing_loss_func; exactly coeff when the load is balanced)
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct RouterShape {
  std::int64_t tokens = 0;   // T
  std::int64_t experts = 0;  // E
  std::int64_t top_k = 0;    // k ≤ E
  bool pre_softmax = false;  // gates from the softmax over all experts
  // Experts by position (math::router_forced_top_k), not by score; gates as usual.
  bool force_balance = false;
};

// Throws std::invalid_argument unless tokens ≥ 0 and 1 ≤ top_k ≤ experts.
void router_top_k(RouterShape s, const float* logits,  // (T, E)
                  float* probs,                        // (T, E)
                  std::int32_t* top,                   // (T, k) best first
                  float* gates,                        // (T, k)
                  std::int64_t* tokens_per_expert);    // (E)

// The load-balancing loss from router_top_k's probs and counts. Sums in double, in token
// order: the value does not depend on the thread count.
float router_aux_loss(RouterShape s, const float* probs,  // (T, E)
                      const std::int64_t* tokens_per_expert, float coeff);

// dlogits (T, E) written: the gradient of the gates (T, k) back through the router, plus
// aux_grad (E; null: none) into every probability (kernels/math/router.hpp).
void router_backward(RouterShape s, const float* probs, const std::int32_t* top, const float* gates,
                     const float* grad_gates, const float* aux_grad, float* dlogits);

}  // namespace tandem::kernels::cpu
