#include "sim/search/dry_run.hpp"

#include <xbt/log.h>

#include <algorithm>
#include <map>
#include <optional>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/NetZone.hpp>
#include <stdexcept>
#include <string>

#include "core/pipeline_layout.hpp"
#include "schedules/layout.hpp"
#include "sim/collective_cost.hpp"
#include "sim/device_options.hpp"
#include "sim/host_issue.hpp"
#include "sim/nccl_model.hpp"
#include "sim/profiler_effects.hpp"
#include "topology/placement.hpp"
#include "train/trainer.hpp"

namespace tandem::sim::search {
namespace {

// The trainer draws sample indices; the phantom device never reads them.
class NoSamples : public data::SampleDataset {
 public:
  NoSamples(std::int64_t size, std::int64_t seq) : size_(size), seq_(seq) {}
  std::int64_t size() const override { return size_; }
  std::int64_t sequence_length() const override { return seq_; }
  void read_sample(std::int64_t, std::span<std::int32_t>) const override {
    throw std::logic_error("the dry run reads no samples");
  }

 private:
  std::int64_t size_, seq_;
};

// The compute stream's clock as the dry run keeps it: the busy seconds of its ops plus the
// seconds it must stand still for collectives priced in closed form (groups inside one
// switched node, which the simulator prices the same way), issued on it and waited for.
// From the first pipeline receive on, a second clock runs beside it (StageDryRun::
// SinceFirstRecv): it counts the same ops, but only the stalls for operations issued after
// that receive; those issued before it are done by then.
struct StageClock {
  const SimDevice* device = nullptr;
  double stalled = 0;
  double now() const { return device->compute_busy() + stalled; }

  bool since_recv = false;   // the first pipeline receive has been issued
  double busy_at_recv = 0;   // the compute stream's busy seconds then
  double stalled_since = 0;  // stalls since then, for operations issued since then
  void start_since_recv() {
    since_recv = true;
    busy_at_recv = device->compute_busy();
    stalled_since = 0;
  }
  double since() const { return device->compute_busy() - busy_at_recv + stalled_since; }
};

// Done at once as far as the host is concerned. An operation of a communicator ends at
// `end` on the stream clock: like the simulator's NCCL stream per communicator, it starts
// no earlier than the compute stream's work issued before it and than the end of the
// communicator's previous operation, and takes its priced seconds. Waiting for it stalls
// the compute stream until then.
// `end_since` is the end on the clock since the first receive, for an operation issued
// after it (std::nullopt: issued before it, done by then on that clock).
class DoneWork : public Work {
 public:
  DoneWork() = default;
  DoneWork(StageClock* at, double end, std::optional<double> end_since)
      : clock_(at), end_(end), end_since_(end_since) {}
  void wait() override {
    if (clock_ == nullptr || waited_) return;
    waited_ = true;
    clock_->stalled += std::max(0.0, end_ - clock_->now());
    if (clock_->since_recv && end_since_)
      clock_->stalled_since += std::max(0.0, *end_since_ - clock_->since());
  }
  bool test() override { return true; }

