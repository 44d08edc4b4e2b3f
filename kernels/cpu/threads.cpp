// OpenMP thread control for the CPU kernels; see threads.hpp.
#include "kernels/cpu/threads.hpp"

#include <omp.h>

#include <stdexcept>

namespace tandem::kernels::cpu {

int num_threads() {
  return omp_get_max_threads();
}

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("kernels: thread count must be at least 1");
  // OpenBLAS's OpenMP build reads omp_get_max_threads() on every call, so this is enough.
  omp_set_num_threads(n);
}

std::string_view gemm_backend() {
#if defined(TANDEM_KERNELS_CBLAS)
  return "openblas";
#else
  return "eigen";
#endif
}

}  // namespace tandem::kernels::cpu
