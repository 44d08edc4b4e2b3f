// The fast pass of `tandem search`: every candidate's training step run once per distinct
// pipeline stage on the very SimDevice of the simulator, with communicators that complete
// at once (no network, no peers). What the step allocates does not depend on the network,
// so the device's MemoryTracker high-water mark is the simulated one to the byte; and the
// compute stream's busy time, with where the stage's pipeline sends and receives fall in
// it, gives a lower bound on the simulated iteration time (LowerBound below). Only stages
// 0, 1 and pp − 1 run: stages 1 … pp − 2 hold the same layers and issue the same ops
// (tests/sim/test_search.cpp compares both figures with full simulations).
//
// One SimGrid engine (one host, one actor) runs all the dry runs of a call, so call
// dry_run() at most once per process, and never in a process that runs simulate().
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/scenario.hpp"
#include "sim/sim_device.hpp"
#include "topology/topology.hpp"

namespace tandem::sim::search {

// One pipeline stage's step, as run with instant communication. Seconds are the compute
// stream's clock: its ops as the cost model prices them, plus the stalls for the
// communication it waits for. Each communicator runs its operations in issue order, each
// starting no earlier than the compute work issued before it, and takes no less than the
// simulator can: NCCL's tuner for the group's shape (when the topology has it), the closed
// form inside a switched node, the slowest link's bandwidth otherwise; a pipeline send or
// receive its bytes over the slowest link between the pair. Peers are never waited for.
struct StageDryRun {
  int stage = 0;
  std::int64_t peak_memory_bytes = 0;
  double busy_seconds = 0;  // every op on the compute stream in one iteration
  // The issuing host's span over the iteration (issue costs and its waits for the device):
  // the host issues serially, and with real communication its waits only grow.
  double host_seconds = 0;
  double before_first_recv = 0;  // busy when the first pipeline receive is issued
  double at_first_send = 0;      // busy when the first pipeline send is issued
  double at_last_recv = 0;       // busy when the last pipeline receive is issued
  double at_last_send = 0;       // busy when the last pipeline send is issued
  bool has_recv = false, has_send = false;
};

struct DryRun {
  std::int64_t peak_memory_bytes = 0;  // max over stages: the simulated high-water mark
  // The step was not run: what a stage allocated when the model was built (weights,
  // gradient buffers, optimizer state) already exceeded the memory budget. Then
  // peak_memory_bytes is that, a lower bound on the high-water mark, and the seconds are 0.
  bool over_budget_before_step = false;
  double busy_lower_bound = 0;  // max over stages of the compute stream's clock
  // The pipeline bound: a stage's work after its first receive cannot start before the
  // stages ahead of it did their first forward, and stage 0 cannot end before the last
  // backward came back through every stage. Always ≥ busy_lower_bound.
  double lower_bound_seconds = 0;
  // 0, 1, pp − 1 (those that exist), or every stage when the middle ones differ (a
  // pipeline_model_parallel_layout string).
  std::vector<StageDryRun> stages;
};

// The pipeline bound from one stage per kind (first, a middle one, last), or from every
// stage when `stages` holds pp of them, for pp stages.
double pipeline_lower_bound(const std::vector<StageDryRun>& stages, int pp);

// Dry-runs every scenario (valid ones; each one iteration), in order. The pricer is the
// simulation's. A scenario whose stage allocates more than `memory_budget` bytes while its
// model is built stops there (over_budget_before_step): two in five of a 175B search's
// candidates, which no step could make fit. Throws what the Trainer throws.
std::vector<DryRun> dry_run(const std::vector<Scenario>& scenarios, const Topology& topology,
                            const SimDevice::Pricer& pricer,
                            std::int64_t memory_budget = std::numeric_limits<std::int64_t>::max());

}  // namespace tandem::sim::search
