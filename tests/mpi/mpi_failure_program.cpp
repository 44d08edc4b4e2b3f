// A 2-rank job in which rank 1 fails while rank 0 waits in an all-reduce that can never
// complete. Run by expect_job_failure.cmake, which checks that the job ends non-zero within
// seconds and that the output names rank 1. Modes (argv[1]):
//   throw — rank 1 has an all-reduce of its own in flight on a sub-communicator (rank 0
//           never joins it) and throws: unwinding must not wait for that operation, and
//           run_mpi_main must print "rank 1: …" and abort the job.
//   kill  — rank 1 dies by SIGKILL: mpirun must notice and end rank 0.
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "exec/mpi/mpi_runtime.hpp"
#include "tests/mpi/mpi_test_support.hpp"

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "throw";
  return tandem::run_mpi_main(argc, argv, [mode](tandem::MpiRuntime& mpi) {
    using namespace tandem;
    MpiCommunicator& world = mpi.world();
    tandem::testing::NullStream stream;
    auto side = world.split_mpi(0, world.rank(), "side");
    Tensor buffer = tandem::testing::host_tensor(1024, DType::fp32);
    if (world.rank() == 0) {
      world.all_reduce(stream, buffer, ReduceOp::sum)->wait();  // rank 1 never joins
      return 0;
    }
    auto stuck = side->all_reduce(stream, buffer, ReduceOp::sum);  // rank 0 never joins
    std::this_thread::sleep_for(std::chrono::milliseconds(200));   // let rank 0 block first
    if (mode == "kill") std::raise(SIGKILL);
    throw std::runtime_error("injected failure in the training step");
  });
}
