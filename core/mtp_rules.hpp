// Internal to the scenario: Megatron's rules on multi-token prediction (mtp_num_layers,
// mtp_loss_scaling_factor and the 'm' of pipeline_model_parallel_layout), from
// megatron/training/arguments.py, PipelineParallelLayerLayout.validate_layer_layout and
// MultiTokenPredictionLayer. What the training step does not run yet is train/'s
// check_step_supports.
#pragma once

#include "core/scenario_detail.hpp"

namespace tandem::scenario_detail {

void check_mtp(const Scenario& s, Violations& out);

}  // namespace tandem::scenario_detail
