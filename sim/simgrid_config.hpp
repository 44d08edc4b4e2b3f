// The SimGrid settings every tandem simulation starts from. SimGrid's default network
// model caps a single flow by a TCP-window term (1 GB over a 900 GB/s, 10 µs link takes
// 5 ms instead of 1.12 ms) and adds cross traffic for acknowledgements; GPU interconnects
// behave like latency + size / bandwidth, so we select CM02 without those terms.
#pragma once

#include <simgrid/s4u/Engine.hpp>
#include <string>

namespace tandem::sim {

// Must run before the platform is created.
void configure_network_model(simgrid::s4u::Engine& engine);

// "3.32", the SimGrid this binary was built against.
std::string simgrid_version();

}  // namespace tandem::sim
