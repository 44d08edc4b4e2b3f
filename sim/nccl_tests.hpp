// nccl-tests in the simulator: one collective over `gpus` ranks of a topology (ranks
// placed node by node, as mpirun -np N does), swept over sizes from min to max bytes by a
// factor, each timed by running it through SimCommunicator on a fresh SimGrid platform,
// the very path training collectives take. Prints the table nccl-tests prints (size,
// count, time, algbw, busbw), plus the algorithm/protocol NCCL's tuner picked, so the
// communication model can be held against published nccl-tests tables directly.
//
//   auto rows = run_nccl_tests(load_topology("dgx-a100-80g"),
//                              {.collective = Collective::all_reduce, .gpus = 16,
//                               .min_bytes = 1024, .max_bytes = 8LL << 30});
//
// SimGrid's engine is one per process: run_nccl_tests runs once per process (the CLI, or a
// forked child in tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/collective_cost.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

struct NcclTestOptions {
  Collective collective = Collective::all_reduce;
  int gpus = 8;
  std::int64_t min_bytes = 1024;
  std::int64_t max_bytes = 1LL << 30;
  int factor = 2;  // each size is the previous times this
};

struct NcclTestRow {
  std::int64_t bytes = 0;  // nccl-tests' size (buffer, gathered output, scattered input)
  std::int64_t count = 0;  // fp32 elements of that size
  double seconds = 0;      // one operation, all ranks started together
  double algbw = 0;        // bytes / s
  double busbw = 0;        // algbw · bus_bandwidth_factor
  std::string choice;      // "ring/LL x8" (empty without an NCCL model)
};

// Throws ConfigError for gpus < 2, min_bytes < 4 · gpus, max < min, or factor < 2.
std::vector<NcclTestRow> run_nccl_tests(const Topology& topology, const NcclTestOptions& options);

// The nccl-tests table: "size count type time(us) algbw(GB/s) busbw(GB/s) algorithm".
std::string format_nccl_tests(const Topology& topology, const NcclTestOptions& options,
                              const std::vector<NcclTestRow>& rows);

}  // namespace tandem::sim
