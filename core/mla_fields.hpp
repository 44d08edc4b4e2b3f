// Internal to the scenario: the multi-latent attention fields of the model section
// (MlaConfig) as registry descriptors, and Megatron's rules on them.
#pragma once

#include <vector>

#include "core/scenario_detail.hpp"

namespace tandem::scenario_detail {

std::vector<FieldDef> mla_fields();
void check_mla(const Scenario& s, Violations& out);

}  // namespace tandem::scenario_detail
