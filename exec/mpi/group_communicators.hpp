// This rank's communicator for every process group of a layout (schedules/layout.hpp),
// made by splitting the world: color = the index of the group that holds the rank, key =
// the rank's position in it, so communicator rank i is the group's i-th global rank.
//
// Worked example, TP=2, PP=2, DP=2 on 8 ranks: global rank 5 is in tp [4,5] (index 2,
// position 1), pp [1,5] (index 1, position 1) and dp [5,7] (index 3, position 0), so its
// tp communicator has rank 1 of 2, its pp communicator rank 1 (the last stage) and its dp
// communicator rank 0. It is in no position-embedding group ([0] [1] [2] [3]), so that
// kind is absent from its map.
#pragma once

#include <map>
#include <memory>

#include "core/parallel_context.hpp"
#include "exec/mpi/mpi_communicator.hpp"
#include "schedules/layout.hpp"

namespace tandem {

// The kinds this rank belongs to; a kind whose groups leave the rank out is absent.
using GroupCommunicators = std::map<GroupKind, std::unique_ptr<MpiCommunicator>>;

// Collective over `world`: every rank calls it with the same layout. Throws
// std::invalid_argument when world's size is not the layout's world size, and
// std::logic_error when a rank sits in two groups of one kind (not a partition).
GroupCommunicators make_group_communicators(MpiCommunicator& world, const Layout& layout);

}  // namespace tandem
