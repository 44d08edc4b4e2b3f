// What the simulated ranks share inside one SimGrid engine: the host of every rank,
// which ranks run as actors (all of them in full fidelity; one per equivalence class in
// symmetric mode), the symmetry that maps a representative's traffic onto the ranks it
// stands for, the rendezvous points where collective and p2p partners meet, and the
// statistics the report reads. SimGrid runs actors one at a time in one thread, so the
// state needs no locks; it lives only as long as one simulation.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/ConditionVariable.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/Mutex.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel_context.hpp"
#include "sim/sm_contention.hpp"

namespace tandem::sim {

enum class SimMode {
  full,       // every rank is an actor
  symmetric,  // one actor per pipeline stage (tp 0, dp 0); tp and dp peers are its images
};

// One transfer of a collective's algorithm: `fraction` of the collective's bytes from
// global rank src to dst.
struct Flow {
  int src = 0;
  int dst = 0;
  double fraction = 1;
};

// A meeting point: the operation starts when the `expected` actors taking part have
// arrived; the last to arrive puts the transfers on the links, the others wait.
struct Rendezvous {
  int expected = 0;
  int arrived = 0;
  int left = 0;  // actors that have seen it done (it is forgotten when all have)
  bool done = false;
  double started = 0;
  double finished = 0;
  simgrid::s4u::MutexPtr mutex = simgrid::s4u::Mutex::create();
  simgrid::s4u::ConditionVariablePtr cv = simgrid::s4u::ConditionVariable::create();
};

// Per rank (actor) totals: exposed communication per group kind (seconds the compute
// stream could not go on because it waited for a collective of that kind).
struct RankStats {
  std::map<std::string, double> exposed;  // group kind → seconds
  // group kind → seconds the host waited for the group's other members to arrive (pipeline
  // bubbles and load imbalance, not communication)
  std::map<std::string, double> peer_wait;
  // With record_ops: "<collective> <group kind> <bytes>" per collective, "p2p <group kind>
  // <ops> <bytes>" per batch, in issue order.
  std::vector<std::string> collectives;
  // The SMs its collectives' kernels take from its compute (sim/sm_contention.hpp); null: free.
  std::shared_ptr<SmContention> contention;
  // The step the rank is in (from 0) and when it began: where a gradient sync's wait for
  // the slowest node is measured from (sim/stragglers.hpp). -1: before the first step.
  std::int64_t step = -1;
  double step_start = 0;
  // Seconds the rank's gradient syncs started late waiting for the slowest node, all steps.
  double straggler_wait = 0;
};

// Thrown by every wait of every actor once the run is aborted (SimWorld::fail): it unwinds
// the actor's stack as any exception does, by a live actor, so the destructors of its
// locks may still call SimGrid (a killed actor may not: SimGrid ends the process then).
class RunAborted : public std::runtime_error {
 public:
  RunAborted() : std::runtime_error("the simulated run was aborted by an error in a rank") {}
};

class SimWorld {
 public:
  SimWorld(std::vector<simgrid::s4u::Host*> hosts, std::vector<RankCoordinates> coords,
           ParallelSizes sizes, SimMode mode);

  int world_size() const { return static_cast<int>(hosts_.size()); }
  simgrid::s4u::Host* host(int rank) const { return hosts_.at(static_cast<std::size_t>(rank)); }
  bool present(int rank) const { return present_.at(static_cast<std::size_t>(rank)); }
  const std::vector<int>& present_ranks() const { return present_ranks_; }
  SimMode mode() const { return mode_; }
  bool record_ops() const { return record_ops_; }
  void set_record_ops(bool on) { record_ops_ = on; }
  int count_present(const std::vector<int>& ranks) const;

  // `flows` (one operation of one group) and, in symmetric mode, the flows of the same
  // operation in the groups of the ranks the actors stand for (the images under tp and dp
  // shifts) that share a link with `flows`: only those can change the operation's time.
  std::vector<Flow> with_images(const std::vector<Flow>& flows);
  // Links that no set of flows can saturate (a full-bisection fabric core): sharing one
  // does not couple two flows' timing, so it does not pull ghost flows in.
  // `node_of[r]` is rank r's node: with a non-blocking fabric, flows between nodes that
  // share no node with a group's flows cannot share a blocking link with them, which spares
  // computing their routes.
  void set_nonblocking(std::function<bool(const simgrid::s4u::Link*)> is_nonblocking,
                       std::vector<int> node_of) {
    nonblocking_ = std::move(is_nonblocking);
    node_of_ = std::move(node_of);
  }
  // Route latency (seconds) and links between two ranks, cached.
  double latency(int src, int dst);

