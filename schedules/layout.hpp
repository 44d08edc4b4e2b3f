// The process-group layout: Megatron-Core's RankGenerator as pure arithmetic.
// world = tp · cp · dp · pp; the order string says which dimension varies fastest (first =
// fastest). As in Megatron-Core, the expert groups (ep, tp-ep, expert-dp) come from a second
// grid over the same ranks, tp · ep · expert-dp · pp with expert-dp = dp · cp / ep. A group
// of kind "tp-cp" holds the ranks that differ only in their tp and cp coordinates.
//
// Worked example, TP=2, PP=2, DP=2, order tp-cp-ep-dp-pp (8 ranks):
//   tp [0,1] [2,3] [4,5] [6,7]     dp [0,2] [1,3] [4,6] [5,7]
//   pp [0,4] [1,5] [2,6] [3,7]     tp-pp (model parallel) [0,1,4,5] [2,3,6,7]
//   embedding = first and last stage of each pp group: [0,4] [1,5] [2,6] [3,7]
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/parallel_context.hpp"

namespace tandem {

struct LayoutSpec {
  int world_size = 1;
  int tp = 1;
  int pp = 1;
  int cp = 1;
  int ep = 1;
  std::string order = "tp-cp-ep-dp-pp";
  // The pipeline stages whose ranks make the embedding group: empty for Megatron-Core's
  // default, the first and the last; else these pp ranks (pretrain_gpt.py's
  // get_embedding_ranks with a multi-token prediction stage of its own: the first, the MTP
  // stage and, with tied embeddings, the last).
  std::vector<int> embedding_stages{};
};

struct Layout {
  ParallelSizes sizes;                // dp derived as world / (tp · pp · cp)
  std::string order;                  // as given, lower case
  std::vector<int> embedding_stages;  // as given (empty: first and last)
  // Every group of every kind, each a list of global ranks, in the generator's order.
  std::map<GroupKind, std::vector<std::vector<int>>> groups;

  const std::vector<std::vector<int>>& of(GroupKind k) const { return groups.at(k); }
};

// Throws ConfigError (naming world_size, the sizes and the rule) when a size is below 1, the
// world is not divisible by tp · pp · cp, ep does not divide dp · cp, or the order is malformed
// (unknown or repeated token, a token of size > 1 left out, or — Megatron-Core's rule — pp not
// last while pp > 1 and the expert-dp size differs from dp).
Layout make_layout(const LayoutSpec& spec);

// This rank's coordinates and groups; coords.ep is the rank's place on the expert grid.
// Throws std::out_of_range when rank is not in [0, world).
ParallelContext make_parallel_context(const Layout& layout, int rank);

// Where `rank` sits among the groups of one kind, as a communicator split (MPI_Comm_split,
// ncclCommSplit) takes it: color = the index of the group holding it (-1: none), key = its
// position in that group. Throws std::logic_error when two groups hold the rank.
struct GroupMembership {
  int color = -1;
  int key = 0;
};
GroupMembership group_membership(const Layout& layout, GroupKind kind, int rank);

// Megatron-Core's generate_masked_orthogonal_rank_groups: the groups spanned by the
// masked dimensions of `sizes` (fastest first), each group ordered by those dimensions.
std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size,
                                                            const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask);

}  // namespace tandem
