#include "sim/sim_runner.hpp"

#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "model/flops.hpp"
#include "schedules/layout.hpp"
#include "sim/device_options.hpp"
#include "sim/fp8_gpu_rules.hpp"
#include "sim/host_issue.hpp"
#include "sim/platform.hpp"
#include "sim/profiler_effects.hpp"
#include "sim/sim_communicator.hpp"
#include "sim/simgrid_config.hpp"
#include "sim/stragglers.hpp"
#include "topology/placement.hpp"
#include "train/grad_buckets.hpp"
#include "train/run_trace.hpp"
#include "train/trainer.hpp"

namespace tandem::sim {
namespace {

// The simulator never reads tokens (phantom uploads do not call their producer), but the
// trainer draws sample indices from a dataset; this one has as many as it is asked for.
class PhantomSamples : public data::SampleDataset {
 public:
  PhantomSamples(std::int64_t size, std::int64_t seq) : size_(size), seq_(seq) {}
  std::int64_t size() const override { return size_; }
  std::int64_t sequence_length() const override { return seq_; }
  void read_sample(std::int64_t, std::span<std::int32_t>) const override {
    throw std::logic_error("the simulator reads no samples: phantom uploads never produce data");
  }

 private:
  std::int64_t size_, seq_;
};

// One simulated rank: what its actor builds and the runner reads after the run. Owned
// outside the actors because the communication actors (daemons) outlive the rank's own.
struct RankRun {
  ParallelContext ctx;
  std::unique_ptr<SimDevice> device;
  std::map<GroupKind, std::unique_ptr<SimCommunicator>> comms;
  std::map<GroupKind, std::unique_ptr<HostIssueCommunicator>> issued;
  std::map<GroupKind, std::unique_ptr<TracingCommunicator>> traced;
  std::unique_ptr<SimCommunicator> world;
  RunTrace trace;
  std::unique_ptr<SimStepObserver> observer;  // issue pricing and a measured run's profiler
  std::unique_ptr<Trainer> trainer;
  double start = 0;
  std::vector<double> iteration_ends;
  // The device's books when the last iteration began, to report that iteration alone.
  std::map<std::string, double> ops_before, host_before, regions_before;
  double host_bound_before = 0, contention_before = 0, straggler_before = 0;
  // Exposed communication and peer waits before the first iteration (building the model:
  // the FP8 parameters' first cast and gather), which no iteration's share includes.
  std::map<std::string, double> exposed_before_steps, peer_wait_before_steps;
  bool trace_ops = false;  // SimulateOptions::trace_ops
  // The predicted trace's op-class slice being extended (consecutive ops of one class).
  std::string pending_class;
  double pending_start = -1, pending_end = 0;

  void flush_ops() {
    if (pending_start < 0) return;
    trace.slice(pending_class, "op", kOpsThread, at(pending_start), at(pending_end));
    pending_start = -1;
  }
  // Compute-stream ops merged into slices per op class (or one each, with trace_ops), and
  // the host-bound gaps.
  void observe(const OpDesc& op, double begin, double seconds, double starved) {
    if (starved > 0) {
      flush_ops();
      trace.slice("host-bound", "host", kOpsThread, at(begin - starved), at(begin));
    }
    if (trace_ops) {
      trace.slice(std::string(op.op), "op", kOpsThread, at(begin), at(begin + seconds),
                  {{"class", op_class(op.op)},
                   {"dtype", std::string(dtype_name(op.dtype))},
                   {"m", op.m},
                   {"n", op.n},
                   {"k", op.k},
                   {"batch", op.batch}});
      return;
    }
    std::string cls = op_class(op.op);
    if (pending_start >= 0 && cls == pending_class && begin <= pending_end + 1e-12) {
      pending_end = begin + seconds;
      return;
    }
    flush_ops();
    pending_class = std::move(cls);
    pending_start = begin;
    pending_end = begin + seconds;
  }
  static constexpr int kOpsThread = tandem::trace_thread::op_classes;
  static RunTrace::Clock::time_point at(double seconds) {
    return RunTrace::Clock::time_point(std::chrono::duration_cast<RunTrace::Clock::duration>(
        std::chrono::duration<double>(seconds)));
  }
};

std::string group_id(GroupKind kind, const std::vector<int>& members) {
  std::string id(group_kind_name(kind));
  id += ':';
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i) id += ',';
    id += std::to_string(members[i]);
  }
  return id;
}

