// NCCL's kernels hold SMs. Each channel of a collective runs as one thread block on an SM of
// its own for as long as the collective runs (NCCL's CTAs), so the GEMMs and attention that
// overlap it run on the SMs left: a GEMM beside a 24-block all-reduce on an A100 (108 SMs)
// has 84. SmContention keeps one rank's SM-bound compute (its busy spans) and, as each
// collective ends, adds the time that compute lacked: a span of s seconds that overlapped a
// collective of b blocks on a GPU of n SMs ran at (n − b) / n of its speed, so it took
// s · b / (n − b) longer. The compute stream's next GEMM or attention pays it. A first-order model:
// the blocks are charged whole SMs, HBM-bound kernels are not slowed, and a GEMM that holds every
// SM when the collective starts is not taken to delay the collective instead.
//
// How many blocks NCCL launches (src/graph/connect.cc, ncclTopoPostset): twice the channels
// its graph search found ("duplication"), and on Hopper and later across nodes twice again
// while fewer than 16 ("4 compute channels per search channel to reach peak BW on <8 PPN").
#pragma once

#include <deque>
#include <utility>

namespace tandem::sim {

// NCCL's thread blocks for a ring or tree collective of `channels` search channels (NVLS:
// its channels as they are).
int nccl_blocks(int channels, bool across_nodes, int compute_capability, bool nvls);

class SmContention {
 public:
  SmContention(int sm_count, int compute_capability)
      : sm_count_(sm_count), compute_capability_(compute_capability) {}
  int compute_capability() const { return compute_capability_; }
  // An SM-bound op (a GEMM, attention) ran on the compute stream over [start, end); the
  // compute stream's ops come in time order.
  void compute_ran(double start, double end);
  // A collective held `blocks` SMs over [start, end), told when it is known: when it ends,
  // or when it is issued where its time is known then (a group of one simulated member).
  void collective_ran(double start, double end, int blocks);
  // The compute time owed so far, handed to the next op (and cleared).
  double take_delay();
  double total_delay() const { return total_; }

 private:
  struct Window {
    double start, end, held;
  };
  void owe(double overlap, double held);

  int sm_count_;
  int compute_capability_;
  // Each (span, window) pair is counted once, by whichever of the two is told second.
  std::deque<std::pair<double, double>> busy_;  // merged compute spans, in time order
  std::deque<Window> windows_;                  // collectives compute may still overlap
  double pending_ = 0, total_ = 0;
};

}  // namespace tandem::sim
