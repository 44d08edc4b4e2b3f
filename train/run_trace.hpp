// Traces of real runs (`tandem train --trace FILE`), in the schema of core/trace.hpp so a
// measured and a predicted trace open side by side: each rank records forward/backward
// of every (microbatch, chunk) on its compute thread and every collective and p2p batch
// on the thread of its group, with send → receive flow arrows; rank 0 merges the ranks'
// parts into one file. Times come from the host's monotonic clock, shared by the ranks
// of one node (ranks on several nodes would need a clock offset, not done yet).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/communicator.hpp"
#include "core/parallel_context.hpp"
#include "core/trace.hpp"
#include "model/step_observer.hpp"

namespace tandem {

// One event of a rank's trace, kept as a plain struct (a JSON object per event cost the
// simulator a fifth of its time); part() writes them in the trace schema.
struct TraceEvent {
  char phase = 'X';            // 'X' a slice; 's' / 'f' the start / finish of a flow arrow
  std::string name, category;  // slices
  int tid = 0;
  std::int64_t start_ns = 0, end_ns = 0;  // a flow end's time is start_ns
  std::int64_t flow_id = 0;
  nlohmann::json args;  // slices; null: none
};

class RunTrace {
 public:
  using Clock = std::chrono::steady_clock;

  void slice(std::string name, std::string category, int tid, Clock::time_point start,
             Clock::time_point end, nlohmann::json args = nullptr);
  // One end of a send → receive arrow; both ends use the same id.
  void flow(std::int64_t id, bool start, int tid, Clock::time_point at);
  nlohmann::json part() const;  // this rank's events, absolute nanoseconds
  // Calls `f` with every event so far, in the order they were recorded.
  void visit(const std::function<void(const TraceEvent&)>& f) const;
  // Told the category of every slice as it is recorded (the simulator's progress bar).
  void set_slice_observer(std::function<void(const std::string&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  std::function<void(const std::string&)> observer_;
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
};

// Records each named region of the step (StepObserver::begin_region: "mtp", the multi-token
// prediction block) as a slice of its own on the compute thread, inside the pass that runs
// it, as the simulator's trace has them (`tandem train --trace`).
class RegionTracer : public StepObserver {
 public:
  RegionTracer(Device& device, RunTrace& trace) : device_(device), trace_(trace) {}
  void begin_region(Stream& s, std::string_view /*name*/) override {
    start_[task()] = device_.trace_time(s);
  }
  void end_region(Stream& s, std::string_view name) override {
    trace_.slice(std::string(name), std::string(name),
                 trace_thread::compute_of_task(static_cast<int>(task())), start_[task()],
                 device_.trace_time(s));
  }

 private:
  // Per host task: a combined 1F1B step's two microbatches run their regions in turns.
  std::size_t task() const { return static_cast<std::size_t>(device_.host_turns().current_task()); }
  Device& device_;
  RunTrace& trace_;
  std::array<RunTrace::Clock::time_point, 2> start_{};
};

// Records every collective of `inner` on `trace`, as a slice from issue to the return of
// wait(), on the thread of the group kind. p2p sends and receives get flow ids from
// (global sender, global receiver, sequence number), which both ends compute alike.
class TracingCommunicator : public Communicator {
 public:
  TracingCommunicator(Communicator& inner, RunTrace& trace, std::vector<int> global_ranks, int tid);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string_view name() const override { return inner_.name(); }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override {
    return inner_.split(color, key, std::move(name));
  }
  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) override;
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& in, Tensor& out) override;
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& in, Tensor& out,
                                       ReduceOp op) override;
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override;
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& in, Tensor& out) override;
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& in,
                                     std::span<const std::int64_t> send_counts, Tensor& out,
                                     std::span<const std::int64_t> recv_counts) override;
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override;
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override {
    inner_.all_gather_counts(s, mine, all);
  }
  void barrier() override { inner_.barrier(); }

 private:
  std::unique_ptr<Work> traced(std::unique_ptr<Work> work, std::string name, const Tensor& t,
                               RunTrace::Clock::time_point issued);

  Communicator& inner_;
  RunTrace& trace_;
  std::vector<int> global_ranks_;
  int tid_;
  std::map<std::pair<int, int>, std::int64_t> p2p_sequence_;  // (sender, receiver) → count
};

// The trace thread of a group kind: tp → tp comm, pp → pp send/recv, ep and tp-ep (the
// experts' token exchange) → ep comm, the rest → dp comm.
int trace_thread_of(GroupKind kind);

// Rank 0: reads every rank's part, names processes "rank r (tp a, pp b, dp c)" and
// threads, shifts times to start at 0, writes one Chrome trace to `path`.
// `producer` goes into the trace's metadata (measured or predicted, which binding).
void write_merged_trace(const std::filesystem::path& path, const std::vector<nlohmann::json>& parts,
                        const std::vector<ParallelContext>& contexts,
                        const std::string& producer = "tandem train (measured, cpu binding)");

}  // namespace tandem
