// FLOPs per iteration of a GPT, as the field reports them.
//  - megatron_log_flops: what Megatron-LM's training log uses today
//    (training.py num_floating_point_operations for a dense GPT with a 4h MLP): the
//    attention-score term halved for the causal mask, 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)).
//  - paper_model_flops: Narayanan et al. 2021 / Korthikanti et al. 2022 eq. 7, the
//    formula of the published tables: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)), with 96 and
//    16 in place of 72 and 12 when full recomputation adds a forward pass (hardware FLOPs).
#pragma once

#include <cstdint>

namespace tandem {

struct FlopsShape {
  double global_batch = 0;  // B, sequences per iteration
  double seq = 0;           // s
  double layers = 0;        // L
  double hidden = 0;        // h
  double vocab = 0;         // V (padded)
};

inline double megatron_log_flops(const FlopsShape& m) {
  return 72.0 * m.global_batch * m.seq * m.layers * m.hidden * m.hidden *
         (1.0 + m.seq / (12.0 * m.hidden) + m.vocab / (12.0 * m.layers * m.hidden));
}

inline double paper_model_flops(const FlopsShape& m, bool full_recompute = false) {
  const double k = full_recompute ? 96.0 : 72.0, v = full_recompute ? 16.0 : 12.0;
  return k * m.global_batch * m.seq * m.layers * m.hidden * m.hidden *
         (1.0 + m.seq / (6.0 * m.hidden) + m.vocab / (v * m.layers * m.hidden));
}

}  // namespace tandem
