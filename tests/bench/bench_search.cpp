// How long `tandem search` takes (wall clock) on the scale questions of issue 12: GPT-3
// 175B (96 layers, hidden 12288, seq 2048, global batch 1536) on 1024 A100s over the whole
// default space with 2 jobs (target ≤ 60 s), and 1T on 3072 GPUs (target ≤ 5 min). It runs
// the tandem binary (the search forks its own workers and simulation children) and reads
// its --json: counters give candidates enumerated, pruned (invalid, duplicate, memory),
// simulated, estimated only, and seconds per simulated candidate (simulation phase wall ×
// jobs / simulated).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

void search(benchmark::State& state, const std::string& scenario, int world, int jobs) {
  const std::string out = "/tmp/bench_search_" + std::to_string(getpid()) + ".json";
  const std::string cmd = std::string(TANDEM_BINARY) + " search " + TANDEM_SCENARIO_DIR + "/" +
                          scenario + " --world-size " + std::to_string(world) + " --jobs " +
                          std::to_string(jobs) + " --quiet --json " + out + " > /dev/null";
  nlohmann::json j;
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError("tandem search failed");
      return;
    }
    std::ifstream in(out);
    j = nlohmann::json::parse(in);
    state.SetIterationTime(j["seconds"]["wall"].get<double>());
  }
  std::remove(out.c_str());
  const auto& c = j["counts"];
  state.counters["enumerated"] = c["enumerated"].get<double>();
  state.counters["invalid"] = c["invalid"].get<double>();
  state.counters["duplicate"] = c["duplicate"].get<double>();
  state.counters["pruned_memory"] = c["pruned_memory"].get<double>();
  state.counters["dry_runs"] = c["dry_runs"].get<double>();
  state.counters["simulated"] = c["simulated"].get<double>();
  state.counters["estimated_only"] = c["estimated_only"].get<double>();
  state.counters["dry_run_s"] = j["seconds"]["dry_run"].get<double>();
  state.counters["s_per_simulated"] =
      c["simulated"].get<double>() > 0
          ? j["seconds"]["simulate"].get<double>() * jobs / c["simulated"].get<double>()
          : 0;
}

// GPT-2 medium's shape on one 8-GPU node: seconds, what the test command's smoke run uses.
void BM_SearchDefaultOn8(benchmark::State& state) {
  search(state, "default.json", 8, 2);
}
BENCHMARK(BM_SearchDefaultOn8)->Unit(benchmark::kSecond)->UseManualTime()->Iterations(1);

void BM_Search175BOn1024(benchmark::State& state) {
  search(state, "gpt3-175b-1536gpu.json", 1024, 2);
}
BENCHMARK(BM_Search175BOn1024)->Unit(benchmark::kSecond)->UseManualTime()->Iterations(1);

void BM_Search1TOn3072(benchmark::State& state) {
  search(state, "gpt-1t-3072gpu.json", 3072, 2);
}
BENCHMARK(BM_Search1TOn3072)->Unit(benchmark::kSecond)->UseManualTime()->Iterations(1);

}  // namespace
