// `tandem simulate` in one call: builds the SimGrid platform of a topology, starts one
// actor per simulated rank (all ranks, or one per pipeline stage in symmetric mode), and
// has each run the very Trainer that `tandem train` runs — on a SimDevice and
// SimCommunicators — for the requested iterations. Then it reads the clocks, the memory
// trackers and the exposed-communication books into a report.
//
// SimGrid's engine is a process-wide singleton that cannot be started twice: call
// simulate() at most once per process (tandem validate runs each scenario in a child).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/memory_tracker.hpp"
#include "core/scenario.hpp"
#include "sim/sim_device.hpp"
#include "sim/sim_world.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

struct SimulateOptions {
  SimMode mode = SimMode::symmetric;
  int iterations = 1;      // simulated back to back; the report gives the last one
  std::string trace_path;  // write the merged Chrome trace there (empty: no trace)
  // The trace's op thread gets one slice per Device op, named and shaped as a real run's
  // (train/op_tracing_device.hpp), instead of one per run of consecutive ops of a class.
  bool trace_ops = false;
  bool record_ops = false;   // keep every rank's priced op sequence (RankReport::ops)
  SimDevice::Pricer pricer;  // prices each Device op (sim/cost_model.hpp)
  MoeRouting routing;        // where MoE routers send tokens (sim/moe_routing.hpp)
  // NCCL's kernels hold SMs while collectives overlap compute (sim/sm_contention.hpp); with
  // a topology's NCCL model. Off: collectives take nothing from compute.
  bool nccl_holds_sms = true;
  // Called with the fraction of forward/backward passes simulated so far.
  std::function<void(double)> progress;
};

struct RankReport {
  int rank = 0;
  RankCoordinates coords;
  std::int64_t peak_memory_bytes = 0;                  // the MemoryTracker's high-water mark
  MemoryByUse peak_memory_by_use{};                    // what held it (they sum to it)
  double compute_busy_seconds = 0;                     // ops on the compute stream, all iterations
  std::map<std::string, double> op_seconds;            // Device op → seconds, all iterations
  std::map<std::string, double> iteration_op_seconds;  // Device op → seconds, last iteration
  // The issuing host in the last iteration: its work by kind ("kernel issue", "collective
  // issue", "microbatch", "iteration") and the time the compute stream starved for it.
  std::map<std::string, double> host_seconds;
  double host_bound_seconds = 0;
  double bubble_fraction = 0;  // idle share of the compute stream in forward/backward
  // The last iteration's passes by trace category: "forward", "backward" (a split
  // backward's B: the input gradient) and "weight" (its W: the weight gradients), seconds.
  std::map<std::string, double> pass_seconds;
  // The last iteration's compute-stream seconds inside named parts of the step
  // (StepObserver regions): "mtp", the multi-token prediction block with its losses.
  std::map<std::string, double> region_seconds;
  std::map<std::string, double> exposed_seconds;    // group kind → per iteration
  std::map<std::string, double> peer_wait_seconds;  // group kind → per iteration
  // The last iteration's GEMM and attention time owed to the SMs NCCL's kernels held
  // (sim/sm_contention.hpp): part of their compute seconds, not on top of them.
  double sm_contention_seconds = 0;
  // The last iteration's gradient sync started this late, waiting for the data-parallel
  // group's slowest node (sim/stragglers.hpp; booked as waiting for dp peers).
  double straggler_wait_seconds = 0;
  std::vector<IssuedOp> ops;             // with record_ops
  std::vector<std::string> collectives;  // with record_ops (RankStats)
};

// Why an iteration takes what it takes, on the rank whose compute stream is busiest
// (compute + host-bound): its iteration split into compute by op class (op_class() in
// cost_model.hpp), time its compute stream starved for the host, exposed communication
// per group kind, waiting for pipeline peers (the bubble) and for other groups' peers,
// and the rest (idle the books do not attribute). The parts sum to the iteration time.
struct IterationBreakdown {
  int rank = 0;
  std::map<std::string, double> compute_seconds;  // op class → seconds per iteration
  double optimizer_seconds = 0;                   // = compute_seconds["optimizer"]
  // Of compute_seconds["attention"]: the attention ops whose softmax ran as PyTorch's
  // unfused fp32 ops (cost_model.hpp rule 3b); their extra kernels' issue is host time.
  double unfused_softmax_attention_seconds = 0;
  // Of compute_seconds["gemm"] and ["attention"]: what the SMs NCCL held cost them.
  double sm_contention_seconds = 0;
  double host_bound_seconds = 0;
  std::map<std::string, double> exposed_seconds;  // group kind → seconds
  double pipeline_bubble_seconds = 0;             // waiting for pp peers
  double peer_wait_seconds = 0;                   // waiting for peers of other groups
  double other_seconds = 0;
};

struct SimReport {
  std::string scenario;
  std::string topology;
  SimMode mode = SimMode::symmetric;
  int world_size = 0;
  int simulated_ranks = 0;
  int iterations = 0;
  double iteration_seconds = 0;
  double tokens_per_second = 0;
  // FLOPs per iteration: the papers' model FLOPs (Narayanan et al. 2021 eq. 3 /
  // Korthikanti et al. 2022 eq. 7, 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))), the hardware
  // FLOPs (with recomputation's extra forward), and Megatron's log formula.
  double model_flops = 0;
  double hardware_flops = 0;
  double megatron_log_flops = 0;
  double model_tflops_per_gpu = 0;
  double hardware_tflops_per_gpu = 0;
  double mfu = 0;  // model FLOPs / (time · GPUs · peak in the compute precision)
  double peak_flops_per_gpu = 0;
  // A mixture of experts: the model FLOPs count the routed (and shared) experts only.
  bool mixture_of_experts = false;
  double bubble_fraction = 0;                     // mean over simulated ranks
  std::map<std::string, double> exposed_seconds;  // group kind → max over ranks
  // group kind → max over ranks of the time spent waiting for the group's other members
  // (pp: the pipeline bubble seen from the p2p calls)
  std::map<std::string, double> peer_wait_seconds;
  double straggler_wait_seconds = 0;  // max over ranks of RankReport::straggler_wait_seconds
  IterationBreakdown breakdown;
  // region → max over ranks of RankReport::region_seconds ("mtp": multi-token prediction).
  std::map<std::string, double> region_seconds;
  std::int64_t max_peak_memory_bytes = 0;
  int max_peak_memory_rank = 0;  // the rank with that high-water mark (the first, if several)
  MemoryByUse max_peak_memory_by_use{};
  std::int64_t gpu_memory_bytes = 0;
  bool fits_in_memory = true;
  double wall_seconds = 0;
  std::vector<RankReport> ranks;
};

// The topology a scenario runs on: cluster.topology, or dgx-a100-80g when it names none.
std::string topology_of(const Scenario& scenario);

SimReport simulate(const Scenario& scenario, const Topology& topology,
                   const SimulateOptions& options);

nlohmann::json to_json(const SimReport& r);
std::string format_report(const SimReport& r);  // the human-readable summary
std::string_view sim_mode_name(SimMode m);      // "full", "symmetric"

}  // namespace tandem::sim
