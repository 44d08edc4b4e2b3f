// The NCCL tuner model (sim/nccl_model.hpp) against hand derivations from NCCL's own
// formulas (NVIDIA/nccl src/graph/tuning.cc) and the presets' constants, and against the
// protocol switch points NCCL logs on real systems.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sim/nccl_model.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

const NcclSpec& a100() {
  static const Topology t = load_topology("dgx-a100-80g");
  return t.nccl;
}
const NcclSpec& h100() {
  static const Topology t = load_topology("dgx-h100");
  return t.nccl;
}

// NCCL's view of a group: 8 GPUs per node, one NIC each (nic = local GPU) or one per two.
TEST(NcclModel, GroupShapeCountsNodesAndTheFewestNicsAnyNodeSendsThrough) {
  const auto node = [](int r) { return r / 8; };
  const auto own_nic = [](int r) { return r % 8; };
  const auto shared_nic = [](int r) { return r % 8 / 2; };
  const NcclShape a = nccl_shape_of({0, 1, 8, 9}, node, own_nic);
  EXPECT_EQ(a.ranks, 4);
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.nics, 2);
  // GPUs 0 and 1 share NIC 0; node 1's members 8, 10, 12 use NICs 0, 1, 2: the fewest is 1.
  const NcclShape b = nccl_shape_of({0, 1, 8, 10, 12}, node, shared_nic);
  EXPECT_EQ(b.ranks, 5);
  EXPECT_EQ(b.nodes, 2);
  EXPECT_EQ(b.nics, 1);
  EXPECT_EQ(nccl_shape_of({3}, node, own_nic).nics, 1);
}

TEST(NcclModel, PresetsCarryTheTunerConstants) {
  // tuning.cc ncclTunerConstantsDefaults, topo.h SM80/SM90_NVLINK_BW.
  EXPECT_TRUE(a100().enabled);
  EXPECT_DOUBLE_EQ(a100().nvlink_bus.value, 240e9);  // 12 NVLinks x 20 GB/s
  EXPECT_NEAR(h100().nvlink_bus.value, 18 * 20.6e9, 1e3);
  EXPECT_NEAR(a100().ring_base_latency.ll, 6.6e-6, 1e-12);
  EXPECT_NEAR(a100().ring_nvlink_latency.simple, 3.4e-6, 1e-12);
  EXPECT_NEAR(a100().tree_net_latency.ll128, 8.5e-6, 1e-12);
  EXPECT_FALSE(load_topology("cpu-host").nccl.enabled);
}