  // The rendezvous of key, made with `expected` on first arrival.
  std::shared_ptr<Rendezvous> rendezvous(const std::string& key, int expected);
  void forget(const std::string& key);

  // What each member posted to a split rendezvous: global rank → (color, key).
  std::map<int, std::pair<int, int>>& split_posts(const std::string& key) { return splits_[key]; }
  void forget_split_posts(const std::string& key) { splits_.erase(key); }
  // What each member posted to an all_to_all_v rendezvous: global rank → bytes it sends to
  // each member, in group order.
  std::map<int, std::vector<double>>& send_bytes_posts(const std::string& key) {
    return send_bytes_[key];
  }
  void forget_send_bytes_posts(const std::string& key) { send_bytes_.erase(key); }
  // What each member posted to an all_gather_counts: global rank → its counts, and how
  // many members have read them (the last one forgets the key).
  struct CountPosts {
    std::map<int, std::vector<std::int64_t>> posts;
    int read = 0;
  };
  CountPosts& count_posts(const std::string& key) { return counts_[key]; }
  void forget_count_posts(const std::string& key) { counts_.erase(key); }

  RankStats& stats(int rank) { return stats_[rank]; }
  const std::map<int, RankStats>& all_stats() const { return stats_; }

  // An error inside a simulated rank: the first is kept (with the rank), and the run is
  // aborted: every rendezvous and every watched condition variable (the communicators'
  // queues) is woken, and each wait then throws RunAborted, so every actor ends and the
  // engine returns. An exception left to escape an actor would abort the whole engine.
  void fail(int rank, std::exception_ptr error);
  bool aborted() const { return failure_ != nullptr; }
  int failed_rank() const { return failed_rank_; }
  std::exception_ptr failure() const { return failure_; }
  // Woken on abort: a condition variable an actor waits on outside a rendezvous.
  void watch(simgrid::s4u::ConditionVariablePtr cv) { watched_.push_back(std::move(cv)); }
  // A rank's communication actors (daemons). An aborted rank joins them before it ends:
  // SimGrid kills the daemons left when the last rank ends, and a daemon killed inside a
  // transfer ends the process.
  void add_comm_actor(int rank, simgrid::s4u::ActorPtr actor) {
    comm_actors_[rank].push_back(std::move(actor));
  }
  void join_comm_actors(int rank);
  // Throws RunAborted once the run is aborted; called before each wait.
  void throw_if_aborted() const {
    if (aborted()) throw RunAborted();
  }

 private:
  struct Route {
    std::vector<simgrid::s4u::Link*> links;
    double latency = 0;
  };
  const Route& route(int src, int dst);
  int translate(int rank, int dtp, int ddp) const;

  std::vector<simgrid::s4u::Host*> hosts_;
  std::vector<RankCoordinates> coords_;
  ParallelSizes sizes_;
  SimMode mode_;
  bool record_ops_ = false;
  std::vector<bool> present_;
  std::vector<int> present_ranks_;
  std::vector<int> rank_of_;  // index ((pp · dp + dp) · cp + cp) · tp + tp → rank
  std::map<std::pair<int, int>, Route> routes_;
  std::map<std::string, std::shared_ptr<Rendezvous>> rendezvous_;
  std::map<int, RankStats> stats_;
  std::exception_ptr failure_;
  int failed_rank_ = -1;
  std::vector<simgrid::s4u::ConditionVariablePtr> watched_;
  std::map<int, std::vector<simgrid::s4u::ActorPtr>> comm_actors_;
  std::map<std::string, std::map<int, std::pair<int, int>>> splits_;
  std::map<std::string, std::map<int, std::vector<double>>> send_bytes_;
  std::map<std::string, CountPosts> counts_;
  std::function<bool(const simgrid::s4u::Link*)> nonblocking_;
  std::vector<int> node_of_;
};

}  // namespace tandem::sim