 private:
  StageClock* clock_ = nullptr;
  double end_ = 0;
  std::optional<double> end_since_;
  bool waited_ = false;
};

// What bounds the seconds of a group's operations from below, as the simulator prices them.
struct GroupPricing {
  // Inside a switched node: the closed form the simulator uses (NCCL's tuner when `nccl`).
  std::optional<LinkSpec> closed_form;
  double flow_bandwidth = 0;  // bytes/s: the fastest a flow of this group can go (0: unknown)
  std::vector<double> peer_bandwidth;  // bytes/s: the fastest a flow to each member can go
  // NCCL's tuner, when the topology has it: the simulator prices a closed-form group's
  // collectives at its seconds and scales a group's flows to take at least them.
  const NcclSpec* nccl = nullptr;
  NcclShape shape;
};

// A communicator whose operations are done the moment they are issued: phantom tensors
// carry no values, so nothing needs to move. The pipeline one notes the compute stream's
// busy time at its first and last sends and receives.
class InstantCommunicator : public Communicator {
 public:
  InstantCommunicator(int my_rank, int group_size, std::string label, StageClock* stage_clock,
                      Stream* compute, GroupPricing pricing, StageDryRun* notes = nullptr)
      : rank_(my_rank),
        size_(group_size),
        name_(std::move(label)),
        clock_(stage_clock),
        compute_(compute),
        pricing_(std::move(pricing)),
        notes_(notes) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return name_; }
  std::unique_ptr<Communicator> split(int, int, std::string) override {
    throw std::logic_error("the dry run's communicators do not split");
  }
  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp) override {
    return priced(s, Collective::all_reduce, buffer.bytes());
  }
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor&, Tensor& output) override {
    return priced(s, Collective::all_gather, output.bytes());
  }
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor&, ReduceOp) override {
    return priced(s, Collective::reduce_scatter, input.bytes());
  }
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int) override {
    return priced(s, Collective::broadcast, buffer.bytes());
  }
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor&) override {
    return priced(s, Collective::all_to_all, input.bytes());
  }
  // Priced as an all_to_all of the input (the split is the routing model's).
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input, std::span<const std::int64_t>,
                                     Tensor&, std::span<const std::int64_t>) override {
    return priced(s, Collective::all_to_all, input.bytes());
  }
  // Every rank routes alike in the simulator (its routing model): the members' counts
  // are this rank's. Priced at nothing, a few integers.
  void all_gather_counts(Stream&, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override {
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = mine[i % mine.size()];
  }
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override {
    if (notes_ != nullptr) {
      const double busy = clock_->now();
      for (const auto& op : ops)
        if (op.kind == P2POp::Kind::recv && !clock_->since_recv) {
          notes_->before_first_recv = busy;
          clock_->start_since_recv();
        }
      const double since = clock_->since_recv ? clock_->since() : 0;
      auto& after = notes_->since_first_recv;
      for (const auto& op : ops) {
        if (op.kind == P2POp::Kind::recv) {
          notes_->has_recv = true;
          after.at_last_recv = since;
        } else {
          if (!notes_->has_send) {
            notes_->at_first_send = busy;
            after.at_first_send = since;
          }
          notes_->has_send = true;
          after.at_last_send = since;
        }
      }
    }
    if (&s != compute_) return std::make_unique<DoneWork>();
    // The batch's transfers run at once, each one flow from its start: none ends before its
    // bytes crossed the slowest link between the pair.
    double seconds = 0;
    for (const auto& op : ops) {
      const double bandwidth = pricing_.peer_bandwidth.at(static_cast<std::size_t>(op.peer));
      if (bandwidth > 0)
        seconds = std::max(seconds, static_cast<double>(op.tensor.bytes().value) / bandwidth);
    }
    return queued(seconds);
  }
  void barrier() override {}

 private:
  std::unique_ptr<Work> priced(Stream& s, Collective c, Bytes bytes) {
    if (&s != compute_ || size_ < 2) return std::make_unique<DoneWork>();
    return queued(seconds(c, bytes));
  }
  // A lower bound on the operation's seconds alone on the platform.
  double seconds(Collective c, Bytes bytes) {
    const bool ring = c == Collective::all_reduce || c == Collective::all_gather ||
                      c == Collective::reduce_scatter;
    if (pricing_.nccl != nullptr && ring) {
      const auto key = std::make_pair(c, bytes.value);
      auto it = nccl_seconds_.find(key);
      if (it == nccl_seconds_.end())
        it = nccl_seconds_
                 .emplace(key, nccl_choose(*pricing_.nccl, c, static_cast<double>(bytes.value),
                                           pricing_.shape)
                                   .seconds)
                 .first;
      return it->second;
    }
    if (pricing_.closed_form) return collective_time(c, bytes, size_, *pricing_.closed_form).value;
    // Over SimGrid flows: the ring's every hop is one flow carrying the bus factor × bytes,
    // no faster than the slowest link on its path; latency and contention only add.
    if (pricing_.flow_bandwidth <= 0 || !ring) return 0;
    return bus_bandwidth_factor(c, size_) * static_cast<double>(bytes.value) /
           pricing_.flow_bandwidth;
  }
  std::unique_ptr<Work> queued(double seconds) {
    queue_end_ = std::max(clock_->now(), queue_end_) + seconds;
    std::optional<double> end_since;
    if (clock_->since_recv) {
      // What this communicator ran before the first receive is done by then.
      if (!queued_since_recv_) queue_end_since_ = 0;
      queued_since_recv_ = true;
      queue_end_since_ = std::max(clock_->since(), queue_end_since_) + seconds;
      end_since = queue_end_since_;
    }
    return std::make_unique<DoneWork>(clock_, queue_end_, end_since);
  }
  int rank_, size_;
  std::string name_;
  StageClock* clock_;
  Stream* compute_;
  GroupPricing pricing_;
  std::map<std::pair<Collective, std::int64_t>, double> nccl_seconds_;
  StageDryRun* notes_;
  double queue_end_ = 0;  // stream clock at which the communicator's last operation ends
  // The same on the clock since the first receive, for the operations issued since then.
  bool queued_since_recv_ = false;
  double queue_end_since_ = 0;
};

