#include "sim/sim_communicator.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <simgrid/s4u/Comm.hpp>
#include <stdexcept>

#include "sim/collective_cost.hpp"
#include "sim/sim_device.hpp"

namespace tandem::sim {

struct SimCommunicator::WorkState {
  bool done = false;
  double issued = 0, started = 0, finished = 0;
  double all_arrived = 0;  // when the last transfer's partners were all there
  simgrid::s4u::MutexPtr mutex = simgrid::s4u::Mutex::create();
  simgrid::s4u::ConditionVariablePtr cv = simgrid::s4u::ConditionVariable::create();

  void finish(double start, double end, double arrived) {
    std::unique_lock lock(*mutex);
    started = start;
    all_arrived = arrived;
    finished = end;
    done = true;
    cv->notify_all();
  }
};

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point at(double seconds) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
}

class SimWork : public Work {
 public:
  // `synced`, when given, is set once the wait returns (the step's gradient sync is done:
  // SimCommunicator::straggler_delay stops delaying).
  SimWork(std::shared_ptr<SimCommunicator::WorkState> state, SimStream& stream,
          const SimWorld& world, RankStats& stats, std::string kind, bool* synced = nullptr)
      : state_(std::move(state)),
        stream_(stream),
        world_(world),
        stats_(stats),
        kind_(std::move(kind)),
        synced_(synced) {}

  void wait() override {
    const double from = std::max(sim_now(), stream_.ready());
    {
      std::unique_lock lock(*state_->mutex);
      while (!state_->done) {
        world_.throw_if_aborted();
        state_->cv->wait(lock);
      }
    }
    // A closed-form collective is done from the start but ends in the future.
    sim_sleep_until(state_->finished);
    // Until the last member arrived the stream waited for a peer, then for the transfers.
    if (!waited_) {
      stats_.peer_wait[kind_] += std::max(0.0, state_->all_arrived - from);
      stats_.exposed[kind_] +=
          std::max(0.0, state_->finished - std::max(from, state_->all_arrived));
    }
    waited_ = true;
    if (synced_) *synced_ = true;
  }
  bool test() override { return state_->done && state_->finished <= sim_now(); }
  std::optional<WorkTiming> timing() const override {
    if (!state_->done) return std::nullopt;
    return WorkTiming{at(state_->issued), at(state_->started), at(state_->finished)};
  }

 private:
  std::shared_ptr<SimCommunicator::WorkState> state_;
  SimStream& stream_;
  const SimWorld& world_;  // aborted: the wait ends (RunAborted)
  RankStats& stats_;
  std::string kind_;
  bool* synced_;
  bool waited_ = false;
};

// Waits at `rv` until done; the last of the expected actors to arrive runs `launch`
// (which returns the start time) and records the end.
void meet(const SimWorld& world, Rendezvous& rv, const std::function<double()>& launch) {
  std::unique_lock lock(*rv.mutex);
  ++rv.arrived;
  if (rv.arrived == rv.expected) {
    lock.unlock();
    const double started = launch();
    lock.lock();
    rv.started = started;
    rv.finished = sim_now();
    rv.done = true;
    rv.cv->notify_all();
    return;
  }
  while (!rv.done) {
    world.throw_if_aborted();
    rv.cv->wait(lock);
  }
}

std::vector<Flow> ring(const std::vector<int>& members, double fraction) {
  std::vector<Flow> flows;
  const std::size_t n = members.size();
  if (n < 2) return flows;
  for (std::size_t i = 0; i < n; ++i) flows.push_back({members[i], members[(i + 1) % n], fraction});
  return flows;
}

double closed_form_seconds(const std::string& algorithm, double bytes, int n, LinkSpec link) {
  if (n < 2 || algorithm == "barrier") return 0;
  const Bytes b{static_cast<std::int64_t>(bytes)};
  if (algorithm == "all_reduce") return collective_time(Collective::all_reduce, b, n, link).value;
  if (algorithm == "all_gather") return collective_time(Collective::all_gather, b, n, link).value;
  if (algorithm == "reduce_scatter")
    return collective_time(Collective::reduce_scatter, b, n, link).value;
  if (algorithm == "broadcast") return collective_time(Collective::broadcast, b, n, link).value;
  if (algorithm == "all_to_all") return collective_time(Collective::all_to_all, b, n, link).value;
  throw std::logic_error("SimCommunicator: unknown algorithm " + algorithm);
}

