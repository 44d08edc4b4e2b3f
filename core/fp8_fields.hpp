// Internal to the scenario: the FP8 fields of the training section (Fp8Config) as registry
// descriptors, and Megatron's and Transformer Engine's rules on them that need no hardware.
// The rules that need the GPU (which recipe runs on which compute capability, whether the
// GPU has an FP8 rate) are fp8_gpu_violations() in core/fp8_rules.hpp.
#pragma once

#include <vector>

#include "core/scenario_detail.hpp"

namespace tandem::scenario_detail {

std::vector<FieldDef> fp8_fields();
void check_fp8(const Scenario& s, Violations& out);

}  // namespace tandem::scenario_detail