// The rank (tp 0, cp 0, dp 0) of pipeline stage `stage`.
int rank_of_stage(const Layout& layout, int stage) {
  for (const auto& group : layout.of(GroupKind::pp))
    if (std::find(group.begin(), group.end(), 0) != group.end())
      return group[static_cast<std::size_t>(stage)];
  throw std::logic_error("rank 0 is in no pipeline group");
}

// What stepping a scenario's dry-run stages came to: every stage stepped, or a stage went
// over the memory budget while its model was built or during its step (which then stops at
// the allocation that crossed it).
enum class Budget { within, over_building, over_stepping };
struct StageRuns {
  std::vector<StageDryRun> stages;  // within: one per stage run
  Budget budget = Budget::within;
  // Over: what building the model allocated, or the live bytes the crossing allocation
  // would have made; either way at most the step's high-water mark.
  std::int64_t over_bytes = 0;
};

// One stage's step, appended to `runs`, or `runs` marked over the budget.
void run_stage(const Scenario& s, const Topology& topology, const Layout& layout, int stage,
               const SimDevice::Pricer& pricer, std::int64_t memory_budget, StageRuns& runs) {
  const ParallelContext ctx = make_parallel_context(layout, rank_of_stage(layout, stage));
  // The issuing host as the simulator has it (sim_runner): its span bounds host-bound steps.
  SimDevice device(pricer, device_options(s, topology));
  StageClock stage_clock{&device};
  StageDryRun notes;
  notes.stage = stage;
  // As sim_runner: inside a switched node, or an NVLink domain of several nodes (GB200
  // NVL72), a group's collectives are priced in closed form.
  const bool switched =
      topology.node.interconnect == "nvswitch" || topology.node.interconnect == "shared-memory";
  // Without a domain section, the scenario's node (as sim/platform.cpp places ranks).
  const bool domain = topology.nvlink_domain.gpus > 0;
  const int per_node = std::max(1, s.cluster.gpus_per_node);
  const int per_domain = domain ? topology.nvlink_domain.gpus : per_node;
  auto one_domain = [&](const std::vector<int>& members) {
    for (int m : members)
      if (m / per_domain != members.front() / per_domain) return false;
    return true;
  };
  auto pricing_of = [&](const std::vector<int>& members) {
    GroupPricing g;
    if (switched && one_domain(members)) g.closed_form = topology.node.gpu_link;
    // A flow inside a domain crosses the GPU's link; across domains a NIC too (0: unknown).
    const double in_domain = topology.node.gpu_link.bandwidth.value;
    const double nic = topology.fabric.nic.bandwidth.value;
    const double across = nic > 0 ? std::min(in_domain, nic) : 0;
    g.flow_bandwidth = one_domain(members) ? in_domain : across;
    for (int m : members)
      g.peer_bandwidth.push_back(m / per_domain == ctx.rank / per_domain ? in_domain : across);
    if (topology.nccl.enabled) {
      // NCCL's view of the group, as the simulator's communicator has it (sim/platform.cpp:
      // NCCL's node is the NVLink domain r / gpus_per_nvlink_domain, whose NICs it spreads
      // channels over).
      g.nccl = &topology.nccl;
      g.shape = nccl_shape_of(
          members, [&](int r) { return r / per_domain; },
          [&](int r) {
            if (domain) return nic_in_nvlink_domain(topology, r);
            return topology.fabric.nics_per_node > 0 ? nic_of_gpu(topology, r % per_node) : 0;
          });
    }
    return g;
  };
  std::map<GroupKind, std::unique_ptr<InstantCommunicator>> comms;
  std::map<GroupKind, std::unique_ptr<HostIssueCommunicator>> issued;
  auto get = [&](GroupKind kind) -> Communicator* {
    const auto& members = ctx.group(kind);
    if (members.empty()) return nullptr;
    const int me =
        static_cast<int>(std::find(members.begin(), members.end(), ctx.rank) - members.begin());
    const bool pp = kind == GroupKind::pp;
    comms[kind] = std::make_unique<InstantCommunicator>(
        me, static_cast<int>(members.size()), std::string(group_kind_name(kind)), &stage_clock,
        &device.default_stream(), pricing_of(members), pp ? &notes : nullptr);
    issued[kind] = std::make_unique<HostIssueCommunicator>(*comms[kind], device);
    return issued[kind].get();
  };
  const TrainerGroups groups = trainer_groups(get, layout.sizes.cp);
  const NoSamples samples(2 * static_cast<std::int64_t>(s.training.global_batch_size),
                          s.model.seq_length);
  {
    SimStepObserver observer(device, profiler_effects(s.training, device));
    Trainer trainer(s, ctx, device, groups, samples, nullptr, &observer);
    device.default_stream().synchronize();
    const std::int64_t built_bytes = device.memory().peak().value;
    if (built_bytes > memory_budget) {
      runs.budget = Budget::over_building;
      runs.over_bytes = built_bytes;
      return;
    }
    const double before = stage_clock.now();
    // From where the host is after the synchronize above, not from its issue clock, which
    // lags behind that wait and would count the wait into the step's host span.
    const double host_before = device.host_now();
    notes = StageDryRun{.stage = stage};  // construction issued no pipeline traffic
    stage_clock.since_recv = false;
    // A step that cannot fit stops at the allocation that crosses the budget: its bound is
    // never asked for (the search prunes it by memory).
    device.set_memory_limit(memory_budget);
    try {
      trainer.train_step();
    } catch (const MemoryLimitExceeded& e) {
      runs.budget = Budget::over_stepping;
      runs.over_bytes = e.live_bytes;
      return;
    }
    notes.busy_seconds = stage_clock.now() - before;
    notes.host_seconds = device.host_now() - host_before;
    notes.before_first_recv -= before;
    notes.at_first_send -= before;
    if (notes.has_recv) notes.since_first_recv.busy = stage_clock.since();
  }
  notes.peak_memory_bytes = device.memory().peak().value;
  runs.stages.push_back(notes);
}

