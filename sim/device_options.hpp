// How a scenario's run sets up the sim binding's devices: the precision ops are priced in,
// the issuing host's costs, and the kernels the run's libraries pick on the preset's GPU.
// One function for tandem simulate's ranks and tandem search's dry runs, so the two price
// the same ops alike.
#pragma once

#include "core/scenario.hpp"
#include "sim/sim_device.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

// bf16 or fp16 where the scenario trains in it, else fp32.
DType compute_dtype(const Scenario& s);

// compute_dtype, host, fp8_transposed_copy, loss_scale_check_in_optimizer and
// fused_attention_library as `s` on `topology`'s GPU has them; the rest default.
SimDeviceOptions device_options(const Scenario& s, const Topology& topology);

}  // namespace tandem::sim
