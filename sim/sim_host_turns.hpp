// HostTurns on the sim binding: the two tasks are actors of the rank's simulated host (the
// calling actor runs the first, a new one the second), handing the turn over with SimGrid's
// own mutex and condition variable, so that a task waiting for its turn or for a
// collective lets simulated time pass like any actor.
#pragma once

#include "core/host_turns.hpp"

namespace tandem::sim {

class SimActorTurns final : public HostTurns {
 public:
  void run(const std::function<void()>& first, const std::function<void()>& second) override;
  void yield() override;
  int current_task() const override;

 private:
  struct Impl;
  Impl* impl_ = nullptr;  // while run() runs
};

}  // namespace tandem::sim
