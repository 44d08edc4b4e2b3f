// main() of the benchmarks that run the CPU kernels: Google Benchmark's, after the restart
// that gives OpenBLAS the widest kernels of this CPU (kernels/cpu/blas_core.hpp), as the
// tandem program does, so the figures are those of `tandem train`.
#include <benchmark/benchmark.h>

#include "kernels/cpu/blas_core.hpp"

int main(int argc, char** argv) {
  tandem::kernels::cpu::relaunch_with_blas_core(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas_core", tandem::kernels::cpu::blas_core());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
