// The sim binding's Communicator: collectives as NCCL runs them, decomposed into
// transfers that SimGrid puts on the platform's links, so that contention between groups
// (tp inside a node, dp and pp across NICs) is modelled rather than assumed.
//
// Like a NCCL communicator with its own stream, each SimCommunicator has a
// communication actor that runs its operations in issue order. An operation issued on
// stream s starts no earlier than the work issued on s so far (its input is ready then),
// waits at a rendezvous for the group's other actors, and then the last to arrive starts
// the transfers of every member — and, in symmetric mode, of every image of the group
// whose transfers share a link with an actor's. Work::wait puts the host actor to sleep
// until the operation's end and books the time the compute stream stood still as
// exposed communication of the group's kind.
//
// Algorithms (bytes S of the collective, n members, ring in rank order):
//   all-reduce     ring: each member sends 2(n−1)/n·S to the next, 2(n−1) steps
//   all-gather     ring: (n−1)/n·S (S = output), n−1 steps
//   reduce-scatter ring: (n−1)/n·S (S = input), n−1 steps
//   broadcast      pipelined chain from the root: S per hop, n−1 steps
//   all-to-all     every ordered pair: S/n, 1 step
//   all-to-all-v   every ordered pair with a nonzero split: its own bytes, 1 step. Each
//                  member posts its send splits at the rendezvous; in symmetric mode a
//                  member that runs no actor sends what the group's first present member
//                  sends, to the same group indices (a hot expert is hot for every
//                  sender), so a skewed split loads one member's links and shows as time.
//                  Under NCCL's model the flows are scaled and the latency added as for
//                  the uniform all-to-all of the largest member's input; in closed form the
//                  time is the latency plus the busiest member's max(sent, received) bytes
//                  over the link (the all-to-all's (n−1)/n·S when the splits are uniform).
//   p2p            one transfer per send, matched with the peer's receive
// A ring's transfers are one SimGrid flow per hop carrying all its steps' bytes (the
// ring's bandwidth term), plus (steps − 1) hop latencies (its latency term).
//
// NCCL as it runs (when the topology has an "nccl" section, sim/nccl_model.hpp): every
// collective is priced by NCCL's tuner for the group's shape (ranks, nodes, NICs per node
// it crosses), which picks the algorithm and protocol. A group inside one node is priced
// in closed form by it. A group across nodes still runs as SimGrid flows, so groups that
// share NICs slow each other: its ring's bytes cross every node boundary spread over the
// NICs of the node's members (NCCL's channels, one per NIC), the flows' bytes are scaled so
// that alone on the platform they take exactly the tuner's bandwidth term (achieved bus
// bandwidth below line rate, the protocol's efficiency, a tree's rate), and the tuner's
// latency is added. Each operation is recorded per (collective, algorithm, protocol,
// channels) in nccl_usage().
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <simgrid/s4u/Actor.hpp>
#include <string>
#include <vector>

#include "core/communicator.hpp"
#include "sim/collective_cost.hpp"
#include "sim/nccl_model.hpp"
#include "sim/platform.hpp"
#include "sim/sim_world.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

// What NCCL ran for one kind of operation of a communicator: how often, how many bytes
// in all, and the seconds the tuner priced them at (alone on the platform; contention
// with other groups comes on top in the flows).
struct NcclUse {
  std::int64_t count = 0;
  double bytes = 0;
  double seconds = 0;
};

class SimCommunicator : public Communicator {
 public:
  // `members`: global ranks in group order; `me`: this actor's global rank; `id`: a name
  // unique to this group in the world (the same on every member), e.g. "tp:0,1,2,3".
  SimCommunicator(SimWorld& world, std::vector<int> members, int me, std::string name,
                  std::string id);
  ~SimCommunicator() override;

