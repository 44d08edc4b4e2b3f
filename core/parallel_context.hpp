// ParallelContext: this rank's place in the layout — its coordinates along each parallel
// dimension and the global ranks of every group it belongs to. It is a plain value,
// computed once from the layout (schedules/layout.hpp) and passed explicitly to whoever
// needs it; there is no process-wide parallel state.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <vector>

namespace tandem {

// The process-group kinds of Megatron-Core's initialize_model_parallel, spelled as it
// spells them in its rank generator ("dp-cp", "tp-pp", …).
enum class GroupKind {
  tp,
  pp,
  dp,
  cp,
  ep,
  dp_cp,
  tp_cp,
  tp_pp,
  tp_dp_cp,
  tp_dp,
  tp_ep,
  expert_dp,
  embedding,
  position_embedding,
};

inline constexpr std::array kAllGroupKinds = {
    GroupKind::tp,        GroupKind::pp,
    GroupKind::dp,        GroupKind::cp,
    GroupKind::ep,        GroupKind::dp_cp,
    GroupKind::tp_cp,     GroupKind::tp_pp,
    GroupKind::tp_dp_cp,  GroupKind::tp_dp,
    GroupKind::tp_ep,     GroupKind::expert_dp,
    GroupKind::embedding, GroupKind::position_embedding,
};

std::string_view group_kind_name(GroupKind k);  // "tp", "dp-cp", "embedding", …
std::optional<GroupKind> parse_group_kind(std::string_view name);

struct ParallelSizes {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int cp = 1;
  int ep = 1;   // expert parallel: divides dp · cp (Megatron-Core's expert grid)
  int vpp = 1;  // virtual pipeline chunks per stage

  int world() const { return tp * pp * dp * cp; }
};

struct RankCoordinates {
  int tp = 0;
  int cp = 0;
  int ep = 0;
  int dp = 0;
  int pp = 0;
};

struct ParallelContext {
  int rank = 0;
  ParallelSizes sizes;
  RankCoordinates coords;
  // Global ranks of the group of each kind that contains this rank; empty when this
  // rank belongs to no group of that kind (e.g. a middle pipeline stage and the
  // embedding group).
  std::array<std::vector<int>, kAllGroupKinds.size()> groups;

  const std::vector<int>& group(GroupKind k) const { return groups[static_cast<int>(k)]; }
  bool in_group(GroupKind k) const { return !group(k).empty(); }
  bool is_pipeline_first_stage() const { return coords.pp == 0; }
  bool is_pipeline_last_stage() const { return coords.pp == sizes.pp - 1; }
};

}  // namespace tandem
