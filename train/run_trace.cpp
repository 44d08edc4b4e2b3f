#include "train/run_trace.hpp"

#include <algorithm>
#include <limits>

#include "core/trace.hpp"

namespace tandem {
namespace {

std::int64_t ns(RunTrace::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Calls on_done(start, finish) once the operation is known complete: where it really ran
// when the binding reports it (Work::timing), else from issue to the host seeing it done.
class TracedWork : public Work {
 public:
  using Done = std::function<void(RunTrace::Clock::time_point, RunTrace::Clock::time_point)>;
  TracedWork(std::unique_ptr<Work> inner, RunTrace::Clock::time_point issued, Done on_done)
      : inner_(std::move(inner)), issued_(issued), on_done_(std::move(on_done)) {}
  std::optional<WorkTiming> timing() const override { return inner_->timing(); }
  void wait() override {
    inner_->wait();
    finish();
  }
  bool test() override {
    const bool done = inner_->test();
    if (done) finish();
    return done;
  }

 private:
  void finish() {
    if (!on_done_) return;
    const auto t = inner_->timing();
    if (t)
      on_done_(t->started, t->finished);
    else
      on_done_(issued_, RunTrace::Clock::now());
    on_done_ = nullptr;
  }
  std::unique_ptr<Work> inner_;
  RunTrace::Clock::time_point issued_;
  Done on_done_;
};

}  // namespace

void RunTrace::slice(std::string name, std::string category, int tid, Clock::time_point start,
                     Clock::time_point end, nlohmann::json args) {
  if (observer_) observer_(category);
  std::lock_guard lock(mutex_);
  events_.push_back({.phase = 'X',
                     .name = std::move(name),
                     .category = std::move(category),
                     .tid = tid,
                     .start_ns = ns(start),
                     .end_ns = ns(end),
                     .args = std::move(args)});
}

void RunTrace::flow(std::int64_t id, bool start, int tid, Clock::time_point at) {
  std::lock_guard lock(mutex_);
  events_.push_back({.phase = start ? 's' : 'f', .tid = tid, .start_ns = ns(at), .flow_id = id});
}

nlohmann::json RunTrace::part() const {
  std::lock_guard lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const TraceEvent& e : events_) {
    if (e.phase == 'X')
      out.push_back({{"name", e.name},
                     {"cat", e.category},
                     {"ph", "X"},
                     {"tid", e.tid},
                     {"start_ns", e.start_ns},
                     {"end_ns", e.end_ns},
                     {"args", e.args.is_null() ? nlohmann::json::object() : e.args}});
    else
      out.push_back({{"ph", std::string(1, e.phase)},
                     {"id", e.flow_id},
                     {"tid", e.tid},
                     {"start_ns", e.start_ns}});
  }
  return out;
}

void RunTrace::visit(const std::function<void(const TraceEvent&)>& f) const {
  std::lock_guard lock(mutex_);
  for (const TraceEvent& e : events_) f(e);
}

int trace_thread_of(GroupKind kind) {
  switch (kind) {
    case GroupKind::tp:
      return trace_thread::tp_comm;
    case GroupKind::pp:
      return trace_thread::pp_comm;
    case GroupKind::ep:
    case GroupKind::tp_ep:
      return trace_thread::ep_comm;
    case GroupKind::expert_dp:
      return trace_thread::expert_dp_comm;
    default:
      return trace_thread::dp_comm;
  }
}

TracingCommunicator::TracingCommunicator(Communicator& inner, RunTrace& trace,
                                         std::vector<int> global_ranks, int tid)
    : inner_(inner), trace_(trace), global_ranks_(std::move(global_ranks)), tid_(tid) {}

std::unique_ptr<Work> TracingCommunicator::traced(std::unique_ptr<Work> work, std::string name,
                                                  const Tensor& t,
                                                  RunTrace::Clock::time_point issued) {
  nlohmann::json args = {{"group", std::string(inner_.name())},
                         {"bytes", t.bytes().value},
                         {"elements", t.numel()},
                         {"ranks", global_ranks_}};
  return std::make_unique<TracedWork>(
      std::move(work), issued,
      [this, name = std::move(name), args](RunTrace::Clock::time_point start,
                                           RunTrace::Clock::time_point end) {
        trace_.slice(name, "collective", tid_, start, end, args);
      });
}

std::unique_ptr<Work> TracingCommunicator::all_reduce(Stream& s, Tensor& b, ReduceOp op) {
  const auto t = RunTrace::Clock::now();
  return traced(inner_.all_reduce(s, b, op), "allreduce " + std::string(inner_.name()), b, t);
}

std::unique_ptr<Work> TracingCommunicator::all_gather(Stream& s, const Tensor& in, Tensor& out) {
  const auto t = RunTrace::Clock::now();
  return traced(inner_.all_gather(s, in, out), "allgather " + std::string(inner_.name()), out, t);
}

std::unique_ptr<Work> TracingCommunicator::reduce_scatter(Stream& s, const Tensor& in, Tensor& out,
                                                          ReduceOp op) {
  const auto t = RunTrace::Clock::now();
  return traced(inner_.reduce_scatter(s, in, out, op),
                "reducescatter " + std::string(inner_.name()), in, t);
}

std::unique_ptr<Work> TracingCommunicator::broadcast(Stream& s, Tensor& b, int root) {
  const auto t = RunTrace::Clock::now();
  return traced(inner_.broadcast(s, b, root), "broadcast " + std::string(inner_.name()), b, t);
}

std::unique_ptr<Work> TracingCommunicator::all_to_all(Stream& s, const Tensor& in, Tensor& out) {
  const auto t = RunTrace::Clock::now();
  return traced(inner_.all_to_all(s, in, out), "alltoall " + std::string(inner_.name()), in, t);
}

std::unique_ptr<Work> TracingCommunicator::all_to_all_v(Stream& s, const Tensor& in,
                                                        std::span<const std::int64_t> send_counts,
                                                        Tensor& out,
                                                        std::span<const std::int64_t> recv_counts) {
  const auto t = RunTrace::Clock::now();
  return traced(inner_.all_to_all_v(s, in, send_counts, out, recv_counts),
                "alltoallv " + std::string(inner_.name()), in, t);
}

std::unique_ptr<Work> TracingCommunicator::batch_p2p(Stream& s, std::span<const P2POp> ops) {
  const auto issued = RunTrace::Clock::now();
  const int me = global_ranks_.at(static_cast<std::size_t>(inner_.rank()));
  std::vector<std::pair<std::int64_t, bool>> flows;  // (id, this end sends)
  std::int64_t bytes = 0;
  const std::int64_t world = 1 << 20;
  for (const auto& op : ops) {
    const int peer = global_ranks_.at(static_cast<std::size_t>(op.peer));
    const bool send = op.kind == P2POp::Kind::send;
    const auto key = send ? std::make_pair(me, peer) : std::make_pair(peer, me);
    const std::int64_t seq = p2p_sequence_[key]++;
    flows.emplace_back((static_cast<std::int64_t>(key.first) * world + key.second) * world + seq,
                       send);
    bytes += op.tensor.bytes().value;
  }
  auto work = inner_.batch_p2p(s, ops);
  return std::make_unique<TracedWork>(
      std::move(work), issued,
      [this, flows, bytes, n = ops.size()](RunTrace::Clock::time_point start,
                                           RunTrace::Clock::time_point done) {
        trace_.slice("p2p", "p2p", tid_, start, done, {{"ops", n}, {"bytes", bytes}});
        for (const auto& [id, send] : flows) trace_.flow(id, send, tid_, send ? start : done);
      });
}

void write_merged_trace(const std::filesystem::path& path, const std::vector<nlohmann::json>& parts,
                        const std::vector<ParallelContext>& contexts, const std::string& producer) {
  std::int64_t origin = std::numeric_limits<std::int64_t>::max();
  for (const auto& part : parts)
    for (const auto& e : part) origin = std::min(origin, e.at("start_ns").get<std::int64_t>());
  auto at = [&](std::int64_t t) { return Seconds(static_cast<double>(t - origin) * 1e-9); };
  Trace trace;
  std::map<std::int64_t, std::pair<int, const nlohmann::json*>> flow_starts;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    const int pid = contexts[r].rank;  // the simulator traces only some ranks
    const auto& c = contexts[r].coords;
    trace.name_process(pid,
                       "rank " + std::to_string(pid) + " (tp " + std::to_string(c.tp) + ", pp " +
                           std::to_string(c.pp) + ", dp " + std::to_string(c.dp) + ")",
                       pid);
    trace.name_thread(pid, trace_thread::compute, "compute", 0);
    trace.name_thread(pid, trace_thread::pp_comm, "pp send/recv", 1);
    trace.name_thread(pid, trace_thread::tp_comm, "tp comm", 2);
    trace.name_thread(pid, trace_thread::dp_comm, "dp comm", 3);
    // The threads only some runs have, named where they are.
    bool op_classes = false, ops = false, ep = false, combined = false, expert_dp = false;
    for (const auto& e : parts[r]) {
      combined = combined || e.value("tid", -1) == trace_thread::compute_combined;
      expert_dp = expert_dp || e.value("tid", -1) == trace_thread::expert_dp_comm;
      const bool on_ops = e.value("tid", -1) == trace_thread::op_classes;
      op_classes = op_classes || on_ops;
      // One slice per op (the simulator's --trace-ops) carries the op's class.
      ops = ops || (on_ops && e.contains("args") && e.at("args").contains("class"));
      ep = ep || e.value("tid", -1) == trace_thread::ep_comm;
    }
    if (op_classes) trace.name_thread(pid, trace_thread::op_classes, ops ? "ops" : "op classes", 5);
    if (ep) trace.name_thread(pid, trace_thread::ep_comm, "ep comm", 4);
    if (expert_dp) trace.name_thread(pid, trace_thread::expert_dp_comm, "expert-dp comm", 4);
    if (combined)
      trace.name_thread(pid, trace_thread::compute_combined, "compute (combined 1F1B backward)", 0);
    for (const auto& e : parts[r]) {
      if (e.at("ph") == "X") {
        const auto s = e.at("start_ns").get<std::int64_t>(), f = e.at("end_ns").get<std::int64_t>();
        trace.add_slice(
            {e.at("name"), e.at("cat"), pid, e.at("tid"), at(s), at(f) - at(s), e.at("args")});
      } else if (e.at("ph") == "s") {
        flow_starts[e.at("id").get<std::int64_t>()] = {pid, &e};
      }
    }
  }
  for (std::size_t r = 0; r < parts.size(); ++r)
    for (const auto& e : parts[r]) {
      if (e.at("ph") != "f") continue;
      auto it = flow_starts.find(e.at("id").get<std::int64_t>());
      if (it == flow_starts.end()) continue;
      const auto& s = *it->second.second;
      trace.add_flow("p2p", it->second.first, s.at("tid"), at(s.at("start_ns")), contexts[r].rank,
                     e.at("tid"), at(e.at("start_ns")));
    }
  trace.set_metadata("producer", producer);
  trace.write(path);
}

}  // namespace tandem