std::optional<Collective> collective_of(const std::string& algorithm) {
  if (algorithm == "all_reduce") return Collective::all_reduce;
  if (algorithm == "all_gather") return Collective::all_gather;
  if (algorithm == "reduce_scatter") return Collective::reduce_scatter;
  if (algorithm == "broadcast") return Collective::broadcast;
  if (algorithm == "all_to_all") return Collective::all_to_all;
  return std::nullopt;
}

// The split sizes of an all_to_all_v: one non-negative count per member, summing to the
// tensor's elements.
void check_splits(std::span<const std::int64_t> counts, const std::string& what, std::int64_t total,
                  const std::string& tensor, int n, const std::string& id) {
  const std::string at = "all_to_all_v on " + id + ": ";
  if (counts.size() != static_cast<std::size_t>(n))
    throw std::invalid_argument(at + what + " holds " + std::to_string(counts.size()) +
                                " counts, expected one per rank = " + std::to_string(n));
  std::int64_t sum = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] < 0)
      throw std::invalid_argument(at + what + "[" + std::to_string(p) +
                                  "] = " + std::to_string(counts[p]) + " is negative");
    sum += counts[p];
  }
  if (sum != total)
    throw std::invalid_argument(at + what + " sum to " + std::to_string(sum) + " elements but " +
                                tensor + " holds " + std::to_string(total));
}

// The largest input of an all_to_all_v, bytes: the longest row of its send matrix.
double largest_row(const std::vector<std::vector<double>>& m) {
  double largest = 0;
  for (const auto& row : m) {
    double sum = 0;
    for (double b : row) sum += b;
    largest = std::max(largest, sum);
  }
  return largest;
}

}  // namespace

double run_flows(SimWorld& world, const std::vector<Flow>& flows, double total_bytes,
                 double extra_latency) {
  const double start = sim_now();
  std::vector<simgrid::s4u::CommPtr> comms;
  for (const auto& f : flows) {
    const auto bytes = static_cast<std::uint64_t>(f.fraction * total_bytes + 0.5);
    if (bytes == 0) continue;
    comms.push_back(simgrid::s4u::Comm::sendto_async(world.host(f.src), world.host(f.dst), bytes));
  }
  if (!comms.empty()) simgrid::s4u::Comm::wait_all(comms);
  if (!comms.empty()) sim_sleep_for(extra_latency);
  return start;
}

SimCommunicator::SimCommunicator(SimWorld& world, std::vector<int> members, int me,
                                 std::string name, std::string id)
    : world_(world),
      members_(std::move(members)),
      me_(me),
      name_(std::move(name)),
      id_(std::move(id)),
      mutex_(simgrid::s4u::Mutex::create()),
      cv_(simgrid::s4u::ConditionVariable::create()) {
  world_.watch(cv_);  // an aborted run wakes the communication actor
  auto it = std::find(members_.begin(), members_.end(), me_);
  if (it == members_.end())
    throw std::invalid_argument("SimCommunicator " + id_ + ": rank " + std::to_string(me_) +
                                " is not a member");
  index_ = static_cast<int>(it - members_.begin());
  nccl_ = nccl_info(world_.host(me_));
  if (nccl_)
    shape_ = nccl_shape_of(
        members_, [&](int r) { return nccl_->node_of.at(static_cast<std::size_t>(r)); },
        [&](int r) { return nccl_->nic_of.at(static_cast<std::size_t>(r)); });
}

NcclChoice SimCommunicator::nccl_price(const std::string& algorithm, double bytes) {
  const auto c = collective_of(algorithm);
  if (!nccl_ || !c || size() < 2) return NcclChoice{};
  auto it = priced_.find({algorithm, bytes});
  if (it == priced_.end()) {
    const NcclChoice choice = nccl_choose(nccl_->spec, *c, bytes, shape_);
    it =
        priced_
            .emplace(std::make_pair(algorithm, bytes),
                     PricedCollective{choice, &usage_[algorithm + " " + nccl_choice_label(choice)]})
            .first;
  }
  const NcclChoice& choice = it->second.choice;
  NcclUse& use = *it->second.use;
  use.count += 1;
  use.bytes += bytes;
  use.seconds += choice.seconds;
  return choice;
}

