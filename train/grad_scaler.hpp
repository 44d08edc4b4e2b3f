// Megatron's loss scaling for fp16 (megatron/core/optimizer/grad_scaler.py): the loss
// gradient is multiplied by the scale before backward, the fp32 main gradients are
// multiplied by its inverse and checked for an inf or a NaN (one flag, all-reduced (max) over
// the ranks that hold gradients of the step), and a step that found one is skipped — no
// optimizer step, no learning-rate step, the parameters as they were. The scale then moves:
//
//   dynamic (fp16)   found: growth count 0, hysteresis count − 1; at 0 the scale halves, not
//                    below min_loss_scale (and stays at 0: every further such step halves it)
//                    none: growth count + 1; at loss_scale_window it resets, the hysteresis
//                    count is reset to `hysteresis`, the scale doubles
//   constant         loss_scale, whatever is found (--loss-scale, fp16 or bf16)
//
// Pure host arithmetic: the step (train/trainer.cpp) reads scale() and calls update().
#pragma once

#include <cstdint>
#include <optional>

#include "core/scenario.hpp"

namespace tandem {

struct GradScalerState {
  double scale = 1.0;
  std::int64_t growth_tracker = 0;
  std::int64_t hysteresis_tracker = 0;
  bool operator==(const GradScalerState&) const = default;
};

class GradScaler {
 public:
  // The scaler `t` asks for, as Megatron's get_megatron_optimizer builds it: constant with
  // loss_scale under fp16 or bf16, dynamic under fp16 otherwise; none without either 16-bit
  // precision.
  static std::optional<GradScaler> of(const TrainingConfig& t);

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  // After a step's gradients were checked: `found_non_finite` somewhere on any rank.
  void update(bool found_non_finite);
  // What a checkpoint keeps (Megatron's grad_scaler state dict) and restores.
  const GradScalerState& state() const { return state_; }
  void restore(const GradScalerState& s) { state_ = s; }

 private:
  GradScaler(bool dynamic, double scale, double min_scale, std::int64_t window,
             std::int64_t hysteresis);

  bool dynamic_;
  double min_scale_;
  std::int64_t window_, hysteresis_;
  GradScalerState state_;
};

}  // namespace tandem