// The forward, backward and weight-gradient (split backward's W) slices of one rank since
// `from` (seconds): their first start, last end and summed duration, in nanoseconds, and
// the duration per category.
struct PassSpan {
  std::int64_t first = -1, last = 0, busy = 0;
  std::map<std::string, std::int64_t> by_category;
};
PassSpan passes_of(const RunTrace& trace, double from_seconds) {
  const auto from = static_cast<std::int64_t>(from_seconds * 1e9);
  PassSpan p;
  std::vector<std::pair<std::int64_t, std::int64_t>> passes;
  trace.visit([&](const TraceEvent& e) {
    if (e.phase != 'X' ||
        (e.category != "forward" && e.category != "backward" && e.category != "weight"))
      return;
    const std::int64_t s = e.start_ns, f = e.end_ns;
    if (s < from) return;
    p.first = p.first < 0 ? s : std::min(p.first, s);
    p.last = std::max(p.last, f);
    passes.emplace_back(s, f);
    p.by_category[e.category] += f - s;
  });
  // Busy is the union of the passes: a combined 1F1B step's forward and backward overlap.
  std::sort(passes.begin(), passes.end());
  std::int64_t covered_to = std::numeric_limits<std::int64_t>::min();
  for (const auto& [s, f] : passes) {
    if (f <= covered_to) continue;
    p.busy += f - std::max(s, covered_to);
    covered_to = f;
  }
  return p;
}

// The breakdown of the rank whose compute stream is busiest (see IterationBreakdown).
IterationBreakdown breakdown_of(const std::vector<RankReport>& ranks, double iteration_seconds) {
  IterationBreakdown b;
  const RankReport* worst = nullptr;
  double worst_busy = -1;
  for (const auto& k : ranks) {
    double busy = k.host_bound_seconds;
    for (const auto& [op, secs] : k.iteration_op_seconds) busy += secs;
    if (busy > worst_busy) {
      worst_busy = busy;
      worst = &k;
    }
  }
  if (!worst) return b;
  b.rank = worst->rank;
  for (const auto& [op, secs] : worst->iteration_op_seconds) {
    b.compute_seconds[op_class(op)] += secs;
    if (op.ends_with(":unfused-softmax")) b.unfused_softmax_attention_seconds += secs;
  }
  b.optimizer_seconds = b.compute_seconds.count("optimizer") ? b.compute_seconds["optimizer"] : 0;
  b.sm_contention_seconds = worst->sm_contention_seconds;
  b.host_bound_seconds = worst->host_bound_seconds;
  b.exposed_seconds = worst->exposed_seconds;
  for (const auto& [kind, secs] : worst->peer_wait_seconds)
    (kind == "pp" ? b.pipeline_bubble_seconds : b.peer_wait_seconds) += secs;
  double parts = b.host_bound_seconds + b.pipeline_bubble_seconds + b.peer_wait_seconds;
  for (const auto& [cls, secs] : b.compute_seconds) parts += secs;
  for (const auto& [kind, secs] : b.exposed_seconds) parts += secs;
  b.other_seconds = iteration_seconds - parts;
  return b;
}

// The first error raised inside a simulated rank (SimWorld::fail), once every actor has
// ended: a ConfigError stays one (bad input: the CLI exits 2), anything else names the rank.
[[noreturn]] void rethrow_rank_failure(const SimWorld& world) {
  try {
    std::rethrow_exception(world.failure());
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("simulated rank " + std::to_string(world.failed_rank()) + ": " +
                             e.what());
  }
}

}  // namespace

std::string topology_of(const Scenario& s) {
  return s.cluster.topology.empty() ? std::string("dgx-a100-80g") : s.cluster.topology;
}

std::string_view sim_mode_name(SimMode m) {
  return m == SimMode::full ? "full" : "symmetric";
}

