#include "sim/sim_host_turns.hpp"

#include <mutex>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/ConditionVariable.hpp>
#include <simgrid/s4u/Mutex.hpp>
#include <stdexcept>

namespace tandem::sim {

struct SimActorTurns::Impl {
  simgrid::s4u::MutexPtr mutex = simgrid::s4u::Mutex::create();
  simgrid::s4u::ConditionVariablePtr changed = simgrid::s4u::ConditionVariable::create();
  TurnState state;
};

void SimActorTurns::run(const std::function<void()>& first, const std::function<void()>& second) {
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
    std::unique_lock lock(*impl.mutex);
    impl.state.end(me, error);
    impl.changed->notify_all();
  };
  auto self = simgrid::s4u::Actor::self();
  simgrid::s4u::Actor::create(self->get_name() + " (second task)", self->get_host(), [&] {
    {
      std::unique_lock lock(*impl.mutex);
      while (impl.state.turn != 1 && !impl.state.ended[0]) impl.changed->wait(lock);
    }
    task(1, second);
  });
  task(0, first);
  {
    std::unique_lock lock(*impl.mutex);
    while (!impl.state.ended[1]) impl.changed->wait(lock);
  }
  impl_ = nullptr;
  if (impl.state.error) std::rethrow_exception(impl.state.error);
}

void SimActorTurns::yield() {
  Impl* impl = impl_;
  if (impl == nullptr) return;
  std::unique_lock lock(*impl->mutex);
  const int me = impl->state.turn;  // only the task whose turn it is runs
  if (!impl->state.pass(me)) return;
  impl->changed->notify_all();
  while (impl->state.turn != me && !impl->state.ended[1 - me]) impl->changed->wait(lock);
}

int SimActorTurns::current_task() const {
  return impl_ == nullptr ? 0 : impl_->state.turn;
}

}  // namespace tandem::sim
