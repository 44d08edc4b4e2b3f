// Thread control of the CPU kernels. Every multi-threaded kernel uses OpenMP, and the
// GEMM backend (OpenBLAS built for OpenMP, or Eigen) shares the same OpenMP thread pool,
// so one knob sets both. The default is OpenMP's: OMP_NUM_THREADS when set, otherwise
// one thread per core (2 on the development machines).
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem::kernels::cpu {

// Loops over fewer elements than this run on one thread: waking the OpenMP team costs a
// few microseconds, more than such a loop takes.
inline constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 15;

// Column sums (bias and layer-norm parameter gradients) are split into blocks of this many
// columns, one thread per block, each summing its rows in order: the result is the same
// whatever the thread count.
inline constexpr std::int64_t kColumnBlock = 64;

// Threads that later kernel calls from this thread use.
int num_threads();

// Sets the threads for later kernel calls from this thread (n ≥ 1); for example 1 per
// rank when several MPI ranks share a machine's cores.
void set_num_threads(int n);

// Which library runs the GEMMs: "openblas" or "eigen" (chosen when the build was configured).
std::string_view gemm_backend();

}  // namespace tandem::kernels::cpu
