#include "model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tandem {

AdamW::AdamW(Device& device, ParameterSet& params, AdamConfig config, OptimizerShard shard)
    : device_(device), params_(params), config_(config), shard_(std::move(shard)) {
  exp_avg_ = device.allocate(Shape{shard_.state_numel}, DType::fp32, MemoryUse::optimizer);
  exp_avg_sq_ = device.allocate(Shape{shard_.state_numel}, DType::fp32, MemoryUse::optimizer);
  device.fill(device.default_stream(), exp_avg_, 0.0f);
  device.fill(device.default_stream(), exp_avg_sq_, 0.0f);
}

Tensor AdamW::grad_sum_squares(Stream& s, bool experts) {
  Tensor out = device_.allocate(Shape{1}, DType::fp32);
  device_.fill(s, out, 0.0f);
  for (const auto& piece : shard_.pieces) {
    const Parameter& p = params_[piece.param];
    const bool tp_duplicate = p.spec.shard == ShardKind::replicated && params_.tp_rank() != 0;
    if (tp_duplicate || p.spec.shared_copy || p.spec.expert != experts) continue;
    device_.sum_squares(s, params_.main_grads(piece.begin, piece.length), out);
  }
  return out;
}

void AdamW::step(Stream& s, float lr, float grad_scale) {
  ++steps_;
  for (const auto& piece : shard_.pieces) {
    const Parameter& p = params_[piece.param];
    const Shape shape{piece.length};
    Tensor value = params_.main_values(piece.begin, piece.length);
    Tensor m = exp_avg_.view(shape, piece.state_offset);
    Tensor v = exp_avg_sq_.view(shape, piece.state_offset);
    device_.adam(s, {.param = value,
                     .grad = params_.main_grads(piece.begin, piece.length),
                     .exp_avg = m,
                     .exp_avg_sq = v,
                     .lr = lr,
                     .beta1 = config_.beta1,
                     .beta2 = config_.beta2,
                     .epsilon = config_.epsilon,
                     .weight_decay = p.spec.weight_decay ? config_.weight_decay : 0.0f,
                     .grad_scale = grad_scale,
                     .step = steps_});
  }
}

float clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (grad_norm + 1e-6)));
}

double learning_rate(const LrSchedule& sc, std::int64_t step) {
  if (sc.warmup_steps > 0 && step <= sc.warmup_steps)
    return sc.max_lr * static_cast<double>(step) / static_cast<double>(sc.warmup_steps);
  if (sc.decay_style == "constant") return sc.max_lr;
  if (step > sc.decay_steps) return sc.min_lr;
  const double ratio =
      static_cast<double>(step - sc.warmup_steps) /
      static_cast<double>(std::max<std::int64_t>(1, sc.decay_steps - sc.warmup_steps));
  double coeff = 0;
  if (sc.decay_style == "linear")
    coeff = 1.0 - ratio;
  else if (sc.decay_style == "cosine")
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  else
    throw std::invalid_argument("lr_decay_style must be constant, linear or cosine, not " +
                                sc.decay_style);
  return sc.min_lr + coeff * (sc.max_lr - sc.min_lr);
}

}  // namespace tandem
