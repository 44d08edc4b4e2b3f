// The one timeline trace format of tandem: Chrome Trace Event JSON (opens in Perfetto and
// chrome://tracing), written identically by the idealised schedule timeline, the
// simulator and real runs, so a predicted and a measured trace can be opened side by side
// and diffed. Schema : a process per rank named with its coordinates, a thread
// per stream (compute, tp comm, dp comm, pp send/recv), complete ("X") events named
// starting with the op type ("F3", "B0.1", "allreduce dp"), flow arrows ("s"/"f") from
// each pipeline send to its receive, counters ("C") for memory. Times are microseconds
// from the start of the run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/units.hpp"

namespace tandem {

// Conventional thread ids, so every producer puts a stream on the same row.
namespace trace_thread {
inline constexpr int compute = 0;
inline constexpr int pp_comm = 1;
inline constexpr int tp_comm = 2;
inline constexpr int dp_comm = 3;
inline constexpr int op_classes = 4;  // the simulator's compute split by op class
inline constexpr int ep_comm = 5;     // the experts' token exchange (mixture of experts)
// A combined 1F1B step's backward, which runs in turns with the forward on the compute
// thread (the Chrome trace format wants one thread's slices nested, not overlapping).
inline constexpr int compute_combined = 6;
// The experts' gradient reduction (expert-dp), which runs beside the dense one (dp).
inline constexpr int expert_dp_comm = 7;
// The compute thread of host task `task` (HostTurns::current_task).
inline constexpr int compute_of_task(int task) {
  return task == 0 ? compute : compute_combined;
}
}  // namespace trace_thread

struct TraceSlice {
  std::string name;  // starts with the op type: "F3", "B0.1", "send_forward", "allreduce dp"
  std::string category;
  int pid = 0;
  int tid = 0;
  Seconds start{0};
  Seconds duration{0};
  nlohmann::json args = nlohmann::json::object();
};

class Trace {
 public:
  void name_process(int pid, const std::string& name, int sort_index);
  void name_thread(int pid, int tid, const std::string& name, int sort_index);
  void add_slice(TraceSlice slice);
  // An arrow from (pid_from, tid_from) at `from` to (pid_to, tid_to) at `to`; each end
  // binds to the slice enclosing it on that thread.
  void add_flow(const std::string& name, int pid_from, int tid_from, Seconds from, int pid_to,
                int tid_to, Seconds to);
  void add_counter(const std::string& name, int pid, Seconds at, const nlohmann::json& values);
  void set_metadata(const std::string& key, nlohmann::json value);

  const std::vector<TraceSlice>& slices() const { return slices_; }
  nlohmann::json to_json() const;
  void write(const std::filesystem::path& path) const;  // throws naming the path on failure

 private:
  std::vector<nlohmann::json> metadata_events_;
  std::vector<TraceSlice> slices_;
  std::vector<nlohmann::json> other_events_;  // flows and counters
  nlohmann::json metadata_ = nlohmann::json::object();
  std::int64_t next_flow_id_ = 1;
};

// Checks a trace document against the rules viewers rely on: a traceEvents array; every
// event has name, ph, pid, tid (ts for timed ones); X events have dur ≥ 0 and nest within
// their thread; s/f flow events pair by id, f carries "bp":"e", and each end lies inside
// an X slice on its thread; M events name processes and threads. Returns the problems
// found (empty when the trace is well formed).
std::vector<std::string> check_trace(const nlohmann::json& trace);

}  // namespace tandem