// The cross-node traffic of the group's ring as NCCL lays it out: NCCL runs one ring per
// channel and each channel leaves a node through a different NIC, so every node boundary
// carries the ring's bytes spread over the NICs of the node's members. Here each member
// sends 1/L of the ring's bytes to its counterpart L places on (L members per node, so on
// the next node), through its own NIC: a NIC that k of the node's members share carries
// k/L of the bytes, as k of NCCL's channels would. The NVLink hops inside a node are left
// to the tuner's bus bandwidth (sim/nccl_model.hpp). Unlike a ring of channels, this is
// the same set of transfers under any rotation of the members, so symmetric mode's images
// of a dp group under dp shifts are the group itself, not phantom traffic.
std::vector<Flow> SimCommunicator::nccl_ring(double fraction) const {
  const int n = size();
  if (shape_.nodes < 2 || n < 2) return ring(members_, fraction);
  const int per_node = std::max(1, n / shape_.nodes);
  std::vector<Flow> flows;
  for (int i = 0; i < n; ++i)
    flows.push_back({members_[static_cast<std::size_t>(i)],
                     members_[static_cast<std::size_t>((i + per_node) % n)], fraction / per_node});
  return flows;
}

// The communication actor is a daemon: the engine ends it when the ranks' actors are
// done, so a communicator must outlive the simulation run (the runner owns them).
SimCommunicator::~SimCommunicator() = default;

