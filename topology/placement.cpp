// Placement of global ranks on GPUs: consecutive ranks fill a node before the next one starts,
// the way mpirun/torchrun number ranks by default, and consecutive nodes fill an NVLink domain
// (a GB200 NVL72 rack's trays). Because the layout puts tp fastest, this is what keeps a tp
// group on one node's, or one domain's, NVLink/NVSwitch.
#include "topology/placement.hpp"

#include <set>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "topology/topology.hpp"

namespace tandem {
namespace {

void check_gpus_per_node(int gpus_per_node) {
  if (gpus_per_node < 1)
    throw ConfigError("gpus_per_node", std::to_string(gpus_per_node), "must be at least 1");
}

void check_ranks(const std::vector<int>& group) {
  for (int r : group)
    if (r < 0) throw std::out_of_range("rank " + std::to_string(r) + " is negative");
}

// True when r / size is the same for every rank of the group.
bool same_block(const std::vector<int>& group, int size) {
  if (group.empty()) return true;
  const int block = group.front() / size;
  for (int r : group)
    if (r / size != block) return false;
  return true;
}

}  // namespace

std::vector<RankPlacement> place_ranks(int world_size, int gpus_per_node, int gpus_per_domain) {
  std::vector<Violation> out;
  if (world_size < 1)
    out.push_back({"world_size", std::to_string(world_size), "must be at least 1"});
  if (gpus_per_node < 1)
    out.push_back({"gpus_per_node", std::to_string(gpus_per_node), "must be at least 1"});
  else if (gpus_per_domain < 0 || gpus_per_domain % gpus_per_node != 0)
    out.push_back({"gpus_per_domain", std::to_string(gpus_per_domain),
                   "must be 0 (one node) or a multiple of gpus_per_node (" +
                       std::to_string(gpus_per_node) + "): a domain holds whole nodes"});
  if (!out.empty()) throw ConfigError(std::move(out));
  const int per_domain = gpus_per_domain > 0 ? gpus_per_domain : gpus_per_node;
  std::vector<RankPlacement> placements;
  placements.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r)
    placements.push_back({.rank = r,
                          .node = r / gpus_per_node,
                          .local_rank = r % gpus_per_node,
                          .nvlink_domain = r / per_domain});
  return placements;
}

std::vector<RankPlacement> place_ranks(int world_size, const Topology& topology) {
  return place_ranks(world_size, topology.node.gpus_per_node, topology.nvlink_domain.gpus);
}

bool group_within_node(const std::vector<int>& group, int gpus_per_node) {
  check_gpus_per_node(gpus_per_node);
  check_ranks(group);
  return same_block(group, gpus_per_node);
}

int nodes_spanned(const std::vector<int>& group, int gpus_per_node) {
  check_gpus_per_node(gpus_per_node);
  check_ranks(group);
  std::set<int> nodes;
  for (int r : group) nodes.insert(r / gpus_per_node);
  return static_cast<int>(nodes.size());
}

bool group_within_nvlink_domain(const std::vector<int>& group, const Topology& topology) {
  check_gpus_per_node(topology.node.gpus_per_node);
  check_ranks(group);
  return same_block(group, gpus_per_nvlink_domain(topology));
}

int nic_in_nvlink_domain(const Topology& topology, int rank) {
  const int per_node = topology.node.gpus_per_node;
  check_gpus_per_node(per_node);
  if (rank < 0) throw std::out_of_range("rank " + std::to_string(rank) + " is negative");
  if (topology.fabric.nics_per_node < 1) return 0;
  const int node_in_domain = (rank % gpus_per_nvlink_domain(topology)) / per_node;
  return node_in_domain * topology.fabric.nics_per_node + nic_of_gpu(topology, rank % per_node);
}

}  // namespace tandem