// The stages the dry run steps: 0, 1 and pp − 1, or each when the middle ones differ;
// stage 0 first (it holds the most microbatches in flight). A probe: pp − 1 alone.
std::vector<int> stages_to_run(const Scenario& s, DryRunStages which) {
  const int pp = s.parallelism.pipeline_model_parallel_size;
  if (which == DryRunStages::last) return {pp - 1};
  std::vector<int> stages{0};
  if (middle_stages_alike(s)) {
    if (pp > 2) stages.push_back(1);
  } else {  // a layout string whose middle stages differ: each one runs
    for (int stage = 1; stage < pp - 1; ++stage) stages.push_back(stage);
  }
  if (pp > 1) stages.push_back(pp - 1);
  return stages;
}

// Every stage's step at the scenario's m; the first stage over the budget ends the run.
StageRuns run_stages(const Scenario& s, const Layout& layout, const Topology& topology,
                     const SimDevice::Pricer& pricer, std::int64_t memory_budget,
                     DryRunStages which) {
  StageRuns runs;
  for (int stage : stages_to_run(s, which)) {
    run_stage(s, topology, layout, stage, pricer, memory_budget, runs);
    if (runs.budget != Budget::within) break;
  }
  return runs;
}

std::int64_t microbatches_of(const Scenario& s) {
  return s.training.global_batch_size /
         (static_cast<std::int64_t>(s.training.micro_batch_size) * data_parallel_size(s));
}

// `s` with a global batch of m microbatches (per dp rank).
Scenario with_microbatches(Scenario s, std::int64_t m) {
  s.training.global_batch_size =
      static_cast<int>(m * s.training.micro_batch_size * data_parallel_size(s));
  return s;
}

// A stage's step at m microbatches on the line through its steps at k.m1 and k.m2, or
// std::nullopt when the short steps differ in what the count of periods leaves alone.
std::optional<StageDryRun> extrapolate(const StageDryRun& a, const StageDryRun& b,
                                       const ShortSteps& k, std::int64_t m) {
  if (a.stage != b.stage || a.peak_memory_bytes != b.peak_memory_bytes ||
      a.has_recv != b.has_recv || a.has_send != b.has_send ||
      a.before_first_recv != b.before_first_recv || a.at_first_send != b.at_first_send ||
      a.since_first_recv.at_first_send != b.since_first_recv.at_first_send)
    return std::nullopt;
  const double f = static_cast<double>(m - k.m2) / static_cast<double>(k.m2 - k.m1);
  auto extend = [f](double x1, double x2) { return x2 + (x2 - x1) * f; };
  StageDryRun x = b;
  x.busy_seconds = extend(a.busy_seconds, b.busy_seconds);
  x.host_seconds = extend(a.host_seconds, b.host_seconds);
  auto& since = x.since_first_recv;
  since.busy = extend(a.since_first_recv.busy, b.since_first_recv.busy);
  since.at_last_recv = extend(a.since_first_recv.at_last_recv, b.since_first_recv.at_last_recv);
  since.at_last_send = extend(a.since_first_recv.at_last_send, b.since_first_recv.at_last_send);
  return x;
}