void SimCommunicator::serve() {
  // Once the run is aborted, the works issued here are woken (their waits then throw
  // RunAborted) and the actor ends; an error of its own aborts the run first.
  auto wake = [](WorkState& state) {
    std::unique_lock lock(*state.mutex);
    state.cv->notify_all();
  };
  auto end_on_abort = [&] {
    std::deque<Task> left;
    {
      std::unique_lock lock(*mutex_);
      left.swap(queue_);
    }
    for (auto& t : left) wake(*t.state);
  };
  for (;;) {
    Task task;
    {
      std::unique_lock lock(*mutex_);
      while (queue_.empty() && !world_.aborted()) cv_->wait(lock);
      if (world_.aborted()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      sim_sleep_until(task.not_before);
      task.run(*task.state);
    } catch (const RunAborted&) {
      wake(*task.state);
      break;
    } catch (const std::exception&) {
      world_.fail(me_, std::current_exception());
      wake(*task.state);
      break;
    }
  }
  end_on_abort();
}

std::optional<double> SimCommunicator::straggler_delay(const std::string& algorithm,
                                                       const Stream& s) {
  if (straggler_fraction_ <= 0 || algorithm != straggler_sync_) return std::nullopt;
  RankStats& stats = world_.stats(me_);
  if (straggler_step_ != stats.step) {
    straggler_step_ = stats.step;
    straggler_synced_ = false;
    straggler_step_delay_ = 0;
  }
  // Once the step has waited for its gradient sync, the replicas are in step again.
  if (stats.step < 0 || straggler_synced_) return std::nullopt;
  const double ready = std::max(dynamic_cast<const SimStream&>(s).ready(), sim_now());
  const double delay = straggler_fraction_ * std::max(0.0, ready - stats.step_start);
  // Booked once a step: the step waits for its last (longest) delay.
  if (delay > straggler_step_delay_) {
    stats.straggler_wait += delay - straggler_step_delay_;
    straggler_step_delay_ = delay;
  }
  return delay;
}

std::unique_ptr<Work> SimCommunicator::issue(Stream& s, std::function<void(WorkState&)> run,
                                             double delay, bool* synced) {
  auto& stream = dynamic_cast<SimStream&>(s);
  if (!actor_) {
    actor_ = simgrid::s4u::Actor::create(name_ + " comm of rank " + std::to_string(me_),
                                         world_.host(me_), [this] { serve(); });
    actor_->daemonize();
    world_.add_comm_actor(me_, actor_);
  }
  auto state = std::make_shared<WorkState>();
  state->issued = sim_now();
  {
    std::unique_lock lock(*mutex_);
    queue_.push_back({state, std::max(stream.ready(), sim_now()) + delay, std::move(run)});
    cv_->notify_one();
  }
  return std::make_unique<SimWork>(state, stream, world_, world_.stats(me_), name_, synced);
}

// In symmetric mode the images of a group under the shifts that map it onto itself (the dp
// shifts of a dp group) are the group's own transfers relabelled, not other traffic: a
// ring whose channels are not shift-invariant would otherwise count them twice. Keeps the
// group's own flows and the images that leave it.
std::vector<Flow> SimCommunicator::own_and_other_groups(std::vector<Flow> with_images,
                                                        const std::vector<Flow>& own) const {
  std::set<std::pair<int, int>> mine;
  for (const auto& f : own) mine.insert({f.src, f.dst});
  const std::set<int> members(members_.begin(), members_.end());
  std::erase_if(with_images, [&](const Flow& f) {
    return !mine.count({f.src, f.dst}) && members.count(f.src) && members.count(f.dst);
  });
  return with_images;
}

const SimCommunicator::Plan& SimCommunicator::plan(const std::string& algorithm, int root) {
  const auto key = std::make_pair(algorithm, root);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto n = static_cast<double>(members_.size());
  std::vector<Flow> flows;
  double steps = 1;
  if (algorithm == "all_reduce") {
    flows = nccl_ ? nccl_ring(2 * (n - 1) / n) : ring(members_, 2 * (n - 1) / n);
    steps = 2 * (n - 1);
  } else if (algorithm == "all_gather" || algorithm == "reduce_scatter") {
    flows = nccl_ ? nccl_ring((n - 1) / n) : ring(members_, (n - 1) / n);
    steps = n - 1;
  } else if (algorithm == "broadcast") {
    const std::size_t size = members_.size(), r = static_cast<std::size_t>(root);
    for (std::size_t i = 0; i + 1 < size; ++i)
      flows.push_back({members_[(r + i) % size], members_[(r + i + 1) % size], 1.0});
    steps = n - 1;
  } else if (algorithm == "all_to_all") {
    for (int a : members_)
      for (int b : members_)
        if (a != b) flows.push_back({a, b, 1.0 / n});
  } else if (algorithm == "barrier") {
  } else {
    throw std::logic_error("SimCommunicator: unknown algorithm " + algorithm);
  }
  double hop = 0;
  for (const auto& f : flows) hop = std::max(hop, world_.latency(f.src, f.dst));
  Plan p{own_and_other_groups(world_.with_images(flows), flows), std::max(0.0, steps - 1) * hop, 0,
         hop};
  if (nccl_) {
    // Seconds per byte of the collective that the group's own flows take alone at line
    // rate: the most loaded link (own flows that share a NIC add up).
    std::map<simgrid::s4u::Link*, double> load;
    for (const auto& f : flows) {
      std::vector<simgrid::s4u::Link*> links;
      double latency = 0;
      world_.host(f.src)->route_to(world_.host(f.dst), links, &latency);
      for (auto* l : links) load[l] += f.fraction;
    }
    for (const auto& [link, fraction] : load)
      if (link->get_bandwidth() > 0)
        p.seconds_per_byte = std::max(p.seconds_per_byte, fraction / link->get_bandwidth());
  }
  return plans_.emplace(key, std::move(p)).first->second;
}

std::unique_ptr<Work> SimCommunicator::collective(Stream& s, const std::string& algorithm,
                                                  double bytes, int root) {
  if (world_.record_ops())
    world_.stats(me_).collectives.push_back(algorithm + " " + name_ + " " +
                                            std::to_string(static_cast<std::int64_t>(bytes)));
  const std::int64_t sequence = sequence_++;
  const std::optional<double> straggler = straggler_delay(algorithm, s);
  const double delay = straggler.value_or(0);
  bool* synced = straggler ? &straggler_synced_ : nullptr;
  if (present_ < 0) present_ = world_.count_present(members_);
  const int expected = present_;
  // The SMs the collective's kernels hold while it runs (sim/sm_contention.hpp).
  SmContention* contention = world_.stats(me_).contention.get();
  auto blocks_of = [&](const NcclChoice& c) {
    return contention ? nccl_blocks(c.channels, shape_.nodes > 1, contention->compute_capability(),
                                    c.algorithm == NcclAlgorithm::nvls)
                      : 0;
  };
  if (closed_form_) {
    const NcclChoice choice = nccl_ && size() > 1 ? nccl_price(algorithm, bytes) : NcclChoice{};
    const double seconds =
        nccl_ ? choice.seconds : closed_form_seconds(algorithm, bytes, size(), *closed_form_);
    const int blocks = nccl_ && size() > 1 ? blocks_of(choice) : 0;
    if (expected == 1) {
      auto& stream = dynamic_cast<SimStream&>(s);
      auto state = std::make_shared<WorkState>();
      state->issued = sim_now();
      const double start = std::max({stream.ready() + delay, sim_now() + delay, clock_});
      clock_ = start + seconds;
      state->finish(start, clock_, start);
      if (contention) contention->collective_ran(start, clock_, blocks);
      return std::make_unique<SimWork>(state, stream, world_, world_.stats(me_), name_, synced);
    }
    const std::string key = id_ + "#" + std::to_string(sequence);
    return issue(
        s,
        [this, key, expected, seconds, contention, blocks](WorkState& w) {
          auto rv = world_.rendezvous(key, expected);
          meet(world_, *rv, [&] {
            const double start = sim_now();
            sim_sleep_for(seconds);
            return start;
          });
          if (++rv->left == rv->expected) world_.forget(key);
          w.finish(rv->started, rv->finished, rv->started);
          if (contention) contention->collective_ran(rv->started, rv->finished, blocks);
        },
        delay, synced);
  }
  const std::string key = id_ + "#" + std::to_string(sequence);
  const Plan& p = plan(algorithm, root);
  double flow_bytes = bytes, extra_latency = p.extra_latency;
  int blocks = 0;
  if (nccl_ && size() > 1 && algorithm != "barrier") {
    // Scale the flows so that alone they take the tuner's bandwidth term, then add the
    // tuner's latency less what SimGrid's routes already add.
    const NcclChoice choice = nccl_price(algorithm, bytes);
    blocks = blocks_of(choice);
    if (p.seconds_per_byte > 0 && choice.algorithm_bandwidth > 0)
      flow_bytes = bytes / choice.algorithm_bandwidth / p.seconds_per_byte;
    extra_latency = std::max(0.0, choice.latency - p.route_latency);
  }
  return issue(
      s,
      [this, key, expected, &p, flow_bytes, extra_latency, contention, blocks](WorkState& w) {
        auto rv = world_.rendezvous(key, expected);
        meet(world_, *rv, [&] { return run_flows(world_, p.flows, flow_bytes, extra_latency); });
        if (++rv->left == rv->expected) world_.forget(key);
        w.finish(rv->started, rv->finished, rv->started);
        if (contention) contention->collective_ran(rv->started, rv->finished, blocks);
      },
      delay, synced);
}

std::unique_ptr<Work> SimCommunicator::all_reduce(Stream& s, Tensor& buffer, ReduceOp) {
  return collective(s, "all_reduce", static_cast<double>(buffer.bytes().value));
}

std::unique_ptr<Work> SimCommunicator::all_gather(Stream& s, const Tensor& input, Tensor& output) {
  if (output.numel() != input.numel() * size())
    throw std::invalid_argument("all_gather on " + id_ + ": output holds " +
                                std::to_string(output.numel()) + " elements, needs " +
                                std::to_string(input.numel() * size()));
  return collective(s, "all_gather", static_cast<double>(output.bytes().value));
}

std::unique_ptr<Work> SimCommunicator::reduce_scatter(Stream& s, const Tensor& input,
                                                      Tensor& output, ReduceOp) {
  if (input.numel() != output.numel() * size())
    throw std::invalid_argument("reduce_scatter on " + id_ + ": input holds " +
                                std::to_string(input.numel()) + " elements, needs " +
                                std::to_string(output.numel() * size()));
  return collective(s, "reduce_scatter", static_cast<double>(input.bytes().value));
}

std::unique_ptr<Work> SimCommunicator::broadcast(Stream& s, Tensor& buffer, int root) {
  if (root < 0 || root >= size())
    throw std::invalid_argument("broadcast on " + id_ + ": root " + std::to_string(root) +
                                " outside the group of " + std::to_string(size()));
  return collective(s, "broadcast", static_cast<double>(buffer.bytes().value), root);
}

std::unique_ptr<Work> SimCommunicator::all_to_all(Stream& s, const Tensor& input, Tensor& output) {
  if (input.numel() != output.numel() || input.numel() % size() != 0)
    throw std::invalid_argument("all_to_all on " + id_ + ": " + std::to_string(input.numel()) +
                                " and " + std::to_string(output.numel()) +
                                " elements must be equal and divide by " + std::to_string(size()));
  return collective(s, "all_to_all", static_cast<double>(input.bytes().value));
}

std::vector<std::vector<double>> SimCommunicator::send_matrix(
    const std::map<int, std::vector<double>>& posts) const {
  const std::vector<double>* first_present = nullptr;
  for (int m : members_)
    if (auto it = posts.find(m); it != posts.end()) {
      first_present = &it->second;
      break;
    }
  if (!first_present) throw std::logic_error("all_to_all_v on " + id_ + ": no member posted");
  std::vector<std::vector<double>> rows;
  for (int m : members_) {
    auto it = posts.find(m);
    rows.push_back(it != posts.end() ? it->second : *first_present);
  }
  return rows;
}

void SimCommunicator::all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                                        std::span<std::int64_t> all) {
  const std::size_t n = mine.size();
  if (all.size() != n * static_cast<std::size_t>(size()))
    throw std::invalid_argument("all_gather_counts on " + id_ + ": " + std::to_string(all.size()) +
                                " places for " + std::to_string(size()) + " members' " +
                                std::to_string(n) + " counts");
  const std::string key = id_ + "#counts" + std::to_string(counts_sequence_++);
  world_.count_posts(key).posts[me_].assign(mine.begin(), mine.end());
  // Every simulated member posts before it issues, so all have posted once this is done.
  collective(s, "all_gather", static_cast<double>(all.size() * sizeof(std::int64_t)))->wait();
  auto& entry = world_.count_posts(key);
  const std::vector<std::int64_t>* first = nullptr;
  for (int m : members_)
    if (auto it = entry.posts.find(m); it != entry.posts.end()) {
      first = &it->second;
      break;
    }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto it = entry.posts.find(members_[i]);
    const std::vector<std::int64_t>& v = it != entry.posts.end() ? it->second : *first;
    if (v.size() != n)
      throw std::invalid_argument("all_gather_counts on " + id_ + ": members post " +
                                  std::to_string(v.size()) + " and " + std::to_string(n) +
                                  " counts");
    std::copy(v.begin(), v.end(), all.begin() + static_cast<std::ptrdiff_t>(i * n));
  }
  if (++entry.read == static_cast<int>(entry.posts.size())) world_.forget_count_posts(key);
}

