// Softmax pieces shared by attention and the vocab-parallel cross entropy.
// A SoftmaxState is the (max, Σ exp(x - max)) summary of a set of values; states of
// disjoint sets combine exactly (the online-softmax rule), which is what merges the
// vocab shards of tensor-parallel ranks (all-reduce of the max, then of the rescaled
// sums) and what a flash-attention kernel does tile by tile.
#pragma once

#include <cfloat>
#include <cmath>

#include "kernels/math/exp.hpp"
#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

struct SoftmaxState {
  float max = -FLT_MAX;  // not -inf: exp(-inf - -inf) would be NaN
  float sum = 0;         // Σ exp(x - max)
};

// Adds one value to a running state.
TANDEM_HOST_DEVICE inline SoftmaxState softmax_push(SoftmaxState s, float x) {
  if (x > s.max) return SoftmaxState{.max = x, .sum = s.sum * exp_approx(s.max - x) + 1.0f};
  return SoftmaxState{.max = s.max, .sum = s.sum + exp_approx(x - s.max)};
}

// The state of the union of two disjoint sets.
TANDEM_HOST_DEVICE inline SoftmaxState softmax_combine(SoftmaxState a, SoftmaxState b) {
  const float m = a.max > b.max ? a.max : b.max;
  return SoftmaxState{.max = m,
                      .sum = a.sum * exp_approx(a.max - m) + b.sum * exp_approx(b.max - m)};
}

// Cross-entropy loss of one row from its global softmax state and its target logit:
// -log softmax(target) = log Σ exp(x - max) + max - x_target.
TANDEM_HOST_DEVICE inline float cross_entropy_row_loss(SoftmaxState s, float target_logit) {
  return std::log(s.sum) + s.max - target_logit;
}

// Gradient of one logit of the cross entropy without its one-hot term, from the row's
// global max and `dloss_over_sum` = dloss(row) / Σ exp(x - max): softmax(x)·dloss. The
// target's column then subtracts dloss.
TANDEM_HOST_DEVICE inline float cross_entropy_logit_grad(float x, float max, float dloss_over_sum) {
  return exp_approx(x - max) * dloss_over_sum;
}

// Backward through y = softmax(x) for one element: dx = y·(dy - Σ_j y_j·dy_j).
TANDEM_HOST_DEVICE inline float softmax_input_grad(float y, float dy, float dot_y_dy) {
  return y * (dy - dot_y_dy);
}

}  // namespace tandem::kernels::math