SimReport simulate(const Scenario& s, const Topology& topology, const SimulateOptions& o) {
  if (!o.pricer) throw std::invalid_argument("simulate: no pricer given");
  if (o.iterations < 1) throw std::invalid_argument("simulate: iterations must be ≥ 1");
  check_step_supports(s);  // before the engine starts: its actors would only crash
  check_fp8_gpu(s, topology.gpu);
  const auto wall_start = std::chrono::steady_clock::now();
  const auto& par = s.parallelism;
  const int world_size = s.cluster.world_size;
  const Layout layout = make_layout(
      {world_size, par.tensor_model_parallel_size, par.pipeline_model_parallel_size,
       par.context_parallel_size, par.expert_model_parallel_size, par.order, embedding_stages(s)});
  std::vector<ParallelContext> contexts;
  std::vector<RankCoordinates> coords;
  for (int r = 0; r < world_size; ++r) {
    contexts.push_back(make_parallel_context(layout, r));
    coords.push_back(contexts.back().coords);
  }

  xbt_log_control_set("xbt_cfg.thresh:warning");  // no banner per configuration change
  int argc = 1;
  char name[] = "tandem";
  char* argv[] = {name, nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  configure_network_model(engine);
  engine.set_config("contexts/stack-size:256");  // KiB; thousands of actors fit
  const Platform platform = build_platform(topology, world_size);
  SimWorld world(platform.hosts, coords, layout.sizes, o.mode);
  world.set_record_ops(o.record_ops);
  // A non-blocking fabric core cannot be saturated by the NICs feeding it, so sharing it
  // does not couple flows (routes hold the split-duplex halves, hence the name prefix).
  if (platform.fabric_link && topology.fabric.oversubscription <= 1.0) {
    std::vector<int> node_of;
    for (const auto& p : platform.placement) node_of.push_back(p.node);
    world.set_nonblocking(
        [prefix = platform.fabric_link->get_name()](const simgrid::s4u::Link* l) {
          return l->get_name().rfind(prefix, 0) == 0;
        },
        std::move(node_of));
  }

  const auto& t = s.training;
  PhantomSamples samples(t.global_batch_size * (o.iterations + 1), s.model.seq_length);
  std::vector<int> everyone(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) everyone[static_cast<std::size_t>(r)] = r;

  const int vpp = virtual_pipeline_size(s);
  const std::int64_t m =
      t.global_batch_size / (static_cast<std::int64_t>(t.micro_batch_size) * layout.sizes.dp);
  const double passes_total = static_cast<double>(world.present_ranks().size()) *
                              static_cast<double>(2 * m * vpp * o.iterations);
  double passes_done = 0;
  double last_reported = -1;

  // Inside a switched node, or an NVLink domain of several (GB200 NVL72), every GPU has its
  // own port: a group that stays in one domain only loads its own ports, so its collectives
  // are priced in closed form.
  const bool switched_node =
      topology.node.interconnect == "nvswitch" || topology.node.interconnect == "shared-memory";
  auto within_one_node = [&](const std::vector<int>& members) {
    return platform.within_one_nvlink_domain(members);
  };
  std::vector<std::unique_ptr<RankRun>> runs;
  for (int rank : world.present_ranks()) {
    auto run = std::make_unique<RankRun>();
    RankRun& rr = *run;
    rr.ctx = contexts[static_cast<std::size_t>(rank)];
    if (o.nccl_holds_sms && topology.nccl.enabled && topology.gpu.sm_count > 1)
      world.stats(rank).contention = std::make_shared<SmContention>(
          topology.gpu.sm_count, compute_capability(topology.gpu).value_or(0));
    SimDeviceOptions options = device_options(s, topology);
    options.record_ops = o.record_ops;
    options.routing = o.routing;
    options.contention = world.stats(rank).contention.get();
    rr.device = std::make_unique<SimDevice>(o.pricer, std::move(options));
    rr.trace_ops = o.trace_ops;
    if (!o.trace_path.empty())
      rr.device->set_op_observer(
          [&rr](const OpDesc& op, double start, double seconds, double starved) {
            rr.observe(op, start, seconds, starved);
          });
    std::map<GroupKind, Communicator*> used;
    for (GroupKind kind : {GroupKind::tp, GroupKind::pp, GroupKind::dp, GroupKind::tp_pp,
                           GroupKind::embedding, GroupKind::cp, GroupKind::dp_cp, GroupKind::ep,
                           GroupKind::expert_dp, GroupKind::tp_ep, GroupKind::tp_dp_cp}) {
      if ((kind == GroupKind::cp || kind == GroupKind::dp_cp) && layout.sizes.cp == 1) continue;
      if (kind == GroupKind::tp_dp_cp && !s.training.fp8.enabled()) continue;  // amax only
      const bool expert_group =
          kind == GroupKind::ep || kind == GroupKind::expert_dp || kind == GroupKind::tp_ep;
      if (expert_group && !s.model.num_experts) continue;
      const auto& members = rr.ctx.group(kind);
      if (members.empty()) continue;
      rr.comms[kind] = std::make_unique<SimCommunicator>(
          world, members, rank, std::string(group_kind_name(kind)), group_id(kind, members));
      if (switched_node && within_one_node(members))
        rr.comms[kind]->set_closed_form(topology.node.gpu_link);
      // The gradient sync waits for the slowest node of the data-parallel group.
      if (kind == (layout.sizes.cp > 1 ? GroupKind::dp_cp : GroupKind::dp))
        rr.comms[kind]->set_straggler_wait(
            straggler_wait_fraction(
                topology.node.node_time_spread,
                nodes_spanned(rr.ctx.group(GroupKind::dp), topology.node.gpus_per_node)),
            grad_reduction(s.parallelism) == GradReduction::reduce_scatter ? "reduce_scatter"
                                                                           : "all_reduce");
      // The host issues each collective before the simulated transfers start.
      rr.issued[kind] = std::make_unique<HostIssueCommunicator>(*rr.comms[kind], *rr.device);
      used[kind] = rr.issued[kind].get();
      if (o.trace_path.empty()) continue;
      rr.traced[kind] = std::make_unique<TracingCommunicator>(*rr.issued[kind], rr.trace, members,
                                                              trace_thread_of(kind));
      used[kind] = rr.traced[kind].get();
    }
    rr.world = std::make_unique<SimCommunicator>(world, everyone, rank, "world", "world");
    auto get = [&](GroupKind k) -> Communicator* {
      auto it = used.find(k);
      return it == used.end() ? nullptr : it->second;
    };
    const TrainerGroups groups = trainer_groups(get, layout.sizes.cp);
    rr.trace.set_slice_observer([&](const std::string& category) {
      if (category != "forward" && category != "backward") return;
      // The framework's fixed work per microbatch (schedule step, batch, loss, wrappers).
      if (category == "forward") rr.device->host_work(rr.device->host().microbatch, "microbatch");
      passes_done += 1;
      const double f = passes_done / passes_total;
      if (o.progress && f - last_reported >= 0.01) {
        last_reported = f;
        o.progress(f);
      }
    });
    simgrid::s4u::Actor::create(
        "rank " + std::to_string(rank), world.host(rank),
        [&rr, &s, &samples, groups, &o, &world, rank] {
          try {
            rr.observer = std::make_unique<SimStepObserver>(
                *rr.device, profiler_effects(s.training, *rr.device));
            rr.observer->set_trace(&rr.trace);
            rr.trainer = std::make_unique<Trainer>(s, rr.ctx, *rr.device, groups, samples, nullptr,
                                                   rr.observer.get());
            rr.trainer->set_trace(&rr.trace);
            rr.device->default_stream().synchronize();
            rr.world->barrier();
            rr.start = std::max(sim_now(), rr.device->host_now());
            rr.exposed_before_steps = world.stats(rank).exposed;
            rr.peer_wait_before_steps = world.stats(rank).peer_wait;
            for (int i = 0; i < o.iterations; ++i) {
              rr.ops_before = rr.device->op_seconds();
              rr.host_before = rr.device->host_seconds();
              rr.regions_before = rr.device->region_seconds();
              rr.host_bound_before = rr.device->host_bound();
              if (const auto& c = world.stats(rank).contention)
                rr.contention_before = c->total_delay();
              rr.straggler_before = world.stats(rank).straggler_wait;
              rr.device->host_work(rr.device->host().iteration, "iteration");
              world.stats(rank).step = i;
              world.stats(rank).step_start = std::max(sim_now(), rr.device->host_now());
              rr.trainer->train_step();
              // Megatron times iterations over its log interval: the next step's forward
              // waits on the stream for this one's optimizer, so the period holds the
              // optimizer's GPU time even where the host returned before it ended.
              rr.device->default_stream().synchronize();
              // The step ends when the host returns from it: after the actor's last wait if
              // the host was still issuing then (Megatron times train_step on the host).
              rr.iteration_ends.push_back(std::max(sim_now(), rr.device->host_now()));
            }
          } catch (const std::exception&) {
            // An exception escaping an actor would abort the engine: end the run instead
            // (the others' waits throw RunAborted, which lands here too and is ignored).
            world.fail(rank, std::current_exception());
            world.join_comm_actors(rank);
          }
        });
    runs.push_back(std::move(run));
  }
  engine.run();
  if (world.aborted()) rethrow_rank_failure(world);

  SimReport r;
  r.scenario = s.name;
  r.topology = topology.name;
  r.mode = o.mode;
  r.world_size = world_size;
  r.simulated_ranks = static_cast<int>(runs.size());
  r.iterations = o.iterations;
  double prev_end = 0, last_end = 0;
  for (const auto& run : runs) {
    if (static_cast<int>(run->iteration_ends.size()) != o.iterations)
      throw std::runtime_error("simulation ended before rank " + std::to_string(run->ctx.rank) +
                               " finished its iterations (a collective or p2p never matched)");
    prev_end = std::max(
        prev_end, o.iterations > 1 ? run->iteration_ends[static_cast<std::size_t>(o.iterations - 2)]
                                   : run->start);
    last_end = std::max(last_end, run->iteration_ends.back());
  }
  r.iteration_seconds = last_end - prev_end;
  const double tokens = static_cast<double>(t.global_batch_size) * s.model.seq_length;
  r.tokens_per_second = tokens / r.iteration_seconds;
  // Megatron's num_floating_point_operations for the model's own shape (GQA, SwiGLU,
  // kv_channels, untied output, multi-latent attention), which counts the causal half of the
  // attention scores;
  // the model FLOPs of the papers' tables count all of them (for a GPT with a 4h MLP this
  // is Narayanan et al. 2021 / Korthikanti et al. 2022 eq. 7 exactly).
  const DenseShape dense = dense_shape(s);
  const double batch = static_cast<double>(t.global_batch_size);
  // Multi-token prediction: each depth's layer and logits besides the decoder's.
  const double attention_half = attention_core_flops(with_mtp_layers(dense), batch);
  const double logits =
      6.0 * batch * dense.seq * dense.hidden * dense.padded_vocab * (1.0 + dense.mtp_layers);
  r.megatron_log_flops = num_floating_point_operations(dense, batch);
  r.model_flops = r.megatron_log_flops + attention_half;
  r.mixture_of_experts = s.model.num_experts.has_value();
  // Recomputation: full adds every layer's forward (a third of the layers' FLOPs, eq. 7's
  // 96), selective the attention scores.
  r.hardware_flops = t.recompute_granularity == "full"
                         ? r.model_flops + (r.model_flops - logits) / 3
                     : t.recompute_granularity == "selective" ? r.model_flops + 2 * attention_half
                                                              : r.model_flops;
  const double gpu_seconds = r.iteration_seconds * world_size;
  r.model_tflops_per_gpu = r.model_flops / gpu_seconds / 1e12;
  r.hardware_tflops_per_gpu = r.hardware_flops / gpu_seconds / 1e12;
  r.peak_flops_per_gpu = topology.gpu.peak(compute_dtype(s)).value;
  r.mfu = r.peak_flops_per_gpu > 0 ? r.model_flops / gpu_seconds / r.peak_flops_per_gpu : 0;
  r.gpu_memory_bytes = topology.gpu.memory.value;

  // The bubble as the schedule papers define it: the share of the pipeline's span (first
  // forward anywhere to last backward anywhere) in which a rank's compute stream is not in
  // a forward or backward pass.
  std::vector<PassSpan> spans;
  std::int64_t first = -1, last = 0;
  for (const auto& run : runs) {
    const double iteration_start =
        o.iterations > 1 ? run->iteration_ends[static_cast<std::size_t>(o.iterations - 2)]
                         : run->start;
    spans.push_back(passes_of(run->trace, iteration_start));
    if (spans.back().first >= 0)
      first = first < 0 ? spans.back().first : std::min(first, spans.back().first);
    last = std::max(last, spans.back().last);
  }
  double bubble_sum = 0;
  for (const auto& run : runs) {
    RankReport rank;
    rank.rank = run->ctx.rank;
    rank.coords = run->ctx.coords;
    rank.peak_memory_bytes = run->device->memory().peak().value;
    rank.peak_memory_by_use = run->device->memory().peak_by_use();
    rank.compute_busy_seconds = run->device->compute_busy();
    rank.op_seconds = run->device->op_seconds();
    for (const auto& [op, secs] : run->device->op_seconds())
      rank.iteration_op_seconds[op] =
          secs - (run->ops_before.count(op) ? run->ops_before.at(op) : 0.0);
    for (const auto& [what, secs] : run->device->host_seconds())
      rank.host_seconds[what] =
          secs - (run->host_before.count(what) ? run->host_before.at(what) : 0.0);
    rank.host_bound_seconds = run->device->host_bound() - run->host_bound_before;
    for (const auto& [region, secs] : run->device->region_seconds()) {
      rank.region_seconds[region] =
          secs - (run->regions_before.count(region) ? run->regions_before.at(region) : 0.0);
      r.region_seconds[region] = std::max(r.region_seconds[region], rank.region_seconds[region]);
    }
    const PassSpan& span = spans[r.ranks.size()];
    rank.bubble_fraction = last > first && first >= 0
                               ? std::max(0.0, 1.0 - static_cast<double>(span.busy) /
                                                         static_cast<double>(last - first))
                               : 0.0;
    bubble_sum += rank.bubble_fraction;
    for (const auto& [category, ns] : span.by_category)
      rank.pass_seconds[category] = static_cast<double>(ns) * 1e-9;
    auto in_steps = [](const std::map<std::string, double>& before, const std::string& kind,
                       double secs) { return secs - (before.count(kind) ? before.at(kind) : 0.0); };
    for (const auto& [kind, secs] : world.stats(run->ctx.rank).exposed) {
      const double per = in_steps(run->exposed_before_steps, kind, secs) / o.iterations;
      rank.exposed_seconds[kind] = per;
      r.exposed_seconds[kind] = std::max(r.exposed_seconds[kind], per);
    }
    for (const auto& [kind, secs] : world.stats(run->ctx.rank).peer_wait) {
      const double per = in_steps(run->peer_wait_before_steps, kind, secs) / o.iterations;
      rank.peer_wait_seconds[kind] = per;
      r.peer_wait_seconds[kind] = std::max(r.peer_wait_seconds[kind], per);
    }
    if (o.record_ops) {
      rank.ops = run->device->issued_ops();
      rank.collectives = world.stats(run->ctx.rank).collectives;
    }
    if (const auto& c = world.stats(run->ctx.rank).contention)
      rank.sm_contention_seconds = c->total_delay() - run->contention_before;
    rank.straggler_wait_seconds = world.stats(run->ctx.rank).straggler_wait - run->straggler_before;
    r.straggler_wait_seconds = std::max(r.straggler_wait_seconds, rank.straggler_wait_seconds);
    if (r.ranks.empty() || rank.peak_memory_bytes > r.max_peak_memory_bytes) {
      r.max_peak_memory_bytes = rank.peak_memory_bytes;
      r.max_peak_memory_rank = rank.rank;
      r.max_peak_memory_by_use = rank.peak_memory_by_use;
    }
    r.ranks.push_back(std::move(rank));
  }
  r.bubble_fraction = runs.empty() ? 0 : bubble_sum / static_cast<double>(runs.size());
  r.breakdown = breakdown_of(r.ranks, r.iteration_seconds);
  r.fits_in_memory = r.gpu_memory_bytes <= 0 || r.max_peak_memory_bytes <= r.gpu_memory_bytes;

  if (!o.trace_path.empty()) {
    for (auto& run : runs) run->flush_ops();
    std::vector<nlohmann::json> parts;
    std::vector<ParallelContext> ctxs;
    for (const auto& run : runs) {
      parts.push_back(run->trace.part());
      ctxs.push_back(run->ctx);
    }
    write_merged_trace(o.trace_path, parts, ctxs,
                       "tandem simulate (predicted, " + std::string(sim_mode_name(o.mode)) +
                           " mode, " + topology.name + ")");
  }
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return r;
}

namespace {

// {"weights": bytes, …}: every use, zeros included, so a reader finds each key.
nlohmann::json memory_by_use_json(const MemoryByUse& by_use) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < kMemoryUses; ++i)
    j[std::string(memory_use_name(static_cast<MemoryUse>(i)))] = by_use[i].value;
  return j;
}

}  // namespace

