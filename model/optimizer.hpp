// The optimizer step of Megatron's train_step: the gradient norm over every parameter
// the model holds once (tensor-parallel duplicates and the tied output layer's copy
// counted on one rank only), clipping folded into AdamW as a gradient scale, and the
// learning-rate schedule of OptimizerParamScheduler (linear warmup, then constant,
// linear or cosine decay to min_lr). AdamW updates the pieces of an OptimizerShard: the
// whole buffer, or with the distributed optimizer this data-parallel rank's slice, whose
// moments alone it allocates.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.hpp"
#include "model/optimizer_shard.hpp"
#include "model/parameters.hpp"

namespace tandem {

struct AdamConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
};

class AdamW {
 public:
  // Updates the pieces of `shard` (make_optimizer_shard(params, 1, 0): everything).
  AdamW(Device& device, ParameterSet& params, AdamConfig config, OptimizerShard shard);
  // Updates every parameter (no distributed optimizer).
  AdamW(Device& device, ParameterSet& params, AdamConfig config)
      : AdamW(device, params, config, make_optimizer_shard(params, 1, 0)) {}

  // Σ grad² over the shard's elements of the parameters this rank counts, into a
  // one-element fp32 tensor; the caller all-reduces it across the model-parallel groups
  // (and the data-parallel group when the shard is a dp slice) before taking the root.
  // Only the experts' weights with `experts`, else only the others.
  Tensor grad_sum_squares(Stream& s, bool experts = false);
  // One update at learning rate `lr`, gradients multiplied by `grad_scale` (clipping).
  void step(Stream& s, float lr, float grad_scale);

  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t n) { steps_ = n; }
  Tensor& exp_avg() { return exp_avg_; }
  Tensor& exp_avg_sq() { return exp_avg_sq_; }
  const OptimizerShard& shard() const { return shard_; }

 private:
  Device& device_;
  ParameterSet& params_;
  AdamConfig config_;
  OptimizerShard shard_;
  Tensor exp_avg_, exp_avg_sq_;
  std::int64_t steps_ = 0;
};

// Megatron's clip_grad_norm coefficient: min(1, max_norm / (norm + 1e-6)); 1 when
// clipping is off (max_norm ≤ 0).
float clip_coefficient(double grad_norm, double max_norm);

struct LrSchedule {
  double max_lr = 0;
  double min_lr = 0;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;
  std::string decay_style = "cosine";  // constant | linear | cosine
};

// The learning rate after `step` optimizer steps (OptimizerParamScheduler.get_lr).
double learning_rate(const LrSchedule& schedule, std::int64_t step);

}  // namespace tandem
