// The mixture-of-experts top-k router on the CPU, as Megatron's TopKRouter computes it
// (topk_routing_with_score_function, kernels/math/router.hpp) with "aux_loss" balancing:
//   probs  = the scores: softmax(logits) over all experts, or sigmoid(logits) per expert
//   top    = the k best experts of each token (ties: the lower expert index first), chosen
//            by the logits (softmax), by probs (softmax with pre_softmax and groups), or by
//            sigmoid + expert_bias; with groups, only inside the group_topk best groups
//   gates  = scale · (softmax: pre_softmax ? probs at top : softmax of the logits at top;
//            sigmoid: the scores at top over their sum, k > 1)
//   tokens_per_expert = how many tokens picked each expert
//   aux_tokens_per_expert = the same for the plain top-k of the scores, which is what the
//            aux loss counts (compute_routing_scores_for_aux_loss: no bias, no groups)
//   aux_loss = coeff · E / (k · T²) · Σ_e (Σ_t p(t, e)) · aux_tokens_per_expert(e), p the
//            softmax probabilities or the sigmoid scores over their row sum
//            (switch_load_balancing_loss_func; exactly coeff when the load is balanced)
// and the token dropping of a capacity factor (moe_drop_tokens below).
#pragma once

#include <cstdint>

#include "kernels/math/router.hpp"

namespace tandem::kernels::cpu {

using math::RouterScore;
using math::TokenDropPolicy;

struct RouterShape {
  std::int64_t tokens = 0;   // T
  std::int64_t experts = 0;  // E
  std::int64_t top_k = 0;    // k ≤ E
  bool pre_softmax = false;  // gates from the softmax over all experts
  // Experts by position (math::router_forced_top_k), not by score; gates as usual.
  bool force_balance = false;
  RouterScore score = RouterScore::softmax;
  int num_groups = 0;  // group-limited routing (0: off): experts in num_groups groups,
  int group_topk = 0;  // the k chosen inside the group_topk best groups
  float scale = 1.0f;  // moe_router_topk_scaling_factor on the gates
  // Row stride of the gates' gradient in router_backward (0: top_k): the dispatch's wider
  // (T, k + E) table under pad_to_capacity, whose first k columns are the router's.
  std::int64_t grad_gates_width = 0;
};

// Throws std::invalid_argument naming the rule unless the groups divide the experts, each
// chosen group set can hold k experts (k ≤ group_topk · E / groups) and
// 1 ≤ group_topk ≤ num_groups (or both 0).
void check_router_groups(RouterShape s);

// Throws std::invalid_argument unless tokens ≥ 0 and 1 ≤ top_k ≤ experts.
// expert_bias (E; null: none) only with the sigmoid score; aux_tokens_per_expert (E)
// written when not null.
void router_top_k(RouterShape s, const float* logits,              // (T, E)
                  float* probs,                                    // (T, E)
                  std::int32_t* top,                               // (T, k) best first
                  float* gates,                                    // (T, k)
                  std::int64_t* tokens_per_expert,                 // (E)
                  const float* expert_bias = nullptr,              // (E)
                  std::int64_t* aux_tokens_per_expert = nullptr);  // (E)

// The load-balancing loss from router_top_k's probs and counts. Sums in double, in token
// order: the value does not depend on the thread count.
float router_aux_loss(RouterShape s, const float* probs,  // (T, E)
                      const std::int64_t* tokens_per_expert, float coeff);

// dlogits (T, E) written: the gradient of the gates (T, k; rows grad_gates_width apart in
// grad_gates) back through the router, plus aux_grad (E; null: none) into every aux-loss
// score (kernels/math/router.hpp).
void router_backward(RouterShape s, const float* probs, const std::int32_t* top, const float* gates,
                     const float* grad_gates, const float* aux_grad, float* dlogits);

// Token dropping (kernels/math/router.hpp): which routed copies each expert keeps.
struct TokenDropShape {
  std::int64_t tokens = 0;    // T, this rank's batch
  std::int64_t experts = 0;   // E
  std::int64_t top_k = 0;     // k
  std::int64_t capacity = 0;  // math::moe_expert_capacity(T, k, E, factor)
  TokenDropPolicy policy = TokenDropPolicy::probs;
  bool pad_to_capacity = false;
  // The dispatch table's width: k, or k + E with padding (a token's filler rows after its
  // k routed slots, one per expert at most).
  TANDEM_HOST_DEVICE std::int64_t width() const {
    return pad_to_capacity ? top_k + experts : top_k;
  }
};

// dispatch_top / dispatch_gates (T, width) written: slot j < k is the router's copy, or −1
// with gate 0 when dropped; with padding the slots after k hold the token's filler rows
// (expert, gate 0) in expert order, then −1. tokens_per_expert (E) = the rows each expert
// gets (kept + fillers). Throws std::invalid_argument unless tokens ≥ 0, 1 ≤ k ≤ experts,
// capacity ≥ 0 and every top entry is an expert.
void moe_drop_tokens(TokenDropShape s, const std::int32_t* top,  // (T, k)
                     const float* gates,                         // (T, k)
                     std::int32_t* dispatch_top,                 // (T, width)
                     float* dispatch_gates,                      // (T, width)
                     std::int64_t* tokens_per_expert);           // (E)

}  // namespace tandem::kernels::cpu