std::unique_ptr<Work> SimCommunicator::all_to_all_v(Stream& s, const Tensor& input,
                                                    std::span<const std::int64_t> send_counts,
                                                    Tensor& output,
                                                    std::span<const std::int64_t> recv_counts) {
  const int n = size();
  if (input.dtype != output.dtype)
    throw std::invalid_argument("all_to_all_v on " + id_ + ": input is " +
                                std::string(dtype_name(input.dtype)) + " but output is " +
                                std::string(dtype_name(output.dtype)));
  check_splits(send_counts, "send_counts", input.numel(), "input", n, id_);
  check_splits(recv_counts, "recv_counts", output.numel(), "output", n, id_);
  const auto element = static_cast<double>(dtype_size(input.dtype).value);
  std::vector<double> row;  // bytes to each member
  for (const std::int64_t c : send_counts) row.push_back(static_cast<double>(c) * element);
  if (world_.record_ops())
    world_.stats(me_).collectives.push_back("all_to_all_v " + name_ + " " +
                                            std::to_string(input.bytes().value));
  nccl_price("all_to_all", static_cast<double>(input.bytes().value));  // this rank's usage
  const std::string key = id_ + "#" + std::to_string(sequence_++);
  const int expected = world_.count_present(members_);

  if (closed_form_) {
    if (expected == 1) {
      const double seconds = closed_form_v_seconds(send_matrix({{me_, row}}));
      auto& stream = dynamic_cast<SimStream&>(s);
      auto state = std::make_shared<WorkState>();
      state->issued = sim_now();
      const double start = std::max({stream.ready(), sim_now(), clock_});
      clock_ = start + seconds;
      state->finish(start, clock_, start);
      return std::make_unique<SimWork>(state, stream, world_, world_.stats(me_), name_);
    }
    return issue(s, [this, key, expected, row](WorkState& w) {
      world_.send_bytes_posts(key)[me_] = row;
      auto rv = world_.rendezvous(key, expected);
      meet(world_, *rv, [&] {
        const double start = sim_now();
        const double seconds = closed_form_v_seconds(send_matrix(world_.send_bytes_posts(key)));
        sim_sleep_for(seconds);
        return start;
      });
      if (++rv->left == rv->expected) {
        world_.forget(key);
        world_.forget_send_bytes_posts(key);
      }
      w.finish(rv->started, rv->finished, rv->started);
    });
  }

  return issue(s, [this, key, expected, row](WorkState& w) {
    world_.send_bytes_posts(key)[me_] = row;
    auto rv = world_.rendezvous(key, expected);
    meet(world_, *rv, [&] {
      const auto m = send_matrix(world_.send_bytes_posts(key));
      // The uniform all-to-all's plan, scaling and latency for the largest input (see
      // collective()), so that uniform splits price exactly as all_to_all does.
      const Plan& uniform = plan("all_to_all", 0);
      double scale = 1, extra_latency = uniform.extra_latency;
      if (nccl_ && m.size() > 1) {
        const NcclChoice c =
            nccl_choose(nccl_->spec, Collective::all_to_all, largest_row(m), shape_);
        if (uniform.seconds_per_byte > 0 && c.algorithm_bandwidth > 0)
          scale = 1 / (c.algorithm_bandwidth * uniform.seconds_per_byte);
        extra_latency = std::max(0.0, c.latency - uniform.route_latency);
      }
      std::vector<Flow> own;  // fraction = bytes, of a total of 1
      for (std::size_t i = 0; i < m.size(); ++i)
        for (std::size_t j = 0; j < m.size(); ++j)
          if (i != j && m[i][j] > 0) own.push_back({members_[i], members_[j], m[i][j] * scale});
      return run_flows(world_, own_and_other_groups(world_.with_images(own), own), 1.0,
                       extra_latency);
    });
    if (++rv->left == rv->expected) {
      world_.forget(key);
      world_.forget_send_bytes_posts(key);
    }
    w.finish(rv->started, rv->finished, rv->started);
  });
}

