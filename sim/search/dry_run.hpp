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
#include <optional>
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
  bool has_recv = false, has_send = false;
  // Past the first pipeline receive, the figures the pipeline bound adds to when the first
  // forward arrives, on a clock that starts at that receive and on which the communication
  // issued before it is done by then: the parameter all-gather launched as the step begins
  // (overlap_param_gather: the first bucket, off the first stage the whole stage's
  // parameters) runs while a stage waits for its first forward's input, so what a stage
  // does after that receive cannot be placed after both. busy_seconds, on the clock above,
  // bounds a stage alone.
  struct SinceFirstRecv {
    double busy = 0;           // at the end of the step
    double at_first_send = 0;  // 0 when the first send came before the first receive
    double at_last_recv = 0;   // when the last pipeline receive is issued
    double at_last_send = 0;   // when the last pipeline send is issued
  } since_first_recv;
};

struct DryRun {
  std::int64_t peak_memory_bytes = 0;  // max over stages: the simulated high-water mark
  // The step was not run: what a stage allocated when the model was built (weights,
  // gradient buffers, optimizer state) already exceeded the memory budget. Then
  // peak_memory_bytes is that, a lower bound on the high-water mark, and the seconds are 0.
  bool over_budget_before_step = false;
  // The step was stopped at the allocation that took the live bytes over the budget (at the
  // scenario's own m): peak_memory_bytes is those bytes, a lower bound on the high-water
  // mark, and the seconds are 0.
  bool over_budget_in_step = false;
  double busy_lower_bound = 0;  // max over stages of the compute stream's clock
  // The pipeline bound: a stage's work after its first receive cannot start before the
  // stages ahead of it did their first forward, and stage 0 cannot end before the last
  // backward came back through every stage. Always ≥ busy_lower_bound.
  double lower_bound_seconds = 0;
  // The stages' figures were extended to m from two short steps (DryRunSteps::extrapolated).
  bool extrapolated = false;
  // 0, 1, pp − 1 (those that exist), or every stage when the middle ones differ (a
  // pipeline_model_parallel_layout string); pp − 1 alone for a probe.
  std::vector<StageDryRun> stages;
  // A probe (DryRunStages::last) of a pipeline with more stages: the last stage's high-water
  // mark and clock are lower bounds on the candidate's (the pipeline bound needs the others).
  bool probe = false;
};

// Which pipeline stages a dry run steps. `last` probes a candidate: the last stage alone,
// the cheapest (its 1F1B warm-up is empty: short steps of 2 and 3 microbatches against
// pp + 1 and pp + 2 on stage 0), so `tandem search` can probe every candidate and step in
// full only those whose probe bound is still under the K-th best simulated time.
enum class DryRunStages { all, last };

// How many microbatches a dry run steps through. A stage's step at m microbatches is its
// warm-up, m − warm-up identical steady-state periods and its cool-down: with communicators
// that complete at once nothing but the count of periods changes with m, so every figure of
// the step is affine in m once the warm-up and cool-down have their full length. `extrapolated`
// runs the step at two short counts m1 < m2 (ShortSteps) and extends each figure along that
// line to m; `all` steps every microbatch (`tandem search --exact`).
enum class DryRunSteps { extrapolated, all };

// Two microbatch counts at which pipeline stage `stage`'s step has the warm-up and cool-down
// of its step at the scenario's m and at least two steady-state periods (the first and the
// last may differ from the rest), the second one period more: 1F1B w + 2 and w + 3 for the
// stage's warm-up w = pp − stage − 1 (stage 0 pp + 1, the last stage 2); zb-h1 pp + 1 and
// pp + 2 on every stage (its weight passes lag stage + 1 backward passes); no pipelining 2
// and 3; interleaved 2 and 3 microbatch groups (the schedule walks groups of
// microbatch_group_size_per_vp_stage, pp by default; only when m is a multiple of it).
// std::nullopt when the step at m is no longer than the two short ones together, for GPipe
// (its memory grows with m) and under a batch size ramp-up (m changes from step to step).
struct ShortSteps {
  std::int64_t m1 = 0, m2 = 0;
};
std::optional<ShortSteps> short_steps(const Scenario& s, int stage);

// The pipeline bound from one stage per kind (first, a middle one, last), or from every
// stage when `stages` holds pp of them, for pp stages.
double pipeline_lower_bound(const std::vector<StageDryRun>& stages, int pp);

// Dry-runs every scenario (valid ones; each one iteration), in order. The pricer is the
// simulation's. A scenario whose stage allocates more than `memory_budget` bytes while its
// model is built stops there (over_budget_before_step): two in five of a 175B search's
// candidates, which no step could make fit; a step stops at the allocation that takes it
// over (over_budget_in_step). Throws what the Trainer throws.
// With DryRunSteps::extrapolated, each stage of a scenario that has ShortSteps for all its
// stages is run at its m1 and m2 and extrapolated to the scenario's m; when the two short steps
// disagree on anything that must not depend on m (the memory high-water mark, where the first
// pipeline send and receive fall), or one goes over the budget during its step, it is run at m
// instead. With DryRunStages::last only the last pipeline stage runs (DryRun::probe).
std::vector<DryRun> dry_run(const std::vector<Scenario>& scenarios, const Topology& topology,
                            const SimDevice::Pricer& pricer,
                            std::int64_t memory_budget = std::numeric_limits<std::int64_t>::max(),
                            DryRunSteps steps = DryRunSteps::extrapolated,
                            DryRunStages which = DryRunStages::all);

}  // namespace tandem::sim::search
