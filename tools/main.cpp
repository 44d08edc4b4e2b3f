// tandem's entry point.
#include "kernels/cpu/blas_core.hpp"
#include "tools/command_line.hpp"

int main(int argc, char** argv) {
  // Before anything else runs: a restart keeps nothing of this process.
  tandem::kernels::cpu::relaunch_with_blas_core(argv);
  return tandem::cli::run_command_line(argc, argv);
}