// The busiest member's max(sent, received) bytes over the link, plus one latency: the
// closed form's (n−1)/n·S of the uniform all-to-all. Under NCCL's model, the tuner's time
// for the uniform all-to-all of the largest input, its bandwidth term scaled by the load.
double SimCommunicator::closed_form_v_seconds(const std::vector<std::vector<double>>& m) const {
  const std::size_t n = m.size();
  if (n < 2) return 0;
  double load = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double sent = 0, received = 0;
    for (std::size_t j = 0; j < n; ++j)
      if (i != j) {
        sent += m[i][j];
        received += m[j][i];
      }
    load = std::max({load, sent, received});
  }
  if (!nccl_) return closed_form_->latency.value + load / closed_form_->bandwidth.value;
  const double largest = largest_row(m);
  const NcclChoice c = nccl_choose(nccl_->spec, Collective::all_to_all, largest, shape_);
  const double uniform = static_cast<double>(n - 1) / static_cast<double>(n) * largest;
  return c.latency + (uniform > 0 ? (c.seconds - c.latency) * load / uniform : 0.0);
}

// A send this small completes without its receiver: Open MPI's shared-memory eager limit is
// 4 KiB (btl_vader_eager_limit), and NCCL's low-latency protocol writes small messages into
// buffers the receiver set up when it connected. Megatron's exchange of p2p shapes (three
// integers) relies on it: a rank's shape batch may send to a peer that posts the matching
// receive only after the sender's next batch has matched one of its own.
constexpr double kEagerSendBytes = 4096;

