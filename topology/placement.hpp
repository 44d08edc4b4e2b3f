// Placement of global ranks on the GPUs of nodes: rank r runs on node r / gpus_per_node,
// local GPU r % gpus_per_node. With the default order (tp fastest) a tp group of size
// ≤ gpus_per_node therefore lands inside one node, on NVLink.
#pragma once

#include <vector>

namespace tandem {

struct RankPlacement {
  int rank = 0;
  int node = 0;
  int local_rank = 0;  // GPU index within the node
};

std::vector<RankPlacement> place_ranks(int world_size, int gpus_per_node);

// True when every rank of `group` sits on the same node.
bool group_within_node(const std::vector<int>& group, int gpus_per_node);

}  // namespace tandem
