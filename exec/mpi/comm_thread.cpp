// The per-communicator thread: a FIFO of MPI operations and the Work states it completes.
#include "exec/mpi/comm_thread.hpp"

#include <stdexcept>
#include <utility>

namespace tandem {

struct MpiWork::State {
  std::string label;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  WorkTiming timing;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard lock(mutex);
      timing.finished = CommClock::now();
      error = std::move(e);
      done = true;
    }
    done_cv.notify_all();
  }
};

void MpiWork::wait() {
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool MpiWork::test() {
  std::lock_guard lock(state_->mutex);
  if (state_->done && state_->error) std::rethrow_exception(state_->error);
  return state_->done;
}

const std::string& MpiWork::label() const {
  return state_->label;
}

std::optional<WorkTiming> MpiWork::timing() const {
  std::lock_guard lock(state_->mutex);
  return state_->timing;
}

struct CommThread::Shared {
  MPI_Comm comm;
  std::mutex mutex;
  std::condition_variable queue_cv;
  std::deque<std::pair<std::shared_ptr<MpiWork::State>, Body>> queue;
  bool stopping = false;
  bool in_flight = false;

  explicit Shared(MPI_Comm c) : comm(c) {}
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

CommThread::CommThread(MPI_Comm comm)
    : shared_(std::make_shared<Shared>(comm)), thread_(&CommThread::run, shared_) {}

CommThread::~CommThread() {
  bool leave_running = false;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopping = true;
    if (std::uncaught_exceptions() > 0) {
      for (auto& [state, body] : shared_->queue)
        state->finish(std::make_exception_ptr(std::runtime_error(
            state->label + ": abandoned, its communicator was torn down by an exception")));
      shared_->queue.clear();
      leave_running = shared_->in_flight;
    }
  }
  shared_->queue_cv.notify_all();
  if (leave_running)
    thread_.detach();
  else
    thread_.join();
}

std::unique_ptr<MpiWork> CommThread::submit(std::string label, Body body) {
  auto state = std::make_shared<MpiWork::State>();
  state->label = std::move(label);
  state->timing.issued = CommClock::now();
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->stopping) throw std::logic_error(state->label + ": communicator is shutting down");
    shared_->queue.emplace_back(state, std::move(body));
  }
  shared_->queue_cv.notify_one();
  return std::make_unique<MpiWork>(std::move(state));
}

// Takes the shared state by reference to a copy owned by std::thread, so a detached thread
// keeps the communicator alive until its last operation returns.
void CommThread::run(const std::shared_ptr<Shared>& shared) {
  for (;;) {
    std::shared_ptr<MpiWork::State> state;
    Body body;
    {
      std::unique_lock lock(shared->mutex);
      shared->queue_cv.wait(lock, [&] { return shared->stopping || !shared->queue.empty(); });
      if (shared->queue.empty()) return;  // stopping, and everything issued has run
      std::tie(state, body) = std::move(shared->queue.front());
      shared->queue.pop_front();
      shared->in_flight = true;
    }
    {
      std::lock_guard lock(state->mutex);
      state->timing.started = CommClock::now();
    }
    std::exception_ptr error;
    try {
      body(shared->comm);
    } catch (...) {
      error = std::current_exception();
    }
    body = nullptr;  // drop the buffers it holds before the host sees completion
    {
      std::lock_guard lock(shared->mutex);
      shared->in_flight = false;
    }
    state->finish(std::move(error));
  }
}

}  // namespace tandem