nlohmann::json to_json(const SimReport& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& k : r.ranks) {
    ranks.push_back({{"rank", k.rank},
                     {"tp", k.coords.tp},
                     {"pp", k.coords.pp},
                     {"dp", k.coords.dp},
                     {"peak_memory_bytes", k.peak_memory_bytes},
                     {"peak_memory_by_use", memory_by_use_json(k.peak_memory_by_use)},
                     {"compute_busy_seconds", k.compute_busy_seconds},
                     {"op_seconds", k.op_seconds},
                     {"iteration_op_seconds", k.iteration_op_seconds},
                     {"host_seconds", k.host_seconds},
                     {"host_bound_seconds", k.host_bound_seconds},
                     {"bubble_fraction", k.bubble_fraction},
                     {"pass_seconds", k.pass_seconds},
                     {"region_seconds", k.region_seconds},
                     {"exposed_seconds", k.exposed_seconds},
                     {"peer_wait_seconds", k.peer_wait_seconds},
                     {"straggler_wait_seconds", k.straggler_wait_seconds},
                     {"sm_contention_seconds", k.sm_contention_seconds}});
  }
  return {{"scenario", r.scenario},
          {"topology", r.topology},
          {"mode", std::string(sim_mode_name(r.mode))},
          {"world_size", r.world_size},
          {"simulated_ranks", r.simulated_ranks},
          {"iterations", r.iterations},
          {"iteration_seconds", r.iteration_seconds},
          {"tokens_per_second", r.tokens_per_second},
          {"flops_formula",
           "megatron_log: Megatron-LM's num_floating_point_operations (causal half of the "
           "attention scores); model: the same with all of them, = 72*B*s*L*h^2*(1 + s/(6h) + "
           "V/(12*L*h)) for a GPT with a 4h MLP (Narayanan et al. 2021; Korthikanti et al. 2022 "
           "eq. 7)"},
          {"model_flops_per_iteration", r.model_flops},
          {"hardware_flops_per_iteration", r.hardware_flops},
          {"megatron_log_flops_per_iteration", r.megatron_log_flops},
          {"model_tflops_per_gpu", r.model_tflops_per_gpu},
          {"hardware_tflops_per_gpu", r.hardware_tflops_per_gpu},
          {"peak_flops_per_gpu", r.peak_flops_per_gpu},
          {"mfu", r.mfu},
          {"bubble_fraction", r.bubble_fraction},
          {"exposed_seconds", r.exposed_seconds},
          {"peer_wait_seconds", r.peer_wait_seconds},
          {"straggler_wait_seconds", r.straggler_wait_seconds},
          {"breakdown",
           {{"rank", r.breakdown.rank},
            {"compute_seconds", r.breakdown.compute_seconds},
            {"optimizer_seconds", r.breakdown.optimizer_seconds},
            {"unfused_softmax_attention_seconds", r.breakdown.unfused_softmax_attention_seconds},
            {"sm_contention_seconds", r.breakdown.sm_contention_seconds},
            {"host_bound_seconds", r.breakdown.host_bound_seconds},
            {"exposed_seconds", r.breakdown.exposed_seconds},
            {"pipeline_bubble_seconds", r.breakdown.pipeline_bubble_seconds},
            {"peer_wait_seconds", r.breakdown.peer_wait_seconds},
            {"other_seconds", r.breakdown.other_seconds}}},
          {"region_seconds", r.region_seconds},
          {"max_peak_memory_bytes", r.max_peak_memory_bytes},
          {"max_peak_memory_rank", r.max_peak_memory_rank},
          {"max_peak_memory_by_use", memory_by_use_json(r.max_peak_memory_by_use)},
          {"gpu_memory_bytes", r.gpu_memory_bytes},
          {"fits_in_memory", r.fits_in_memory},
          {"wall_seconds", r.wall_seconds},
          {"ranks", ranks}};
}

