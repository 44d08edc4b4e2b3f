// AdamW on one fp32 element, with PyTorch's torch.optim.AdamW semantics (Megatron's
// fused Adam in adam_w_mode computes the same): decoupled weight decay p -= lr·wd·p,
// moments m = β1·m + (1-β1)·g and v = β2·v + (1-β2)·g², then
// p -= lr·m̂ / (sqrt(v̂) + ε) with the bias-corrected m̂ = m / (1-β1^t), v̂ = v / (1-β2^t)
// for the 1-based step t. The per-step scalars are computed once, in double, on the
// host (make_adam_step); the per-element update is what every binding runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

struct AdamHyperparameters {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0;
  float grad_scale = 1;  // gradients are multiplied by this first (global-norm clipping)
};

// The scalars of one optimizer step, shared by all elements.
struct AdamStep {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float decay = 1;                 // 1 - lr·wd: decoupled weight decay as a factor
  float step_size = 0;             // lr / (1 - β1^t)
  float inv_sqrt_correction2 = 1;  // 1 / sqrt(1 - β2^t)
  float grad_scale = 1;
};

// step is 1-based (the first update uses t = 1), as in PyTorch and Megatron.
inline AdamStep make_adam_step(const AdamHyperparameters& h, std::int64_t step) {
  const double t = static_cast<double>(step);
  const double correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), t);
  const double correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), t);
  return AdamStep{
      .beta1 = h.beta1,
      .beta2 = h.beta2,
      .epsilon = h.epsilon,
      .decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay),
      .step_size = static_cast<float>(h.lr / correction1),
      .inv_sqrt_correction2 = static_cast<float>(1.0 / std::sqrt(correction2)),
      .grad_scale = h.grad_scale,
  };
}

// Updates one parameter p and its moments m, v from its gradient g.
TANDEM_HOST_DEVICE inline void adamw_update(float& p, float g, float& m, float& v,
                                            const AdamStep& s) {
  g *= s.grad_scale;
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  // sqrt(v̂) + ε = sqrt(v)/sqrt(1-β2^t) + ε, as torch computes the denominator.
  const float denom = std::sqrt(v) * s.inv_sqrt_correction2 + s.epsilon;
  p = p * s.decay - s.step_size * m / denom;
}

// Loss scaling's unscale of one gradient element: g · inv_scale, and whether g was an inf or
// a NaN (found by its exponent bits, all ones: no fast-math assumption can fold it away).
TANDEM_HOST_DEVICE inline bool unscale_is_finite(float& g, float inv_scale) {
  std::uint32_t bits = 0;
  static_assert(sizeof bits == sizeof g);
  const unsigned char* from = reinterpret_cast<const unsigned char*>(&g);
  unsigned char* to = reinterpret_cast<unsigned char*>(&bits);
  for (unsigned i = 0; i < sizeof bits; ++i) to[i] = from[i];
  g *= inv_scale;
  return (bits & 0x7f800000u) != 0x7f800000u;
}

}  // namespace tandem::kernels::math
