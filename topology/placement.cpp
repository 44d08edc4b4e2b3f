// Placement of global ranks on GPUs: consecutive ranks fill a node before the next one starts,
// the way mpirun/torchrun number ranks by default. Because the layout puts tp fastest, this is
// what keeps a tp group on one node's NVLink/NVSwitch.
#include "topology/placement.hpp"

#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace tandem {
namespace {

void check_gpus_per_node(int gpus_per_node) {
  if (gpus_per_node < 1)
    throw ConfigError("gpus_per_node", std::to_string(gpus_per_node), "must be at least 1");
}

}  // namespace

std::vector<RankPlacement> place_ranks(int world_size, int gpus_per_node) {
  std::vector<Violation> out;
  if (world_size < 1)
    out.push_back({"world_size", std::to_string(world_size), "must be at least 1"});
  if (gpus_per_node < 1)
    out.push_back({"gpus_per_node", std::to_string(gpus_per_node), "must be at least 1"});
  if (!out.empty()) throw ConfigError(std::move(out));
  std::vector<RankPlacement> placements;
  placements.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r)
    placements.push_back({.rank = r, .node = r / gpus_per_node, .local_rank = r % gpus_per_node});
  return placements;
}

bool group_within_node(const std::vector<int>& group, int gpus_per_node) {
  check_gpus_per_node(gpus_per_node);
  for (int r : group)
    if (r < 0) throw std::out_of_range("rank " + std::to_string(r) + " is negative");
  if (group.empty()) return true;
  const int node = group.front() / gpus_per_node;
  for (int r : group)
    if (r / gpus_per_node != node) return false;
  return true;
}

}  // namespace tandem
