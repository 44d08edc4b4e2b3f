// Per-row math of the mixture-of-experts top-k router (Megatron's TopKRouter with the
// softmax score function): which k experts a token goes to, deterministically. Experts
// are ranked by score, highest first; equal scores rank the lower expert index first, so
// a run routes the same tokens to the same experts whatever the hardware (torch.topk
// leaves ties unspecified).
#pragma once

#include <cstdint>

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

}  // namespace tandem::kernels::math
