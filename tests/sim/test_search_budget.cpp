// The dry run's memory budget (sim/search/dry_run.hpp): a step stops at the allocation that
// crosses it, and a budget the model's own state exceeds stops before any step. Its own
// program, labelled integration, not unit: stopping a step throws inside a SimGrid actor,
// whose swapped stack AddressSanitizer's no-return handling misreads as a stack overflow
// (google/sanitizers#189), so the sanitizer run of the unit programs cannot hold it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/cost_model.hpp"
#include "sim/search/dry_run.hpp"
#include "tests/sim/search_fixtures.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim::search {
namespace {

using testing::in_child;

TEST(DryRun, StopsWhereTheBudgetIsCrossedWhileBuildingOrStepping) {
  const Scenario s = small_model();
  const nlohmann::json out = in_child([&] {
    const Topology t = load_topology("dgx-a100-80g");
    const auto full = dry_run({s}, t, pricer_for(t)).front();
    // A budget under the high-water mark but over what building the model allocates: the
    // step stops at the allocation that crosses it, which here is the high-water mark's.
    const auto tight = dry_run({s}, t, pricer_for(t), full.peak_memory_bytes - 1).front();
    // A budget of one byte: building the model exceeds it, no step runs.
    const auto tiny = dry_run({s}, t, pricer_for(t), 1).front();
    return nlohmann::json{
        {"full_peak", full.peak_memory_bytes},         {"full_over", full.over_budget_before_step},
        {"full_bound", full.lower_bound_seconds},      {"tight_peak", tight.peak_memory_bytes},
        {"tight_over", tight.over_budget_before_step}, {"tight_in_step", tight.over_budget_in_step},
        {"tight_bound", tight.lower_bound_seconds},    {"tiny_peak", tiny.peak_memory_bytes},
        {"tiny_over", tiny.over_budget_before_step},   {"tiny_bound", tiny.lower_bound_seconds}};
  });
  ASSERT_FALSE(out.contains("error")) << out.dump();
  EXPECT_FALSE(out["full_over"].get<bool>());
  EXPECT_GT(out["full_bound"].get<double>(), 0);
  EXPECT_FALSE(out["tight_over"].get<bool>());
  EXPECT_TRUE(out["tight_in_step"].get<bool>());
  EXPECT_EQ(out["tight_peak"], out["full_peak"]);
  EXPECT_EQ(out["tight_bound"].get<double>(), 0);
  EXPECT_TRUE(out["tiny_over"].get<bool>());
  // What the weights, gradients and optimizer state take: more than the budget, less than
  // the step's high-water mark (activations come on top).
  EXPECT_GT(out["tiny_peak"].get<std::int64_t>(), 1);
  EXPECT_LT(out["tiny_peak"].get<std::int64_t>(), out["full_peak"].get<std::int64_t>());
  EXPECT_EQ(out["tiny_bound"].get<double>(), 0);
}

}  // namespace
}  // namespace tandem::sim::search
