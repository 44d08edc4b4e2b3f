// make_group_communicators: one MPI_Comm_split of the world per group kind of the layout.
#include "exec/mpi/group_communicators.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {

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
    const GroupMembership m = group_membership(layout, kind, world.rank());
    auto comm = world.split_mpi(m.color, m.key, std::string(group_kind_name(kind)));
    if (comm) result.emplace(kind, std::move(comm));
  }
  return result;
}

}  // namespace tandem