TEST(NcclModel, LargeAllReduceInANodeIsARingOfSimpleAtTheNvlinkBusBandwidth) {
  const double bytes = 64.0 * (1 << 20);
  const NcclChoice c = nccl_choose(a100(), Collective::all_reduce, bytes, {8, 1, 8});
  EXPECT_EQ(c.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(c.protocol, NcclProtocol::simple);
  // base 8.4 us + 2(n−1) = 14 NVLink steps of 3.4 us; 2(n−1)/n of the bytes at 240 GB/s.
  EXPECT_NEAR(c.latency, 8.4e-6 + 14 * 3.4e-6, 1e-12);
  EXPECT_NEAR(c.seconds, 8.4e-6 + 14 * 3.4e-6 + 1.75 * bytes / 240e9, 1e-12);
}

TEST(NcclModel, SmallAllReduceInANodeUsesLowLatencyProtocol) {
  const NcclChoice c = nccl_choose(a100(), Collective::all_reduce, 1024, {8, 1, 8});
  EXPECT_EQ(c.protocol, NcclProtocol::ll);
  EXPECT_EQ(c.algorithm, NcclAlgorithm::ring);
  // Ring LL: 6.6 us + 14 steps of 0.6 us; the LL bus bandwidth is min(87.7, 240 / 2).
  EXPECT_NEAR(c.seconds, 6.6e-6 + 14 * 0.6e-6 + 1024 * 14.0 / 8 / 87.7e9, 1e-12);
}

TEST(NcclModel, H100SwitchesFromRingLlToNvlsBetweenOneAndTwoMebibytes) {
  // NCCL on one H100 node logs Ring/LL from 8 B to 1 MB and NVLS/Simple from 2 MB on
  // (github.com/NVIDIA/nccl-tests/issues/309).
  for (double kib : {1.0, 64.0, 1024.0}) {
    const NcclChoice c = nccl_choose(h100(), Collective::all_reduce, kib * 1024, {8, 1, 8});
    EXPECT_EQ(c.algorithm, NcclAlgorithm::ring) << kib << " KiB";
    EXPECT_EQ(c.protocol, NcclProtocol::ll) << kib << " KiB";
  }
  for (double mib : {2.0, 64.0, 8192.0}) {
    const NcclChoice c = nccl_choose(h100(), Collective::all_reduce, mib * (1 << 20), {8, 1, 8});
    EXPECT_EQ(c.algorithm, NcclAlgorithm::nvls) << mib << " MiB";
  }
}

TEST(NcclModel, ChannelsSpreadACrossNodeRingOverTheNics) {
  const double bytes = 8.0 * (1 << 30);
  // 16 GPUs on 2 DGX A100 nodes: 8 channels over 8 NICs at 24 GB/s each.
  const NcclChoice wide = nccl_choose(a100(), Collective::all_reduce, bytes, {16, 2, 8});
  EXPECT_EQ(wide.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(wide.channels, 8);
  EXPECT_NEAR(wide.bus_bandwidth, 192e9, 0.01 * 192e9);
  // One GPU per node: one NIC carries the whole ring.
  const NcclChoice narrow = nccl_choose(a100(), Collective::all_reduce, bytes, {2, 2, 1});
  EXPECT_NEAR(narrow.bus_bandwidth, 24e9, 0.01 * 24e9);
}

TEST(NcclModel, SmallAllReduceOverManyNodesIsATree) {
  // A ring's latency grows with 2(n−1) steps; a tree's with log2(nodes).
  const NcclChoice c = nccl_choose(a100(), Collective::all_reduce, 64 * 1024, {128, 16, 8});
  EXPECT_EQ(c.algorithm, NcclAlgorithm::tree);
  // Multi-node ring latency on 128 ranks is far above the tree's.
  const auto all = nccl_candidates(a100(), Collective::all_reduce, 64 * 1024, {128, 16, 8});
  double ring_ll = 0;
  for (const auto& x : all)
    if (x.algorithm == NcclAlgorithm::ring && x.protocol == NcclProtocol::ll) ring_ll = x.latency;
  // 6.6 + (254 − 30) · max(0.6, 2 µs net overhead) + 30 · 2.7 µs
  EXPECT_NEAR(ring_ll, 6.6e-6 + 224 * 2e-6 + 30 * 2.7e-6, 1e-12);
  EXPECT_GT(ring_ll, 3 * c.latency);
}

TEST(NcclModel, AllGatherHasNoTreeAndOneRankCostsNothing) {
  for (const auto& c : nccl_candidates(a100(), Collective::all_gather, 1 << 20, {8, 1, 8}))
    EXPECT_EQ(c.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(nccl_choose(a100(), Collective::all_reduce, 1 << 20, {1, 1, 1}).seconds, 0);
}

TEST(NcclModel, BadInputThrows) {
  EXPECT_THROW(nccl_choose(NcclSpec{}, Collective::all_reduce, 1, {8, 1, 8}),
               std::invalid_argument);
  EXPECT_THROW(nccl_choose(a100(), Collective::all_reduce, 1, {0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(nccl_choose(a100(), Collective::all_reduce, 1, {4, 8, 1}), std::invalid_argument);
  EXPECT_THROW(nccl_choose(a100(), Collective::all_reduce, -1, {8, 1, 8}), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::sim
