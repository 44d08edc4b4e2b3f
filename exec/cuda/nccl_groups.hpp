// The cuda binding's process groups: the NCCL world made over an MPI bootstrap
// (NcclCommunicator::create: rank 0's ncclUniqueId broadcast by MPI, ncclCommInitRank),
// then one NCCL communicator per group kind of a layout by ncclCommSplit, exactly as
// exec/mpi's make_group_communicators splits the MPI world: color = the index of the group
// that holds the rank, key = its position in it, so communicator rank i is the group's
// i-th global rank.
//
// Worked example, TP=2, PP=2, DP=2 on 8 ranks: global rank 5 is in tp [4,5] (index 2,
// position 1), pp [1,5] (index 1, position 1) and dp [5,7] (index 3, position 0), so its
// tp communicator has rank 1 of 2, its pp communicator rank 1 and its dp communicator
// rank 0. It is in no position-embedding group, so that kind is absent from its map.
#pragma once

#include <map>
#include <memory>

#include "core/parallel_context.hpp"
#include "exec/cuda/nccl_communicator.hpp"
#include "schedules/layout.hpp"

namespace tandem {

using NcclGroupCommunicators = std::map<GroupKind, std::unique_ptr<NcclCommunicator>>;

// Collective over `world`: every rank calls it with the same layout. Throws
// std::invalid_argument when world's size is not the layout's world size, and
// std::logic_error when a rank sits in two groups of one kind.
NcclGroupCommunicators make_nccl_group_communicators(NcclCommunicator& world, const Layout& layout);

}  // namespace tandem