std::string format_report(const SimReport& r) {
  std::ostringstream out;
  char line[256];
  auto put = [&](const char* fmt, auto... v) {
    std::snprintf(line, sizeof line, fmt, v...);
    out << line << "\n";
  };
  put("scenario %s on %s: %d ranks, %d simulated (%s mode), %d iteration(s)", r.scenario.c_str(),
      r.topology.c_str(), r.world_size, r.simulated_ranks,
      std::string(sim_mode_name(r.mode)).c_str(), r.iterations);
  put("  iteration time           %10.3f s", r.iteration_seconds);
  put("  tokens/s                 %10.0f", r.tokens_per_second);
  if (r.mixture_of_experts)
    put("  model TFLOP/s per GPU    %10.1f   (the routed and shared experts only)",
        r.model_tflops_per_gpu);
  else
    put("  model TFLOP/s per GPU    %10.1f   (72·B·s·L·h²·(1 + s/6h + V/12Lh), Narayanan 2021)",
        r.model_tflops_per_gpu);
  put("  hardware TFLOP/s per GPU %10.1f   (with recomputation)", r.hardware_tflops_per_gpu);
  put("  MFU                      %10.1f %% of %.0f TFLOP/s", 100 * r.mfu,
      r.peak_flops_per_gpu / 1e12);
  put("  pipeline bubble          %10.1f %% of the pipeline span (mean over ranks)",
      100 * r.bubble_fraction);
  // A split backward (zb-h1, delay_wgrad_compute): the busiest rank's B and W, apart (every
  // rank's in the JSON).
  for (const auto& k : r.ranks)
    if (k.rank == r.breakdown.rank && k.pass_seconds.count("weight"))
      put("  passes of rank %-4d      F %.4f s, B (input grads) %.4f s, W (weight grads) %.4f s",
          k.rank, k.pass_seconds.count("forward") ? k.pass_seconds.at("forward") : 0.0,
          k.pass_seconds.count("backward") ? k.pass_seconds.at("backward") : 0.0,
          k.pass_seconds.at("weight"));
  // Multi-token prediction: its block's compute, on the ranks holding it.
  if (r.region_seconds.count("mtp"))
    put("  multi-token prediction   %10.4f s of compute per iteration (max over ranks: its "
        "depths forward and backward with their output layer and loss)",
        r.region_seconds.at("mtp"));
  for (const auto& [kind, secs] : r.exposed_seconds)
    put("  exposed %-9s comm    %10.4f s per iteration (max over ranks; waiting for peers "
        "%.4f s)",
        kind.c_str(), secs, r.peer_wait_seconds.count(kind) ? r.peer_wait_seconds.at(kind) : 0.0);
  const IterationBreakdown& b = r.breakdown;
  const double it = r.iteration_seconds > 0 ? r.iteration_seconds : 1;
  put("  where the iteration goes (rank %d, the busiest compute stream):", b.rank);
  for (const auto& [cls, secs] : b.compute_seconds)
    put("    compute %-14s %10.4f s  %5.1f %%", cls.c_str(), secs, 100 * secs / it);
  if (b.unfused_softmax_attention_seconds > 0)
    put("      of which attention with Megatron's unfused softmax %.4f s",
        b.unfused_softmax_attention_seconds);
  if (b.sm_contention_seconds > 0)
    put("      of which lost to the SMs NCCL's kernels held %.4f s  (GEMMs and attention beside "
        "collectives)",
        b.sm_contention_seconds);
  put("    host-bound             %10.4f s  %5.1f %%  (stream starved for the host's issue)",
      b.host_bound_seconds, 100 * b.host_bound_seconds / it);
  for (const auto& [kind, secs] : b.exposed_seconds)
    put("    exposed %-9s comm %10.4f s  %5.1f %%", kind.c_str(), secs, 100 * secs / it);
  put("    pipeline bubble        %10.4f s  %5.1f %%  (waiting for pp peers)",
      b.pipeline_bubble_seconds, 100 * b.pipeline_bubble_seconds / it);
  put("    waiting for peers      %10.4f s  %5.1f %%  (other groups)", b.peer_wait_seconds,
      100 * b.peer_wait_seconds / it);
  if (r.straggler_wait_seconds > 0)
    put("      of which the gradient sync waiting for the slowest node %.4f s  (max over ranks)",
        r.straggler_wait_seconds);
  put("    other                  %10.4f s  %5.1f %%", b.other_seconds, 100 * b.other_seconds / it);
  put("  memory high-water mark   %10.2f GiB per rank (max; GPU has %.0f GiB: %s)",
      static_cast<double>(r.max_peak_memory_bytes) / (1 << 30),
      static_cast<double>(r.gpu_memory_bytes) / (1 << 30),
      r.fits_in_memory ? "fits" : "DOES NOT FIT");
  {
    // What held the high-water mark on that rank, largest first.
    std::vector<std::pair<std::int64_t, MemoryUse>> uses;
    for (std::size_t i = 0; i < kMemoryUses; ++i)
      if (r.max_peak_memory_by_use[i].value > 0)
        uses.emplace_back(r.max_peak_memory_by_use[i].value, static_cast<MemoryUse>(i));
    std::stable_sort(uses.begin(), uses.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    std::string held;
    for (const auto& [bytes, use] : uses) {
      char part[64];
      std::snprintf(part, sizeof part, "%s%s %.2f", held.empty() ? "" : ", ",
                    std::string(memory_use_name(use)).c_str(),
                    static_cast<double>(bytes) / (1 << 30));
      held += part;
    }
    if (!held.empty())
      put("    held at that mark (rank %d, GiB): %s", r.max_peak_memory_rank, held.c_str());
  }
  put("  simulated in             %10.2f s wall", r.wall_seconds);
  return out.str();
}

}  // namespace tandem::sim
