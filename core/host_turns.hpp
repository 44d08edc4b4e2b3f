// Two host tasks that issue work in turns: Megatron-Core's combined 1F1B
// (--overlap-moe-expert-parallel-comm) runs one microbatch's forward and another's backward
// on one host, each handing the host to the other where it has issued an expert-parallel
// all-to-all and would wait for it, so that the all-to-all of one runs under the other's
// compute. `run` starts `first` at once and `second` at first's first yield(); each runs
// until it yields or ends, then the other goes on; once one has ended, the other runs alone
// (its yields return at once). The turns are the same on every rank, so the collectives the
// two issue reach every group in one order. The bindings differ only in what a task is: a
// host thread (cpu, cuda: ThreadTurns) or an actor of the rank's simulated host (sim).
#pragma once

#include <exception>
#include <functional>

namespace tandem {

class HostTurns {
 public:
  virtual ~HostTurns() = default;
  // Runs both tasks to their end; rethrows the first exception either threw.
  virtual void run(const std::function<void()>& first, const std::function<void()>& second) = 0;
  // Hands the host to the other task, and returns when it is this task's turn again. Outside
  // run, or once the other task has ended, returns at once.
  virtual void yield() = 0;
  // The task whose turn it is (0: the first, 1: the second; 0 outside run): what a caller
  // keeps per task (a named region of the step) is indexed by it.
  virtual int current_task() const = 0;
};

// The turn-taking both implementations share: whose turn it is, who has ended, what was
// thrown. Callers hold their own lock around each call.
struct TurnState {
  bool running = false;
  int turn = 0;
  bool ended[2] = {false, false};
  std::exception_ptr error;
  // The task whose turn it is yields: true if the other one takes the turn (then wait until
  // turn == me again), false if it has ended (go on).
  bool pass(int me) {
    if (ended[1 - me]) return false;
    turn = 1 - me;
    return true;
  }
  void end(int me, std::exception_ptr e) {
    if (e && !error) error = e;
    ended[me] = true;
    turn = 1 - me;
  }
};

// Tasks as host threads: `first` on the calling thread, `second` on a thread of its own,
// started by `on_thread_start` (the cuda binding selects its GPU there).
class ThreadTurns final : public HostTurns {
 public:
  explicit ThreadTurns(std::function<void()> on_thread_start = {})
      : on_thread_start_(std::move(on_thread_start)) {}
  void run(const std::function<void()>& first, const std::function<void()>& second) override;
  void yield() override;
  int current_task() const override;

 private:
  struct Impl;
  std::function<void()> on_thread_start_;
  Impl* impl_ = nullptr;  // while run() runs
};

}  // namespace tandem
