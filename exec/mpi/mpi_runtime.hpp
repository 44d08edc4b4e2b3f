// MpiRuntime and run_mpi_main: MPI's lifetime in a tandem process, and the top-level
// failure handler that turns one rank's error into the end of the whole job.
//
// MpiRuntime is MPI_Init_thread/MPI_Finalize as an object: it asks for
// MPI_THREAD_MULTIPLE (each communicator calls MPI from its own thread, comm_thread.hpp)
// and throws if the library grants less. It owns the world communicator, a duplicate of
// MPI_COMM_WORLD, so tandem's traffic never matches anyone else's. It is the only MPI
// state tandem keeps; there is one per process, made in main and passed down.
//
// run_mpi_main is what a tandem MPI program's main returns:
//
//   int main(int argc, char** argv) {
//     return tandem::run_mpi_main(argc, argv, [](tandem::MpiRuntime& mpi) {
//       auto groups = tandem::make_group_communicators(mpi.world(), layout);
//       …
//       return 0;
//     });
//   }
//
// If the body throws on any rank, that rank prints "rank R: <what>" to stderr and calls
// MPI_Abort, and mpirun ends every other rank within seconds — even ranks blocked in a
// collective that will never complete. A rank that is killed is noticed by mpirun, which
// ends the job the same way. A non-zero status returned by the body aborts too: a rank
// that returned early could leave its peers waiting for it forever.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "exec/mpi/mpi_communicator.hpp"

namespace tandem {

class MpiRuntime {
 public:
  // Throws std::logic_error when MPI is already initialised in this process, and
  // std::runtime_error (after finalising) when MPI_THREAD_MULTIPLE is not granted.
  MpiRuntime(int& argc, char**& argv);
  // Finalises MPI. When reached by an exception unwinding the stack, it aborts the job
  // instead: MPI_Finalize waits for the peers, which may be waiting for this rank.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  MpiCommunicator& world() { return *world_; }

  // Prints "rank R: <message>" to stderr and ends the job with `exit_code` (MPI_Abort).
  [[noreturn]] void abort(std::string_view message, int exit_code = 1);

 private:
  std::unique_ptr<MpiCommunicator> world_;
};

// See the file comment: returns 0 after MPI_Finalize when the body returns 0 on this rank;
// otherwise the job is aborted. Returns 1 without MPI when the runtime cannot start.
int run_mpi_main(int argc, char** argv, const std::function<int(MpiRuntime&)>& body);

}  // namespace tandem
