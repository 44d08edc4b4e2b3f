// The idealised timeline of a schedule: given what a forward, a backward and a p2p
// transfer cost, when does every op of every stage start and end? Stages run their op
// lists in order; a p2p call posts all its sends and receives at once and returns when
// every one has met its counterpart on the neighbouring stage (batch_isend_irecv then
// wait), each transfer taking `p2p_time` from the moment both ends are posted; an
// overlapped call (overlap_p2p_comm) costs its stage nothing where it is posted, and its
// p2p_wait holds the stage until its transfers are done. This is
// the bubble arithmetic of the pipeline papers, made executable, and the first consumer
// of the schedules: a schedule whose sends and receives do not pair up, or that
// deadlocks, fails here with the ops each stage is stuck on.
#pragma once

#include <vector>

#include "core/units.hpp"
#include "schedules/schedule.hpp"

namespace tandem {

struct IdealCosts {
  Seconds forward{1.0};   // one forward of one chunk of one microbatch
  Seconds backward{2.0};  // one backward of one chunk of one microbatch
  Seconds p2p{0.0};       // one activation or gradient transfer between stages
  // The share of a split backward that is its W (weight gradients); its B (input gradient)
  // takes the rest. A transformer's backward is two GEMMs per forward GEMM, one for each.
  double weight_fraction = 0.5;
};

// Where the other end of a transfer is: the stage and op index holding the matching
// receive (for a send) or send (for a receive).
struct TransferPeer {
  int rank = 0;
  int op = 0;
  int transfer = 0;
};

// Pairs every send with its receive: per ordered (sender, receiver, activation|gradient)
// channel the k-th send meets the k-th receive, and the pair must move the same tensor
// (the receiver's chunk is the sender's, or the next one around the ring). Throws
// ScheduleError on an unmatched or mismatched transfer.
// result[rank][op][transfer] is the peer of that transfer.
std::vector<std::vector<std::vector<TransferPeer>>> pair_transfers(const Schedule& s);

struct TimedOp {
  Seconds start{0};
  Seconds end{0};
};

struct Timeline {
  Schedule schedule;
  IdealCosts costs;
  std::vector<std::vector<TimedOp>> ranks;  // parallel to schedule.ranks
  std::vector<std::vector<std::vector<TransferPeer>>> peers;
  Seconds makespan{0};

  // Fraction of [0, makespan] that `rank` spends outside compute (F, B and W) ops.
  double bubble_fraction(int rank) const;
  // Mean over stages.
  double bubble_fraction() const;
};

// Plays the schedule; throws ScheduleError naming each stage's blocked op on deadlock.
Timeline make_timeline(const Schedule& s, const IdealCosts& costs);

}  // namespace tandem