// NCCL's send/recv between two GPUs of one NVLink domain runs below the link's rate (its
// p2p channels: nccl.p2p_nvlink_gbs, measured); the pair's flow carries its bytes stretched
// by line rate / that rate, so that alone it takes the measured time (SimGrid 3.32 cannot cap
// one host-to-host flow). Under contention the stretched flow takes a fair share of the
// link where NCCL's would leave the rest to others. The tensor-parallel group's p2p is
// Transformer Engine's userbuffers ring exchange (--tp-comm-overlap), not NCCL: line rate.
double SimCommunicator::nccl_p2p_stretch(int src, int dst) const {
  if (!nccl_ || name_ == "tp" || nccl_->spec.p2p_nvlink.value <= 0) return 1.0;
  const auto s = static_cast<std::size_t>(src), d = static_cast<std::size_t>(dst);
  if (nccl_->node_of.at(s) != nccl_->node_of.at(d)) return 1.0;  // across domains: the NICs
  return std::max(1.0, nccl_->gpu_link / nccl_->spec.p2p_nvlink.value);
}

std::unique_ptr<Work> SimCommunicator::batch_p2p(Stream& s, std::span<const P2POp> ops) {
  struct Op {
    std::string key;
    int expected;
    std::vector<Flow> flows;
    double bytes;
    bool send;
    double flow_bytes = 0;  // what its flows carry (nccl_p2p_stretch)
  };
  std::vector<Op> batch;
  for (const auto& op : ops) {
    if (op.peer < 0 || op.peer >= size() || op.peer == index_)
      throw std::invalid_argument("batch_p2p on " + id_ + ": peer " + std::to_string(op.peer) +
                                  " is not another member of the group of " +
                                  std::to_string(size()));
    const int peer = members_[static_cast<std::size_t>(op.peer)];
    const bool send = op.kind == P2POp::Kind::send;
    const int src = send ? me_ : peer, dst = send ? peer : me_;
    const std::int64_t seq = p2p_sequence_[{src, dst}]++;
    std::string key =
        id_ + "#p" + std::to_string(src) + ">" + std::to_string(dst) + "#" + std::to_string(seq);
    auto flows = p2p_flows_.find({src, dst});
    if (flows == p2p_flows_.end())
      flows =
          p2p_flows_.emplace(std::make_pair(src, dst), world_.with_images({{src, dst, 1.0}})).first;
    batch.push_back({std::move(key), world_.count_present({src, dst}), flows->second,
                     static_cast<double>(op.tensor.bytes().value), send});
    batch.back().flow_bytes = batch.back().bytes * nccl_p2p_stretch(src, dst);
  }
  if (world_.record_ops()) {
    double bytes = 0;
    for (const auto& op : batch) bytes += op.bytes;
    world_.stats(me_).collectives.push_back("p2p " + name_ + " " + std::to_string(ops.size()) +
                                            " " + std::to_string(static_cast<std::int64_t>(bytes)));
  }
  return issue(s, [this, batch = std::move(batch)](WorkState& w) {
    // Arrive at every pair first (a batch sends and receives at once, as NCCL's grouped
    // calls do), start the pairs whose peer is already there, then wait for the rest. A
    // small send starts at once, its receiver there or not (kEagerSendBytes); its receiver
    // only waits for it, unless the sender is not simulated (symmetric mode).
    std::vector<std::shared_ptr<Rendezvous>> rvs;
    std::vector<simgrid::s4u::CommPtr> mine;
    std::vector<std::shared_ptr<Rendezvous>> launched;
    for (const auto& op : batch) {
      auto rv = world_.rendezvous(op.key, op.expected);
      rvs.push_back(rv);
      const bool last = ++rv->arrived == rv->expected;
      const bool eager = op.bytes <= kEagerSendBytes && rv->expected > 1;
      if (eager ? !op.send : !last) continue;
      rv->started = sim_now();
      for (const auto& f : op.flows) {
        const auto bytes = static_cast<std::uint64_t>(f.fraction * op.flow_bytes + 0.5);
        if (bytes > 0)
          mine.push_back(
              simgrid::s4u::Comm::sendto_async(world_.host(f.src), world_.host(f.dst), bytes));
      }
      launched.push_back(rv);
    }
    if (!mine.empty()) simgrid::s4u::Comm::wait_all(mine);
    for (auto& rv : launched) {
      std::unique_lock lock(*rv->mutex);
      rv->finished = sim_now();
      rv->done = true;
      rv->cv->notify_all();
    }
    double started = sim_now(), finished = 0, arrived = 0;
    for (std::size_t i = 0; i < rvs.size(); ++i) {
      auto& rv = *rvs[i];
      {
        std::unique_lock lock(*rv.mutex);
        while (!rv.done) {
          world_.throw_if_aborted();
          rv.cv->wait(lock);
        }
      }
      started = std::min(started, rv.started);
      arrived = std::max(arrived, rv.started);
      finished = std::max(finished, rv.finished);
      if (++rv.left == rv.expected) world_.forget(batch[i].key);
    }
    w.finish(started, std::max(finished, started), arrived);
  });
}

