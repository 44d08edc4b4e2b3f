// Tests of rank placement (topology/placement.hpp): ranks fill nodes in order, so the tp
// groups of the default layout order stay inside a node while pp groups cross nodes.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "schedules/layout.hpp"
#include "topology/placement.hpp"

namespace tandem {
namespace {

TEST(PlacementRanks, SixteenRanksEightPerNode) {
  const auto p = place_ranks(16, 8);
  ASSERT_EQ(p.size(), 16U);
  for (int r = 0; r < 16; ++r) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(p[i].rank, r);
    EXPECT_EQ(p[i].node, r < 8 ? 0 : 1);
    EXPECT_EQ(p[i].local_rank, r < 8 ? r : r - 8);
  }
  EXPECT_EQ(p[7].node, 0);
  EXPECT_EQ(p[7].local_rank, 7);
  EXPECT_EQ(p[8].node, 1);
  EXPECT_EQ(p[8].local_rank, 0);
}

TEST(PlacementRanks, PartialLastNode) {
  const auto p = place_ranks(10, 4);
  EXPECT_EQ(p[9].node, 2);
  EXPECT_EQ(p[9].local_rank, 1);
}

TEST(PlacementLayout, TensorParallelGroupsStayInsideANode) {
  // 16 ranks on two 8-GPU nodes, default order tp-cp-ep-dp-pp.
  const Layout l8 = make_layout({.world_size = 16, .tp = 8, .pp = 2});
  for (const auto& g : l8.of(GroupKind::tp)) EXPECT_TRUE(group_within_node(g, 8));
  for (const auto& g : l8.of(GroupKind::pp)) EXPECT_FALSE(group_within_node(g, 8));
  const Layout l4 = make_layout({.world_size = 16, .tp = 4, .pp = 2});  // dp 2
  for (const auto& g : l4.of(GroupKind::tp)) EXPECT_TRUE(group_within_node(g, 8));
  for (const auto& g : l4.of(GroupKind::tp_dp)) EXPECT_TRUE(group_within_node(g, 8));
  EXPECT_EQ(l4.of(GroupKind::pp).front(), (std::vector<int>{0, 8}));
  EXPECT_FALSE(group_within_node({0, 8}, 8));
}

TEST(PlacementLayout, EmptyAndSingletonGroups) {
  EXPECT_TRUE(group_within_node({}, 8));
  EXPECT_TRUE(group_within_node({13}, 8));
}

TEST(PlacementValidation, RejectsNonPositiveSizes) {
  try {
    place_ranks(0, 0);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.violations().size(), 2U);
    EXPECT_EQ(e.violations()[0].field, "world_size");
    EXPECT_EQ(e.violations()[0].value, "0");
    EXPECT_EQ(e.violations()[1].field, "gpus_per_node");
    EXPECT_EQ(e.violations()[1].value, "0");
  }
  EXPECT_THROW(place_ranks(8, -1), ConfigError);
  EXPECT_THROW(group_within_node({0, 1}, 0), ConfigError);
  EXPECT_THROW(group_within_node({-1}, 8), std::out_of_range);
}

}  // namespace
}  // namespace tandem
