// The "one code path" probe: trains two iterations of a small GPT under a layout given on
// the command line, either for real (`probe cpu …` under mpirun: CpuDevice + MPI) or in
// the simulator (`probe sim …`: SimDevice + SimGrid, full fidelity, one process), and
// prints per rank its memory high-water mark, the number of Device ops it issued and a
// hash of their sequence (names and operand shapes):
//   rank 0 peak 1234567 ops 812 sequence 9f3c…
// tests/sim/one_code_path.sh runs both for several layouts and requires identical output.
#include <mpi.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "core/scenario.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "exec/mpi/group_communicators.hpp"
#include "exec/mpi/mpi_runtime.hpp"
#include "kernels/cpu/threads.hpp"
#include "schedules/layout.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "tests/sim/counting_samples.hpp"
#include "tests/sim/recording_device.hpp"
#include "topology/topology_io.hpp"
#include "train/trainer.hpp"

namespace tandem {
namespace {

constexpr int kIterations = 2;

// FNV-1a over the op lines: equal sequences give equal hashes.
std::uint64_t fnv1a(const std::vector<std::string>& lines) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& line : lines) {
    for (unsigned char c : line) h = (h ^ c) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
  }
  return h;
}

std::string report(int rank, std::int64_t peak, const std::vector<std::string>& ops) {
  char line[160];
  std::snprintf(line, sizeof line, "rank %d peak %lld ops %zu sequence %016llx", rank,
                static_cast<long long>(peak), ops.size(),
                static_cast<unsigned long long>(fnv1a(ops)));
  return line;
}

// The op line RecordingDevice writes, rebuilt from what the sim device priced: the op name
// is enough to compare sequences across bindings (shapes are compared through the memory
// high-water mark and the count).
std::string name_of(const std::string& line) {
  return line.substr(0, line.find(' '));
}

int run_cpu(const Scenario& s) {
  int argc = 0;
  char** argv = nullptr;
  MpiRuntime mpi(argc, argv);
  kernels::cpu::set_num_threads(1);
  const int rank = mpi.world().rank();
  const auto& p = s.parallelism;
  const Layout layout =
      make_layout({mpi.world().size(), p.tensor_model_parallel_size, p.pipeline_model_parallel_size,
                   p.context_parallel_size, p.expert_model_parallel_size, p.order});
  CpuDevice cpu;
  testing::RecordingDevice device(cpu);
  auto comms = make_group_communicators(mpi.world(), layout);
  auto get = [&](GroupKind k) -> Communicator* {
    auto it = comms.find(k);
    return it == comms.end() ? nullptr : it->second.get();
  };
  testing::CountingSamples samples(s.model.seq_length, s.model.vocab_size);
  std::vector<std::string> ops;
  std::int64_t peak = 0;
  {
    Trainer trainer(s, make_parallel_context(layout, rank), device,
                    trainer_groups(get, layout.sizes.cp), samples, nullptr);
    for (int i = 0; i < kIterations; ++i) trainer.train_step();
    peak = cpu.memory().peak().value;
    for (const auto& line : device.log())
      if (line.rfind("allocate", 0) != 0) ops.push_back(name_of(line));
  }
  std::cout << report(rank, peak, ops) << std::endl;
  return 0;
}

int run_sim(const Scenario& s) {
  const Topology t = load_topology(sim::topology_of(s));
  auto cost = std::make_shared<sim::CostModel>(t.gpu);
  sim::SimulateOptions o;
  o.mode = sim::SimMode::full;
  o.iterations = kIterations;
  o.record_ops = true;
  o.pricer = [cost](const sim::OpDesc& op) { return cost->seconds(op); };
  const auto r = sim::simulate(s, t, o);
  for (const auto& rank : r.ranks) {
    std::vector<std::string> ops;
    for (const auto& op : rank.ops) ops.emplace_back(op.op.op);
    std::cout << report(rank.rank, rank.peak_memory_bytes, ops) << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  using namespace tandem;
  if (argc < 2 || (std::string(argv[1]) != "cpu" && std::string(argv[1]) != "sim")) {
    std::cerr << "usage: one_code_path_probe cpu|sim [--flag value …] (scenario overrides)\n";
    return 2;
  }
  try {
    Scenario s;
    s.model.num_layers = 4;
    s.model.hidden_size = 64;
    s.model.num_attention_heads = 4;
    s.model.seq_length = 32;
    s.model.vocab_size = 500;
    s.training.micro_batch_size = 2;
    s.training.global_batch_size = 16;
    s.cluster.gpus_per_node = 8;
    std::vector<std::pair<std::string, std::string>> overrides;
    for (int i = 2; i + 1 < argc; i += 2) overrides.emplace_back(argv[i], argv[i + 1]);
    apply_overrides(s, overrides);
    validate(s);
    // FP8 needs bf16 beside it (validate); the cpu binding computes fp32 only, so both
    // bindings run fp32 around the FP8 GEMMs, as tandem train does on the cpu.
    if (s.training.fp8.enabled()) s.training.bf16 = s.training.fp16 = false;
    return std::string(argv[1]) == "cpu" ? run_cpu(s) : run_sim(s);
  } catch (const std::exception& e) {
    std::cerr << "one_code_path_probe: " << e.what() << "\n";
    return 1;
  }
}
