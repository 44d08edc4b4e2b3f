// What the search's tests share: a cost-model pricer for a preset, and the small model they
// enumerate and dry-run (8 layers of 256 on 16 A100s, fp16).
#pragma once

#include <memory>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_device.hpp"
#include "tests/sim/priced_options.hpp"
#include "topology/topology.hpp"

namespace tandem::sim::search {

inline SimDevice::Pricer pricer_for(const Topology& t) {
  return cost_model_pricer(t);
}

inline Scenario small_model() {
  Scenario s;
  s.model.num_layers = 8;
  s.model.hidden_size = 256;
  s.model.num_attention_heads = 8;
  s.model.seq_length = 256;
  s.model.vocab_size = 1000;
  s.training.global_batch_size = 32;
  s.training.fp16 = true;
  s.cluster.world_size = 16;
  s.cluster.gpus_per_node = 8;
  s.cluster.topology = "dgx-a100-80g";
  return s;
}

}  // namespace tandem::sim::search
