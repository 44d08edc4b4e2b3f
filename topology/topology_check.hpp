// Physical bounds on every number of a Topology, checked after parsing (topology_io.cpp
// checks types and signs): a link of 1e308 GB/s or a GPU of 1e-300 TFLOP/s is no machine,
// and fed to SimGrid such a number overflows its clock and aborts the simulation instead of
// being refused. The bounds are generous (about 100× the fastest hardware of 2024 and
// 1000× below the slowest host tandem runs on); each violation names the JSON field, the
// value in datasheet units and the bound with its reason.
#pragma once

#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "topology/topology.hpp"

namespace tandem {

// Every out-of-bounds number of `t`, fields named as in the JSON ("fabric.nic_gbs").
std::vector<Violation> topology_bound_violations(const Topology& t);

// Throws ConfigError(source) carrying topology_bound_violations(t) when there are any.
void check_topology_bounds(const Topology& t, std::string_view source);

}  // namespace tandem
