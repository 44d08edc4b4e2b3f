#include "core/parallel_context.hpp"

#include <stdexcept>

namespace tandem {

std::string_view group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::tp:
      return "tp";
    case GroupKind::pp:
      return "pp";
    case GroupKind::dp:
      return "dp";
    case GroupKind::cp:
      return "cp";
    case GroupKind::ep:
      return "ep";
    case GroupKind::dp_cp:
      return "dp-cp";
    case GroupKind::tp_cp:
      return "tp-cp";
    case GroupKind::tp_pp:
      return "tp-pp";
    case GroupKind::tp_dp_cp:
      return "tp-dp-cp";
    case GroupKind::tp_dp:
      return "tp-dp";
    case GroupKind::tp_ep:
      return "tp-ep";
    case GroupKind::expert_dp:
      return "expert-dp";
    case GroupKind::embedding:
      return "embedding";
    case GroupKind::position_embedding:
      return "position-embedding";
  }
  throw std::logic_error("unknown group kind");
}

std::optional<GroupKind> parse_group_kind(std::string_view name) {
  for (auto k : kAllGroupKinds)
    if (group_kind_name(k) == name) return k;
  return std::nullopt;
}

}  // namespace tandem
