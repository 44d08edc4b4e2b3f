// An error raised inside a simulated rank (a C++ exception in its SimGrid actor) ends the
// simulation with its message, as an exception simulate() throws, never an abort of the
// engine: the pricer given to simulate() is the hook, throwing from a rank's op while the
// other ranks are blocked in the step's collectives and p2p. A ConfigError stays one (the
// CLI exits 2 on it), anything else names the rank (exit 1).
// SimGrid's engine can start once per process, so each simulation runs in a child; a child
// the engine aborted answers "child produced nothing (status …)".
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "sim/cost_model.hpp"
#include "sim/sim_runner.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

enum class Raise { runtime_error, config_error };

// Simulates the default scenario (tp 2 × pp 2 × dp 2, full mode: 8 actors) with a pricer
// that throws at its `after`-th call (never when 0), and reports what simulate() threw, or
// how many times the pricer was called.
nlohmann::json simulate_raising(Raise raise, int after) {
  return testing::in_child([raise, after] {
    const Scenario s = default_scenario();
    const Topology t = load_topology(topology_of(s));
    auto cost = std::make_shared<CostModel>(t.gpu);
    auto calls = std::make_shared<int>(0);
    SimulateOptions o;
    o.mode = SimMode::full;
    o.pricer = [cost, calls, raise, after](const OpDesc& op) {
      if (++*calls == after) {
        if (raise == Raise::config_error)
          throw ConfigError("test_field", "7", "a rule broken inside a rank");
        throw std::runtime_error("op " + std::string(op.op) + " failed inside the rank");
      }
      return cost->seconds(op);
    };
    try {
      simulate(s, t, o);
    } catch (const ConfigError& e) {
      return nlohmann::json{{"config_error", e.what()}};
    }
    return nlohmann::json{{"finished", true}, {"calls", *calls}};
  });
}

// How many ops the run prices (the cost model's calls), so that the error can be raised
// halfway through the step.
int priced_ops() {
  const auto r = simulate_raising(Raise::runtime_error, 0);
  EXPECT_TRUE(r.contains("calls")) << r.dump();
  return r.value("calls", 2);
}

TEST(SimRankErrors, AnExceptionInARankEndsTheRunWithItsMessage) {
  // Early (the first op priced) and mid-step (other ranks then wait in collectives).
  const int calls = priced_ops();
  ASSERT_GT(calls, 10);
  for (int after : {1, calls / 4, calls / 2, 3 * calls / 4, calls - 1}) {
    const auto r = simulate_raising(Raise::runtime_error, after);
    ASSERT_TRUE(r.contains("error")) << after << ": " << r.dump();
    const std::string what = r["error"];
    EXPECT_EQ(what.find("child produced nothing"), std::string::npos) << what;  // no abort
    EXPECT_NE(what.find("simulated rank "), std::string::npos) << what;
    EXPECT_NE(what.find("failed inside the rank"), std::string::npos) << what;
  }
}

TEST(SimRankErrors, AConfigErrorInARankStaysAConfigError) {
  const auto r = simulate_raising(Raise::config_error, priced_ops() / 2);
  ASSERT_TRUE(r.contains("config_error")) << r.dump();
  const std::string what = r["config_error"];
  EXPECT_NE(what.find("test_field"), std::string::npos) << what;
  EXPECT_NE(what.find("a rule broken inside a rank"), std::string::npos) << what;
}

}  // namespace
}  // namespace tandem::sim
