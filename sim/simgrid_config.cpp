#include "sim/simgrid_config.hpp"

#include <xbt/base.h>
// xbt/base.h first: version.h uses its declaration macros.
#include <simgrid/version.h>

namespace tandem::sim {

void configure_network_model(simgrid::s4u::Engine& engine) {
  engine.set_config("network/model:CM02");
  // The window bound is gamma / (2 · latency): make it far above any link's bandwidth.
  engine.set_config("network/TCP-gamma:1e18");
  engine.set_config("network/crosstraffic:0");
}

std::string simgrid_version() {
  return std::to_string(SIMGRID_VERSION_MAJOR) + "." + std::to_string(SIMGRID_VERSION_MINOR);
}

}  // namespace tandem::sim
