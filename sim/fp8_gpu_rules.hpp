// The FP8 rules that need the GPU, checked by tandem simulate before any work (the GPU-free
// ones are the scenario's, core/fp8_fields.cpp): Transformer Engine runs FP8 from compute
// capability 8.9 (Ada, Hopper), Float8BlockScaling from 9.0 (Hopper), MXFP8 from 10.0
// (Blackwell); and the simulator needs the preset's FP8 tensor rate to price FP8 GEMMs.
#pragma once

#include <optional>

#include "core/scenario.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

// The compute capability (major · 10 + minor) of a preset GPU by its name: A100 80, L40 /
// L4 / RTX 4090 89, H100 / H200 / GH200 90, B200 / B300 / GB200 / GB300 100; nullopt for
// other names (a CPU "GPU" of the cpu-host preset).
std::optional<int> compute_capability(const GpuSpec& gpu);

// Throws ConfigError naming the field, the GPU and the rule.
void check_fp8_gpu(const Scenario& s, const GpuSpec& gpu);

}  // namespace tandem::sim
