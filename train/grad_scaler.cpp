#include "train/grad_scaler.hpp"

#include <algorithm>

namespace tandem {

namespace {
constexpr double kGrowthFactor = 2.0;   // Megatron's, not a flag
constexpr double kBackoffFactor = 0.5;  // Megatron's, not a flag
}  // namespace

std::optional<GradScaler> GradScaler::of(const TrainingConfig& t) {
  if (!t.fp16 && !t.bf16) return std::nullopt;
  if (t.loss_scale) return GradScaler(false, *t.loss_scale, *t.loss_scale, 1, 1);
  if (!t.fp16) return std::nullopt;
  return GradScaler(true, t.initial_loss_scale, t.min_loss_scale, t.loss_scale_window,
                    t.hysteresis);
}

GradScaler::GradScaler(bool dynamic, double scale, double min_scale, std::int64_t window,
                       std::int64_t hysteresis)
    : dynamic_(dynamic),
      min_scale_(min_scale),
      window_(window),
      hysteresis_(hysteresis),
      state_{.scale = scale, .growth_tracker = 0, .hysteresis_tracker = hysteresis} {}

void GradScaler::update(bool found_non_finite) {
  if (!dynamic_) return;
  if (found_non_finite) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker -= 1;
    if (state_.hysteresis_tracker <= 0)
      state_.scale = std::max(state_.scale * kBackoffFactor, min_scale_);
    return;
  }
  state_.growth_tracker += 1;
  if (state_.growth_tracker == window_) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = hysteresis_;
    state_.scale *= kGrowthFactor;
  }
}

}  // namespace tandem