void SimCommunicator::barrier() {
  const std::string key = id_ + "#barrier" + std::to_string(sequence_++);
  auto rv = world_.rendezvous(key, world_.count_present(members_));
  meet(world_, *rv, [] { return sim_now(); });
  if (++rv->left == rv->expected) world_.forget(key);
}

std::unique_ptr<Communicator> SimCommunicator::split(int color, int key, std::string name) {
  if (world_.count_present(members_) != size())
    throw std::logic_error("SimCommunicator::split on " + id_ +
                           ": in symmetric mode not every member runs; build the group "
                           "communicators from the layout instead");
  // Every member posts (color, key) and leaves once all have; each then picks its group.
  const std::string rv_key = id_ + "#split" + std::to_string(sequence_++);
  auto rv = world_.rendezvous(rv_key, size());
  auto& posted = world_.split_posts(rv_key);
  posted[me_] = {color, key};
  meet(world_, *rv, [] { return sim_now(); });
  std::vector<std::tuple<int, int, int>> mine;  // (key, old index, global rank)
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const auto [c, k] = posted.at(members_[i]);
    if (c == color) mine.emplace_back(k, static_cast<int>(i), members_[i]);
  }
  std::sort(mine.begin(), mine.end());
  std::vector<int> ranks;
  for (const auto& m : mine) ranks.push_back(std::get<2>(m));
  if (++rv->left == rv->expected) {
    world_.forget(rv_key);
    world_.forget_split_posts(rv_key);
  }
  return std::make_unique<SimCommunicator>(world_, std::move(ranks), me_, std::move(name),
                                           id_ + "/" + std::to_string(color));
}

}  // namespace tandem::sim
