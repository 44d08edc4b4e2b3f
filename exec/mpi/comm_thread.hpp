// The communication thread of one MPI communicator, and the Work handles it completes.
// MPI's nonblocking collectives advance only while some thread is inside MPI, so a
// collective issued before a long compute phase would otherwise sit idle until wait().
// Each communicator therefore owns a thread that runs its operations — blocking MPI calls
// (or Isend/Irecv + Waitall for p2p batches) — one after another, in issue order, as a
// NCCL communicator's stream does. The host thread only enqueues and later waits.
// Consequences: every MPI call on a communicator happens on its thread (split and barrier
// too), so the issue order the host chose is the order MPI sees on every rank; and
// operations on different communicators (tp, dp, pp) proceed concurrently, which needs
// MPI_THREAD_MULTIPLE (MpiRuntime asks for it).
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/communicator.hpp"

namespace tandem {

using CommClock = std::chrono::steady_clock;

// WorkTiming (core/communicator.hpp): issued by the host, started on the communication
// thread and finished there (host-visible completion is `finished` plus a thread wake-up).

class MpiWork final : public Work {
 public:
  struct State;
  explicit MpiWork(std::shared_ptr<State> state) : state_(std::move(state)) {}

  // Blocks until the operation ran; rethrows the error it raised (an MpiError, a size
  // mismatch found on receipt, or "abandoned" when its communicator was torn down first).
  void wait() override;
  bool test() override;  // true once finished; rethrows its error like wait()

  const std::string& label() const;                   // "all_reduce tp", "batch_p2p pp", …
  std::optional<WorkTiming> timing() const override;  // set once test() is true

 private:
  std::shared_ptr<State> state_;
};

class CommThread {
 public:
  using Body = std::function<void(MPI_Comm)>;

  // Takes ownership of `comm`: it is freed (unless MPI is finalised by then) when both this
  // object and the thread are done with it.
  explicit CommThread(MPI_Comm comm);
  // Normally drains the queue and joins. While an exception unwinds the stack (a rank
  // failing), queued operations are abandoned and an operation still inside MPI is left to
  // its thread (detached): its peers may never arrive, and joining would hang the rank
  // instead of letting run_mpi_main abort the job.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Enqueues `body`, which the thread calls with the communicator.
  std::unique_ptr<MpiWork> submit(std::string label, Body body);

 private:
  struct Shared;
  static void run(const std::shared_ptr<Shared>& shared);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace tandem
