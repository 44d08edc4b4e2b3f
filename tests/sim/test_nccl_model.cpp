// The NCCL tuner model (sim/nccl_model.hpp) against hand derivations from NCCL's own
// formulas (NVIDIA/nccl src/graph/tuning.cc) and the presets' constants, and against the
// protocol switch points NCCL logs on real systems.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sim/nccl_model.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// The A100 preset's tuner alone: its measured all-reduce table taken out (the tests of
// the table are at the end).
const NcclSpec& a100() {
  static const NcclSpec spec = [] {
    NcclSpec s = load_topology("dgx-a100-80g").nccl;
    s.measured_all_reduce_busbw.clear();
    return s;
  }();
  return spec;
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

// A measured table for groups of 2 in a node: 1 MiB at 20 GB/s bus bandwidth, 4 MiB at 40
// (for 2 GPUs the bus factor 2(n−1)/n is 1, so the times are 52.4 us and 104.9 us).
NcclSpec with_table() {
  NcclSpec s = a100();
  s.measured_all_reduce_busbw[2] = {{1 << 20, 20e9}, {4 << 20, 40e9}};
  return s;
}

TEST(NcclModel, AMeasuredTableGivesTheAllReduceTimeInItsRangeLinearBetweenRows) {
  const NcclSpec s = with_table();
  const double mib = 1 << 20;
  const double t1 = mib / 20e9, t4 = 4 * mib / 40e9;
  const NcclChoice at1 = nccl_choose(s, Collective::all_reduce, mib, {2, 1, 8});
  EXPECT_NEAR(at1.seconds, t1, 1e-12);
  EXPECT_TRUE(at1.measured);
  EXPECT_NE(nccl_choice_label(at1).find(" measured"), std::string::npos);
  // 2 MiB is a third of the way from 1 to 4 MiB.
  EXPECT_NEAR(nccl_choose(s, Collective::all_reduce, 2 * mib, {2, 1, 8}).seconds,
              t1 + (t4 - t1) / 3, 1e-12);
  EXPECT_NEAR(nccl_choose(s, Collective::all_reduce, 4 * mib, {2, 1, 8}).seconds, t4, 1e-12);
  EXPECT_NEAR(measured_all_reduce_seconds(s.measured_all_reduce_busbw.at(2), 2, 2 * mib),
              t1 + (t4 - t1) / 3, 1e-12);
}

TEST(NcclModel, BeyondTheTableTheAchievedBandwidthOfItsEndHolds) {
  const NcclSpec s = with_table();
  const double mib = 1 << 20;
  // At 4 MiB the tuner's latency L leaves 104.9 us − L for the bytes: that bandwidth
  // carries 16 MiB, on top of the tuner's latency at 16 MiB.
  const double l4 = nccl_candidates(s, Collective::all_reduce, 4 * mib, {2, 1, 8}).front().latency;
  const double bus = 4 * mib / (4 * mib / 40e9 - l4);
  const double l16 =
      nccl_candidates(s, Collective::all_reduce, 16 * mib, {2, 1, 8}).front().latency;
  EXPECT_NEAR(nccl_choose(s, Collective::all_reduce, 16 * mib, {2, 1, 8}).seconds,
              l16 + 16 * mib / bus, 1e-12);
  // An all-gather of 2 MiB (output) on the same pair: its own latency, the bus bandwidth
  // the all-reduce table shows at 2 MiB, (n−1) = 1 step, so algbw = 2 · bus.
  const double l2 = nccl_candidates(s, Collective::all_reduce, 2 * mib, {2, 1, 8}).front().latency;
  const double t2 = mib / 20e9 + (4 * mib / 40e9 - mib / 20e9) / 3;
  const double bus2 = 2 * mib / (t2 - l2);
  const NcclChoice ag = nccl_choose(s, Collective::all_gather, 2 * mib, {2, 1, 8});
  const double lag = nccl_candidates(s, Collective::all_gather, 2 * mib, {2, 1, 8}).front().latency;
  EXPECT_NEAR(ag.seconds, lag + 2 * mib / (2 * bus2), 1e-12);
}

TEST(NcclModel, TheTableIsOnlyForItsGroupSizeInOneNodeAndRingCollectives) {
  const NcclSpec s = with_table();
  const double mib = 1 << 20;
  for (const NcclShape shape : {NcclShape{4, 1, 8}, NcclShape{2, 2, 1}}) {
    const NcclChoice c = nccl_choose(s, Collective::all_reduce, 2 * mib, shape);
    EXPECT_FALSE(c.measured) << shape.ranks << " ranks on " << shape.nodes << " nodes";
    EXPECT_DOUBLE_EQ(c.seconds,
                     nccl_candidates(s, Collective::all_reduce, 2 * mib, shape).front().seconds);
  }
  EXPECT_FALSE(nccl_choose(s, Collective::all_to_all, 2 * mib, {2, 1, 8}).measured);
  EXPECT_FALSE(nccl_choose(s, Collective::broadcast, 2 * mib, {2, 1, 8}).measured);
}

TEST(NcclModel, TheA100PresetCarriesVtrainsMeasuredDgxA100Table) {
  const Topology t = load_topology("dgx-a100-80g");
  for (int n = 2; n <= 8; ++n) EXPECT_EQ(t.nccl.measured_all_reduce_busbw.count(n), 1u) << n;
  // nccl-tests all_reduce_perf on 8 GPUs of one DGX A100, 64 MiB: 202.61 GB/s busbw
  // (vTrain trace/a100/AR_GPU8_1M_1024M_LUT, in-place).
  const double bytes = 64.0 * (1 << 20);
  const NcclChoice c = nccl_choose(t.nccl, Collective::all_reduce, bytes, {8, 1, 8});
  EXPECT_NEAR(c.bus_bandwidth, 202.61e9, 1e6);
}

}  // namespace
}  // namespace tandem::sim
