// make_group_communicators: one MPI_Comm_split of the world per group kind of the layout.
#include "exec/mpi/group_communicators.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {

namespace {

struct Membership {
  int color = -1;  // index of the group holding the rank; -1: none
  int key = 0;     // position within that group
};

Membership find_membership(const std::vector<std::vector<int>>& groups, int rank, GroupKind kind) {
  Membership m;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto it = std::find(groups[g].begin(), groups[g].end(), rank);
    if (it == groups[g].end()) continue;
    if (m.color >= 0)
      throw std::logic_error("make_group_communicators: rank " + std::to_string(rank) +
                             " is in two " + std::string(group_kind_name(kind)) + " groups");
    m.color = static_cast<int>(g);
    m.key = static_cast<int>(it - groups[g].begin());
  }
  return m;
}

}  // namespace

GroupCommunicators make_group_communicators(MpiCommunicator& world, const Layout& layout) {
  if (world.size() != layout.sizes.world())
    throw std::invalid_argument(
        "make_group_communicators: the world communicator has " + std::to_string(world.size()) +
        " ranks but the layout needs tp × pp × dp × cp = " + std::to_string(layout.sizes.tp) +
        " × " + std::to_string(layout.sizes.pp) + " × " + std::to_string(layout.sizes.dp) + " × " +
        std::to_string(layout.sizes.cp) + " = " + std::to_string(layout.sizes.world()));
  GroupCommunicators result;
  // std::map iterates kinds in one order on every rank, so the splits pair up.
  for (const auto& [kind, groups] : layout.groups) {
    const Membership m = find_membership(groups, world.rank(), kind);
    auto comm = world.split_mpi(m.color, m.key, std::string(group_kind_name(kind)));
    if (comm) result.emplace(kind, std::move(comm));
  }
  return result;
}

}  // namespace tandem