  int rank() const override { return index_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string_view name() const override { return name_; }
  const std::vector<int>& members() const { return members_; }

  // Prices this group's collectives in closed form (sim/collective_cost.hpp) over `link`
  // instead of putting flows on the platform: for a group inside one switched node, whose
  // GPU ports carry nothing else (inter-node traffic leaves through the NICs). When this
  // actor is the group's only one (symmetric mode), such a collective is no SimGrid
  // activity at all: it runs on the communicator's own clock, like a compute op.
  void set_closed_form(LinkSpec link) { closed_form_ = link; }

  // Stragglers (sim/stragglers.hpp): the gradient sync waits for the group's slowest node,
  // whose step runs `fraction` longer. Each `sync` operation of a step (the gradient
  // buckets' "reduce_scatter" under the distributed optimizer, else "all_reduce") starts
  // `fraction` of the step so far after its input is ready, until the step first waits for
  // one of them: the replicas are in step again after. Set on the data-parallel group; 0:
  // every node keeps pace.
  void set_straggler_wait(double fraction, std::string sync) {
    straggler_fraction_ = fraction;
    straggler_sync_ = std::move(sync);
  }

  // The NCCL shape of this group (ranks, nodes, NICs per node its rings cross), and what
  // NCCL ran so far, keyed "<collective> <algorithm>/<protocol> x<channels>", e.g.
  // "all_reduce ring/LL x8". Empty without an NCCL model.
  NcclShape nccl_shape() const { return shape_; }
  const std::map<std::string, NcclUse>& nccl_usage() const { return usage_; }

  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) override;
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) override;
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                       ReduceOp op) override;
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override;
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) override;
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                     std::span<const std::int64_t> send_counts, Tensor& output,
                                     std::span<const std::int64_t> recv_counts) override;
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override;
  // Priced as an all_gather of the counts; the values really travel between the
  // simulated ranks. A member not simulated counts what the first simulated one does
  // (the routing model routes every rank alike).
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override;
  void barrier() override;

  struct WorkState;
  struct Plan {
    std::vector<Flow> flows;  // with images
    double extra_latency = 0;
    // NCCL model: seconds per byte of the collective its own flows take alone at line
    // rate (the slowest), and the largest route latency SimGrid adds to them.
    double seconds_per_byte = 0;
    double route_latency = 0;
  };

 private:
  struct Task {
    std::shared_ptr<WorkState> state;
    double not_before = 0;
    std::function<void(WorkState&)> run;
  };
  // `delay`: seconds the operation starts after its input is ready (a straggler's wait);
  // `synced`: set when its Work's wait returns.
  std::unique_ptr<Work> issue(Stream& s, std::function<void(WorkState&)> run, double delay = 0,
                              bool* synced = nullptr);
  // The straggler wait of an operation issued now (booked in the rank's statistics);
  // none when it is no gradient sync.
  std::optional<double> straggler_delay(const std::string& algorithm, const Stream& s);
  std::unique_ptr<Work> collective(Stream& s, const std::string& algorithm, double bytes,
                                   int root = 0);
  const Plan& plan(const std::string& algorithm, int root);
  std::vector<Flow> nccl_ring(double fraction) const;  // channels over the NICs
  // The factor a send/recv's flow bytes are stretched by (global ranks src → dst).
  double nccl_p2p_stretch(int src, int dst) const;
  std::vector<Flow> own_and_other_groups(std::vector<Flow> with_images,
                                         const std::vector<Flow>& own) const;
  // The tuner's choice for one operation, recorded in usage_.
  NcclChoice nccl_price(const std::string& algorithm, double bytes);
  void serve();  // the communication actor's loop
  // The group's send matrix (bytes, [src index][dst index]) from the members' posts.
  std::vector<std::vector<double>> send_matrix(
      const std::map<int, std::vector<double>>& posts) const;
  double closed_form_v_seconds(const std::vector<std::vector<double>>& m) const;

  SimWorld& world_;
  std::vector<int> members_;
  int me_;
  int index_;
  std::string name_;
  std::string id_;
  std::int64_t sequence_ = 0;
  std::int64_t counts_sequence_ = 0;  // all_gather_counts issued, the key of the next
  std::map<std::pair<int, int>, std::int64_t> p2p_sequence_;  // (src, dst) global → count
  std::map<std::pair<std::string, int>, Plan> plans_;
  std::map<std::pair<int, int>, std::vector<Flow>> p2p_flows_;  // (src, dst) → with images
  std::optional<LinkSpec> closed_form_;
  const NcclPlatformInfo* nccl_ = nullptr;  // null: ideal rings at line rate
  NcclShape shape_;
  std::map<std::string, NcclUse> usage_;
  // nccl_price's choice per (collective, bytes), with its usage_ entry: a step issues the
  // same few collectives thousands of times.
  struct PricedCollective {
    NcclChoice choice;
    NcclUse* use = nullptr;
  };
  std::map<std::pair<std::string, double>, PricedCollective> priced_;
  int present_ = -1;  // members simulated (world_.count_present), once known
  double clock_ = 0;  // closed-form collectives of a lone actor: when the last one ends
  double straggler_fraction_ = 0;
  std::string straggler_sync_;        // the collective the gradient sync runs
  std::int64_t straggler_step_ = -1;  // the step the two below are of
  bool straggler_synced_ = false;     // a gradient sync of the step was waited for
  double straggler_step_delay_ = 0;   // the longest delay of the step so far
  std::deque<Task> queue_;
  simgrid::s4u::MutexPtr mutex_;
  simgrid::s4u::ConditionVariablePtr cv_;
  simgrid::s4u::ActorPtr actor_;
};

// Starts `flows` (bytes = fraction · total) and waits for them, then the extra latency.
// Returns the time they started.
double run_flows(SimWorld& world, const std::vector<Flow>& flows, double total_bytes,
                 double extra_latency);

}  // namespace tandem::sim