// Every stage's step extended to m from its two short steps, or std::nullopt when a stage
// has none, goes over the budget in one or they disagree. Over the budget while building,
// `built` is set (the model is built alike at any m); during a short step, `crossed` names
// the stage (its step at m decides).
std::optional<std::vector<StageDryRun>> extrapolated_stages(
    const Scenario& s, const Layout& layout, const Topology& topology,
    const SimDevice::Pricer& pricer, std::int64_t memory_budget, DryRunStages which,
    std::optional<std::int64_t>& built, std::optional<int>& crossed) {
  const std::vector<int> stages = stages_to_run(s, which);
  std::vector<ShortSteps> ks;
  for (int stage : stages) {
    const auto k = short_steps(s, stage);
    if (!k) return std::nullopt;
    ks.push_back(*k);
  }
  // Every stage's shorter step first: one that goes over the budget ends it the sooner.
  StageRuns at1, at2;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    run_stage(with_microbatches(s, ks[i].m1), topology, layout, stages[i], pricer, memory_budget,
              at1);
    if (at1.budget == Budget::over_building) built = at1.over_bytes;
    if (at1.budget == Budget::over_stepping) crossed = stages[i];
    if (at1.budget != Budget::within) return std::nullopt;
  }
  std::vector<StageDryRun> out;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    run_stage(with_microbatches(s, ks[i].m2), topology, layout, stages[i], pricer, memory_budget,
              at2);
    if (at2.budget == Budget::over_stepping) crossed = stages[i];
    if (at2.budget != Budget::within) return std::nullopt;
    auto x = extrapolate(at1.stages[i], at2.stages[i], ks[i], microbatches_of(s));
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

// Layouts by their arguments: candidates that differ in micro batch, recomputation or
// optimizer settings share one (a twelfth of a 1024-rank search's dry runs went to them).
class LayoutCache {
 public:
  const Layout& of(const Scenario& s) {
    const auto& p = s.parallelism;
    const LayoutSpec spec{
        s.cluster.world_size,    p.tensor_model_parallel_size, p.pipeline_model_parallel_size,
        p.context_parallel_size, p.expert_model_parallel_size, p.order,
        embedding_stages(s)};
    std::string key = std::to_string(spec.world_size) + " " + std::to_string(spec.tp) + " " +
                      std::to_string(spec.pp) + " " + std::to_string(spec.cp) + " " +
                      std::to_string(spec.ep) + " " + spec.order;
    for (int stage : spec.embedding_stages) key += " e" + std::to_string(stage);
    auto it = layouts_.find(key);
    if (it == layouts_.end()) it = layouts_.emplace(key, make_layout(spec)).first;
    return it->second;
  }

 private:
  std::map<std::string, Layout> layouts_;
};

DryRun run_scenario(const Scenario& s, const Topology& topology, const SimDevice::Pricer& pricer,
                    std::int64_t memory_budget, DryRunSteps steps, DryRunStages which,
                    LayoutCache& layouts) {
  const auto& p = s.parallelism;
  const Layout& layout = layouts.of(s);
  std::optional<std::vector<StageDryRun>> stages;
  if (steps == DryRunSteps::extrapolated) {
    std::optional<std::int64_t> built;
    std::optional<int> crossed;
    stages = extrapolated_stages(s, layout, topology, pricer, memory_budget, which, built, crossed);
    if (built) return DryRun{.peak_memory_bytes = *built, .over_budget_before_step = true};
    if (crossed) {
      // The stage whose short step crossed the budget, stepped at m first: over there, the
      // other stages need not run.
      StageRuns at_m;
      run_stage(s, topology, layout, *crossed, pricer, memory_budget, at_m);
      if (at_m.budget == Budget::over_stepping)
        return DryRun{.peak_memory_bytes = at_m.over_bytes, .over_budget_in_step = true};
    }
  }
  DryRun r;
  r.extrapolated = stages.has_value();
  if (!stages) {
    StageRuns at_m = run_stages(s, layout, topology, pricer, memory_budget, which);
    if (at_m.budget != Budget::within)
      return DryRun{.peak_memory_bytes = at_m.over_bytes,
                    .over_budget_before_step = at_m.budget == Budget::over_building,
                    .over_budget_in_step = at_m.budget == Budget::over_stepping};
    stages = std::move(at_m.stages);
  }
  r.stages = std::move(*stages);
  r.probe = which == DryRunStages::last && stages_to_run(s, DryRunStages::all).size() > 1;
  for (const auto& st : r.stages) {
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, st.peak_memory_bytes);
    r.busy_lower_bound = std::max({r.busy_lower_bound, st.busy_seconds, st.host_seconds});
  }
  r.lower_bound_seconds =
      std::max(r.busy_lower_bound, pipeline_lower_bound(r.stages, p.pipeline_model_parallel_size));
  return r;
}

}  // namespace

