// HostTurns on host threads (core/host_turns.hpp): the two tasks of a combined 1F1B step
// take turns at their yields, in one order every time, and the first error comes back out.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/host_turns.hpp"

namespace tandem {
namespace {

// Task a logs a1, yields, a2, yields, a3; task b logs b1, yields, b2. The turns go
// a1 (yield) b1 (yield) a2 (yield) b2 (ends) a3: a's last yield finds b ended.
std::vector<std::string> interleaving(HostTurns& turns) {
  std::vector<std::string> log;
  turns.run(
      [&] {
        log.push_back("a1");
        turns.yield();
        log.push_back("a2");
        turns.yield();
        log.push_back("a3");
        turns.yield();  // b has ended: returns at once
        log.push_back("a4");
      },
      [&] {
        log.push_back("b1");
        turns.yield();
        log.push_back("b2");
      });
  return log;
}

TEST(HostTurns, ThreadsTakeTurnsAtTheirYieldsInOneOrder) {
  ThreadTurns turns;
  const std::vector<std::string> want{"a1", "b1", "a2", "b2", "a3", "a4"};
  for (int k = 0; k < 50; ++k) ASSERT_EQ(interleaving(turns), want) << "run " << k;
  turns.yield();  // outside run: nothing to hand over
}

// Each task sees itself as the current one (what per-task bookkeeping indexes by); outside
// run the current task is 0.
TEST(HostTurns, EachTaskIsTheCurrentOneOnItsTurn) {
  ThreadTurns turns;
  std::vector<int> seen;
  turns.run(
      [&] {
        seen.push_back(turns.current_task());
        turns.yield();
        seen.push_back(turns.current_task());
      },
      [&] {
        seen.push_back(turns.current_task());
        turns.yield();
        seen.push_back(turns.current_task());
      });
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(turns.current_task(), 0);
}

TEST(HostTurns, TheSecondTaskStartsWhenTheFirstEndsWithoutYielding) {
  ThreadTurns turns;
  std::vector<std::string> log;
  turns.run([&] { log.push_back("a"); },
            [&] {
              log.push_back("b1");
              turns.yield();
              log.push_back("b2");
            });
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b1", "b2"}));
}

TEST(HostTurns, AnErrorOfEitherTaskComesOutAfterBothEnd) {
  ThreadTurns turns;
  bool b_ended = false;
  EXPECT_THROW(turns.run(
                   [&] {
                     turns.yield();
                     throw std::runtime_error("a failed");
                   },
                   [&] {
                     turns.yield();
                     b_ended = true;
                   }),
               std::runtime_error);
  EXPECT_TRUE(b_ended);
  bool started = false;
  auto thread_start = [&] { started = true; };
  ThreadTurns with_hook(thread_start);
  EXPECT_THROW(with_hook.run([] {}, [] { throw std::logic_error("b failed"); }), std::logic_error);
  EXPECT_TRUE(started);  // the second task's thread ran the binding's start hook first
}

}  // namespace
}  // namespace tandem
