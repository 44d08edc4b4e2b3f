// MPI's lifetime (MpiRuntime) and the top-level handler that aborts the job on any error.
#include "exec/mpi/mpi_runtime.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

namespace tandem {

namespace {

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "level " + std::to_string(level);
}

[[noreturn]] void abort_job(int rank, std::string_view message, int exit_code) {
  std::fprintf(stderr, "rank %d: %.*s\n", rank, static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();  // MPI_Abort does not return; this keeps the promise if it ever did
}

}  // namespace

MpiRuntime::MpiRuntime(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    throw std::logic_error(
        "MpiRuntime: MPI is already initialised in this process; make one "
        "MpiRuntime, in main, and pass it down");
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw std::runtime_error("MpiRuntime: MPI_Init_thread failed");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw std::runtime_error(
        "MpiRuntime: the MPI library granted " + thread_level_name(provided) +
        ", tandem needs MPI_THREAD_MULTIPLE (each communicator calls MPI from its own "
        "thread); use an MPI built with thread support (Open MPI: --enable-mpi-thread-multiple)");
  }
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  world_ = std::make_unique<MpiCommunicator>(world, "world");
}

MpiRuntime::~MpiRuntime() {
  if (std::uncaught_exceptions() > 0)
    abort(
        "an exception is unwinding past the MPI runtime; aborting the job instead of waiting "
        "for the other ranks in MPI_Finalize");
  world_.reset();
  MPI_Finalize();
}

void MpiRuntime::abort(std::string_view message, int exit_code) {
  abort_job(world_->rank(), message, exit_code);
}

int run_mpi_main(int argc, char** argv, const std::function<int(MpiRuntime&)>& body) {
  std::optional<MpiRuntime> runtime;
  try {
    runtime.emplace(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  int status = 0;
  try {
    status = body(*runtime);
  } catch (const std::exception& e) {
    runtime->abort(e.what());
  } catch (...) {
    runtime->abort("unknown exception");
  }
  if (status != 0) runtime->abort("exited with status " + std::to_string(status), status);
  runtime.reset();
  return 0;
}

}  // namespace tandem