std::optional<ShortSteps> short_steps(const Scenario& s, int stage) {
  const auto& t = s.training;
  if (!t.rampup_batch_size.empty() || t.micro_batch_size < 1 || data_parallel_size(s) < 1)
    return std::nullopt;
  const std::int64_t m = microbatches_of(s);
  const std::int64_t pp = s.parallelism.pipeline_model_parallel_size;
  const std::string kind = effective_pipeline_schedule(s);
  ShortSteps k;
  if (kind == "none") {
    k = {2, 3};
  } else if (kind == "1f1b") {
    const std::int64_t warmup = pp - stage - 1;
    k = {warmup + 2, warmup + 3};
  } else if (kind == "zb-h1") {
    k = {pp + 1, pp + 2};
  } else if (kind == "interleaved") {
    const std::int64_t group =
        s.parallelism.microbatch_group_size_per_vp_stage.value_or(static_cast<int>(pp));
    if (group < 1 || m % group != 0) return std::nullopt;
    k = {2 * group, 3 * group};
  } else {
    return std::nullopt;  // gpipe: every microbatch's activations are held at once
  }
  if (k.m1 + k.m2 >= m) return std::nullopt;
  return k;
}

double pipeline_lower_bound(const std::vector<StageDryRun>& stages, int pp) {
  if (pp < 2 || stages.size() < 2) return 0;
  auto at = [&](int s) -> const StageDryRun& {
    if (static_cast<int>(stages.size()) == pp) return stages[static_cast<std::size_t>(s)];
    if (s == 0) return stages.front();
    if (s == pp - 1) return stages.back();
    return stages[1];
  };
  const StageDryRun& first = at(0);
  if (!first.has_send || !first.has_recv) return 0;
  // T: when stage s−1's first send can have completed (the first forward reached stage s).
  // Stage 0's first send comes before its first receive: its own clock.
  double first_forward = first.at_first_send;
  // Back through stages s−1 … 1: the last microbatch's backward between their last
  // receive and last send; then stage 0 after its last receive. Every figure past a
  // stage's first receive is on its clock since that receive (StageDryRun::SinceFirstRecv).
  const double stage0_tail = first.since_first_recv.busy - first.since_first_recv.at_last_recv;
  double best = 0, back = 0;  // back: Σ_{j=1}^{s−1} (last send − last recv)
  for (int s = 1; s < pp; ++s) {
    const StageDryRun& st = at(s);
    if (!st.has_recv || !st.has_send) return best;
    const auto& since = st.since_first_recv;
    best = std::max(best, first_forward + since.busy);
    best = std::max(best, first_forward + since.at_last_send + back + stage0_tail);
    first_forward += since.at_first_send;
    back += since.at_last_send - since.at_last_recv;
  }
  return best;
}

std::vector<DryRun> dry_run(const std::vector<Scenario>& scenarios, const Topology& topology,
                            const SimDevice::Pricer& pricer, std::int64_t memory_budget,
                            DryRunSteps steps, DryRunStages which) {
  std::vector<DryRun> results;
  if (scenarios.empty()) return results;
  xbt_log_control_set("xbt_cfg.thresh:warning");
  int argc = 1;
  char name[] = "tandem-search";
  char* argv[] = {name, nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  auto* zone = simgrid::s4u::create_full_zone("dry-run");
  simgrid::s4u::Host* host = zone->create_host("host", 1e9);
  zone->seal();
  std::exception_ptr failure;
  simgrid::s4u::Actor::create("dry-run", host, [&] {
    try {
      LayoutCache layouts;
      for (const auto& s : scenarios)
        results.push_back(run_scenario(s, topology, pricer, memory_budget, steps, which, layouts));
    } catch (...) {
      failure = std::current_exception();
    }
  });
  engine.run();
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace tandem::sim::search
