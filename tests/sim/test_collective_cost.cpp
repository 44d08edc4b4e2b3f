// Tests of the closed-form collective times (sim/collective_cost.hpp): hand-computed
// figures for an 8-GPU NVSwitch node, and the nccl-tests identity that algorithm bandwidth
// times the bus factor gives back the link bandwidth when latency vanishes.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sim/collective_cost.hpp"

namespace tandem::sim {
namespace {

const LinkSpec kNvswitch{.bandwidth = BytesPerSecond(300e9), .latency = Seconds(1e-6)};

TEST(CollectiveCost, HandComputedOnEightGpus) {
  const Bytes gib(1LL << 30);
  const double b = 1073741824.0;
  // 2 · 7/8 · 1 GiB / 300 GB/s + 14 µs = 6.2775 ms
  EXPECT_NEAR(ring_all_reduce_time(gib, 8, kNvswitch).value, 1.75 * b / 300e9 + 14e-6, 1e-15);
  EXPECT_NEAR(ring_all_gather_time(gib, 8, kNvswitch).value, 0.875 * b / 300e9 + 7e-6, 1e-15);
  EXPECT_NEAR(ring_reduce_scatter_time(gib, 8, kNvswitch).value, 0.875 * b / 300e9 + 7e-6, 1e-15);
  EXPECT_NEAR(broadcast_time(gib, 8, kNvswitch).value, b / 300e9 + 7e-6, 1e-15);
  EXPECT_NEAR(all_to_all_time(gib, 8, kNvswitch).value, 0.875 * b / 300e9 + 1e-6, 1e-15);
  EXPECT_NEAR(p2p_time(gib, kNvswitch).value, b / 300e9 + 1e-6, 1e-15);
  EXPECT_NEAR(ring_all_reduce_time(gib, 8, kNvswitch).value, 6.2775e-3, 1e-7);
}

TEST(CollectiveCost, BusBandwidthIsTheLinkBandwidthWithoutLatency) {
  const LinkSpec link{.bandwidth = BytesPerSecond(25e9), .latency = Seconds(0)};
  const Bytes bytes(1 << 28);
  for (auto c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                 Collective::broadcast, Collective::all_to_all})
    for (int n : {2, 3, 8, 64, 1024}) {
      const double algbw =
          static_cast<double>(bytes.value) / collective_time(c, bytes, n, link).value;
      EXPECT_NEAR(algbw * bus_bandwidth_factor(c, n), 25e9, 1e-3)
          << collective_name(c) << " n=" << n;
    }
}

TEST(CollectiveCost, OneRankCostsNothingAndBadInputThrows) {
  EXPECT_EQ(ring_all_reduce_time(Bytes(1 << 20), 1, kNvswitch).value, 0);
  EXPECT_EQ(bus_bandwidth_factor(Collective::all_reduce, 1), 0);
  EXPECT_THROW(ring_all_reduce_time(Bytes(1), 0, kNvswitch), std::invalid_argument);
  EXPECT_THROW(ring_all_gather_time(Bytes(-1), 2, kNvswitch), std::invalid_argument);
  EXPECT_THROW(p2p_time(Bytes(1), LinkSpec{}), std::invalid_argument);
  EXPECT_EQ(collective_name(Collective::reduce_scatter), "reduce_scatter");
}

}  // namespace
}  // namespace tandem::sim
