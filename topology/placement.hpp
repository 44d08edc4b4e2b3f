// Placement of global ranks on the GPUs of nodes: rank r runs on node r / gpus_per_node,
// local GPU r % gpus_per_node, NVLink domain r / gpus_per_domain. With the default order (tp
// fastest) a tp group of size ≤ gpus_per_node therefore lands inside one node, on NVLink,
// and one of size ≤ the domain inside one NVLink domain. GB200 NVL72 (4 GPUs per tray, 72
// per domain), world 144: ranks 0–3 on tray 0, ranks 68–71 on tray 17, both in domain 0;
// ranks 72–143 in domain 1.
#pragma once

#include <vector>

namespace tandem {

struct Topology;  // topology/topology.hpp; not included, so the header stays light

struct RankPlacement {
  int rank = 0;
  int node = 0;
  int local_rank = 0;     // GPU index within the node
  int nvlink_domain = 0;  // the NVLink domain (the node itself without a larger domain)
};

// `gpus_per_domain` 0 means one node per domain; otherwise a multiple of gpus_per_node.
// Throws ConfigError naming the field for a world or node size below 1 or a domain that
// does not hold whole nodes.
std::vector<RankPlacement> place_ranks(int world_size, int gpus_per_node, int gpus_per_domain = 0);
// The placement on a topology's nodes and NVLink domains.
std::vector<RankPlacement> place_ranks(int world_size, const Topology& topology);

// True when every rank of `group` sits on the same node.
bool group_within_node(const std::vector<int>& group, int gpus_per_node);
// How many distinct nodes the ranks of `group` sit on (0 for an empty group).
int nodes_spanned(const std::vector<int>& group, int gpus_per_node);
// True when every rank of `group` sits in the same NVLink domain of `topology`: the group
// talks over NVLink only, whether or not it spans nodes.
bool group_within_nvlink_domain(const std::vector<int>& group, const Topology& topology);

// The NIC `rank` sends through, numbered within its NVLink domain: NIC i of the domain's
// k-th node is k · nics_per_node + i (nic_of_gpu on a domain of one node); 0 without NICs.
// NCCL spreads the channels of a ring leaving a domain over these (sim/nccl_model.hpp).
int nic_in_nvlink_domain(const Topology& topology, int rank);

}  // namespace tandem
