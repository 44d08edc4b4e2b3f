// How long build_platform takes for 3072 ranks (384 DGX nodes) on each GPU preset: the
// fixed cost every large simulation pays before its first op (the first round's target:
// well under two seconds on 2 cores). SimGrid's engine is one per process, so each
// measurement builds in a forked child that reports its wall time through a pipe.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <simgrid/s4u.hpp>
#include <string>

#include "sim/platform.hpp"
#include "sim/simgrid_config.hpp"
#include "topology/topology_io.hpp"

namespace {

// Seconds to build the platform in a fresh engine, or -1 when the child failed.
double build_seconds_in_child(const std::string& preset, int world_size) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double seconds = -1;
    try {
      int argc = 2;
      char name[] = "bench_platform";
      char quiet[] = "--log=root.thres:critical";
      char* argv[] = {name, quiet, nullptr};
      simgrid::s4u::Engine engine(&argc, argv);
      tandem::sim::configure_network_model(engine);
      const tandem::Topology t = tandem::load_topology(preset);
      const auto start = std::chrono::steady_clock::now();
      const tandem::sim::Platform p = tandem::sim::build_platform(t, world_size);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (p.hosts.size() != static_cast<std::size_t>(world_size)) seconds = -1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_platform: %s\n", e.what());
    }
    if (write(fds[1], &seconds, sizeof seconds) != static_cast<ssize_t>(sizeof seconds)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  double seconds = -1;
  if (read(fds[0], &seconds, sizeof seconds) != static_cast<ssize_t>(sizeof seconds)) seconds = -1;
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return seconds;
}

void BM_BuildPlatform(benchmark::State& state, const char* preset) {
  const int world_size = static_cast<int>(state.range(0));
  for (auto _ : state) {
    const double s = build_seconds_in_child(preset, world_size);
    if (s < 0) {
      state.SkipWithError("building the platform failed (see stderr)");
      return;
    }
    state.SetIterationTime(s);
  }
  state.counters["ranks"] = world_size;
}
BENCHMARK_CAPTURE(BM_BuildPlatform, dgx_a100_80g, "dgx-a100-80g")
    ->Arg(3072)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildPlatform, dgx_h100, "dgx-h100")
    ->Arg(3072)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
