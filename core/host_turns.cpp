#include "core/host_turns.hpp"

#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace tandem {

struct ThreadTurns::Impl {
  std::mutex mutex;
  std::condition_variable changed;
  TurnState state;
};

void ThreadTurns::run(const std::function<void()>& first, const std::function<void()>& second) {
  if (impl_ != nullptr) throw std::logic_error("HostTurns::run: already running two tasks");
  Impl impl;
  impl.state.running = true;
  impl_ = &impl;
  auto task = [&](int me, const std::function<void()>& body) {
    std::exception_ptr error;
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(impl.mutex);
    impl.state.end(me, error);
    impl.changed.notify_all();
  };
  std::thread other([&] {
    if (on_thread_start_) on_thread_start_();
    {
      std::unique_lock lock(impl.mutex);
      impl.changed.wait(lock, [&] { return impl.state.turn == 1 || impl.state.ended[0]; });
    }
    task(1, second);
  });
  task(0, first);
  {
    std::unique_lock lock(impl.mutex);
    impl.changed.wait(lock, [&] { return impl.state.ended[1]; });
  }
  other.join();
  impl_ = nullptr;
  if (impl.state.error) std::rethrow_exception(impl.state.error);
}

void ThreadTurns::yield() {
  Impl* impl = impl_;
  if (impl == nullptr) return;
  std::unique_lock lock(impl->mutex);
  // Only the task whose turn it is runs, so the turn says who is calling.
  const int me = impl->state.turn;
  if (!impl->state.pass(me)) return;
  impl->changed.notify_all();
  impl->changed.wait(lock, [&] { return impl->state.turn == me || impl->state.ended[1 - me]; });
}

int ThreadTurns::current_task() const {
  // Only the task whose turn it is runs, and the turn changes only by its own hand or under
  // the mutex that handed it the turn.
  return impl_ == nullptr ? 0 : impl_->state.turn;
}

}  // namespace tandem
