// How long `tandem simulate` takes (wall clock) to predict one iteration of the scale
// scenarios of issue 5 — GPT-3 175B on 1536 GPUs (interleaved, symmetric mode, target
// ≤ 10 s on 2 cores) and 1T on 3072 GPUs (target ≤ 30 s) — and a small full-fidelity run.
// SimGrid's engine starts once per process, so each measurement runs in a forked child
// that reports its wall time; the counters carry what was simulated. The rail pair, A B A B:
// Llama 3 70B on 1024 H100 with dgx-h100's rail-optimized fabric built as the fat tree it
// is equivalent to (non-blocking spine) and as rail routes (one Dijkstra zone, forced by a
// spine oversubscribed by a part in 10^9); the two predict the same iteration.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "topology/topology_io.hpp"

namespace {

struct Measured {
  double wall_seconds = -1;
  double iteration_seconds = 0;
  double simulated_ranks = 0;
  double world_size = 0;
};

Measured simulate_in_child(const std::string& scenario_file, tandem::sim::SimMode mode,
                           bool rail_routes = false) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Measured m;
    try {
      const tandem::Scenario s = tandem::load_scenario(scenario_file);
      tandem::Topology t = tandem::load_topology(tandem::sim::topology_of(s));
      if (rail_routes) t.fabric.oversubscription = 1 + 1e-9;
      auto cost = std::make_shared<tandem::sim::CostModel>(t.gpu);
      tandem::sim::SimulateOptions o;
      o.mode = mode;
      o.pricer = [cost](const tandem::sim::OpDesc& op) { return cost->seconds(op); };
      const auto start = std::chrono::steady_clock::now();
      const auto r = tandem::sim::simulate(s, t, o);
      m.wall_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      m.iteration_seconds = r.iteration_seconds;
      m.simulated_ranks = r.simulated_ranks;
      m.world_size = r.world_size;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_simulate: %s\n", e.what());
    }
    if (write(fds[1], &m, sizeof m) != static_cast<ssize_t>(sizeof m)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  Measured m;
  if (read(fds[0], &m, sizeof m) != static_cast<ssize_t>(sizeof m)) m = {};
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return m;
}

void run(benchmark::State& state, const std::string& file, tandem::sim::SimMode mode,
         bool rail_routes = false) {
  for (auto _ : state) {
    const Measured m =
        simulate_in_child(std::string(TANDEM_SCENARIO_DIR) + "/" + file, mode, rail_routes);
    if (m.wall_seconds < 0) {
      state.SkipWithError("the simulation failed (see stderr)");
      return;
    }
    state.SetIterationTime(m.wall_seconds);
    state.counters["predicted_iteration_s"] = m.iteration_seconds;
    state.counters["simulated_ranks"] = m.simulated_ranks;
    state.counters["world_size"] = m.world_size;
  }
}

void BM_Simulate_Default8GpusFull(benchmark::State& state) {
  run(state, "default.json", tandem::sim::SimMode::full);
}
void BM_Simulate_Gpt3_175B_1536Gpus(benchmark::State& state) {
  run(state, "gpt3-175b-1536gpu.json", tandem::sim::SimMode::symmetric);
}
void BM_Simulate_Gpt_1T_3072Gpus(benchmark::State& state) {
  run(state, "gpt-1t-3072gpu.json", tandem::sim::SimMode::symmetric);
}

void BM_Simulate_Llama3_70B_1024H100(benchmark::State& state, bool rail_routes) {
  run(state, "llama3-70b-1024gpu.json", tandem::sim::SimMode::symmetric, rail_routes);
}

}  // namespace

BENCHMARK(BM_Simulate_Default8GpusFull)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_Simulate_Gpt3_175B_1536Gpus)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_Simulate_Gpt_1T_3072Gpus)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
// The rail pair A B A B: the two builds alternate, so a drift of this noisy machine falls
// on both.
[[maybe_unused]] const bool kRailPairRegistered = [] {
  for (const char* round : {"a", "b"})
    for (const bool rail_routes : {false, true})
      benchmark::RegisterBenchmark((std::string("BM_Simulate_Llama3_70B_1024H100/") +
                                    (rail_routes ? "rail_routes_" : "fat_tree_") + round)
                                       .c_str(),
                                   BM_Simulate_Llama3_70B_1024H100, rail_routes)
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kSecond);
  return true;
}();
