// Tests of rank placement (topology/placement.hpp): ranks fill nodes in order, so the tp
// groups of the default layout order stay inside a node while pp groups cross nodes; nodes
// fill NVLink domains in order (GB200 NVL72: 18 trays of 4), so a tp group may span trays
// and still share a domain.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "schedules/layout.hpp"
#include "topology/placement.hpp"
#include "topology/topology.hpp"

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

// The nodes a group spans, each counted once (sim/stragglers.hpp's n).
TEST(PlacementLayout, NodesSpannedCountsEachNodeOnce) {
  EXPECT_EQ(nodes_spanned({0, 1, 2, 3, 4, 5, 6, 7}, 8), 1);
  EXPECT_EQ(nodes_spanned({0, 8, 16, 24}, 8), 4);
  EXPECT_EQ(nodes_spanned({0, 4, 8, 12, 16, 20, 24, 28}, 8), 4);  // tp 4: two a node
  EXPECT_EQ(nodes_spanned({}, 8), 0);
  EXPECT_THROW(nodes_spanned({0, 1}, 0), ConfigError);
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

// A GB200 NVL72-shaped topology by hand: 4 GPUs and 4 NICs per tray, 72 GPUs per domain.
Topology nvl72() {
  Topology t;
  t.node.gpus_per_node = 4;
  t.node.interconnect = "nvswitch";
  t.nvlink_domain.gpus = 72;
  t.fabric.nics_per_node = 4;
  return t;
}

TEST(PlacementDomains, TraysFillAnNvlinkDomainInOrder) {
  const auto p = place_ranks(144, nvl72());
  ASSERT_EQ(p.size(), 144U);
  // Brute force: rank r's tray is the r-th group of 4, its domain the r-th group of 72.
  for (int r = 0; r < 144; ++r) {
    const auto& at = p[static_cast<std::size_t>(r)];
    EXPECT_EQ(at.node, r / 4) << r;
    EXPECT_EQ(at.local_rank, r % 4) << r;
    EXPECT_EQ(at.nvlink_domain, r < 72 ? 0 : 1) << r;
  }
  EXPECT_EQ(p[71].node, 17);  // the last tray of the first rack
  EXPECT_EQ(p[72].node, 18);
  // Without a domain, a domain is the node.
  for (const auto& at : place_ranks(16, 8)) EXPECT_EQ(at.nvlink_domain, at.node);
}

TEST(PlacementDomains, TensorParallelGroupsSpanTraysInsideADomain) {
  const Topology t = nvl72();
  // 144 ranks, tp 8, pp 2 (dp 9): each tp group spans two trays of one rack.
  const Layout l = make_layout({.world_size = 144, .tp = 8, .pp = 2});
  int spanning_trays = 0;
  for (const auto& g : l.of(GroupKind::tp)) {
    EXPECT_TRUE(group_within_nvlink_domain(g, t));
    spanning_trays += group_within_node(g, 4) ? 0 : 1;
  }
  EXPECT_EQ(spanning_trays, 18);  // every one of the 18 tp groups covers two trays
  // The pp groups pair rank r with r + 72: two racks, over the NICs.
  for (const auto& g : l.of(GroupKind::pp)) EXPECT_FALSE(group_within_nvlink_domain(g, t));
  EXPECT_TRUE(group_within_nvlink_domain({0, 71}, t));
  EXPECT_FALSE(group_within_nvlink_domain({68, 72}, t));
  // Ranks 68-75: a tp 8 group of a world where tp groups straddle racks.
  EXPECT_FALSE(group_within_nvlink_domain({68, 69, 70, 71, 72, 73, 74, 75}, t));
}

TEST(PlacementDomains, NicsAreNumberedAcrossTheDomainsTrays) {
  const Topology t = nvl72();
  // Rank 5: tray 1 of rack 0, GPU 1 → NIC 1·4 + 1. Rank 77: tray 1 of rack 1, GPU 1 → the same.
  EXPECT_EQ(nic_in_nvlink_domain(t, 5), 5);
  EXPECT_EQ(nic_in_nvlink_domain(t, 77), 5);
  EXPECT_EQ(nic_in_nvlink_domain(t, 71), 71);
  // Without a domain: the NIC within the node (DGX: 8 GPUs, 8 NICs → GPU g uses NIC g).
  Topology dgx;
  dgx.node.gpus_per_node = 8;
  dgx.fabric.nics_per_node = 8;
  EXPECT_EQ(nic_in_nvlink_domain(dgx, 13), 5);
  dgx.fabric.nics_per_node = 0;
  EXPECT_EQ(nic_in_nvlink_domain(dgx, 13), 0);
}

TEST(PlacementDomains, ADomainMustHoldWholeNodes) {
  try {
    place_ranks(8, 4, 6);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.violations().size(), 1U);
    EXPECT_EQ(e.violations()[0].field, "gpus_per_domain");
    EXPECT_EQ(e.violations()[0].value, "6");
    EXPECT_EQ(e.violations()[0].rule,
              "must be 0 (one node) or a multiple of gpus_per_node (4): a domain holds whole "
              "nodes");
  }
  EXPECT_THROW(place_ranks(8, 4, -4), ConfigError);
  EXPECT_THROW(group_within_nvlink_domain({-1}, nvl72()), std::out_of_range);
}

}  // namespace
}  // namespace tandem
