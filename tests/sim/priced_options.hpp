// What most simulator tests start from: the preset's own cost model as the pricer of every
// op, in simulate options that leave the rest at their defaults.
#pragma once

#include <memory>

#include "sim/cost_model.hpp"
#include "sim/sim_device.hpp"
#include "sim/sim_runner.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

inline SimDevice::Pricer cost_model_pricer(const Topology& t) {
  auto cost = std::make_shared<CostModel>(t.gpu);
  return [cost](const OpDesc& op) { return cost->seconds(op); };
}

inline SimulateOptions priced_options(const Topology& t) {
  SimulateOptions o;
  o.pricer = cost_model_pricer(t);
  return o;
}

}  // namespace tandem::sim
