// The NCCL model (sim/nccl_model.hpp) against collectives measured by others: OpenXLA's
// collective throughputs (topology/collective_reference_xla.csv, made by its
// collective_perf_table_gen: the median of an executable's device time) on one DGX H100,
// one DGX B200 and GB200 / GB300 NVL72 racks. No preset figure was fitted on these rows.
// Each row is a group of `group_size` GPUs (`groups` such groups at once), a buffer of
// `bytes` in nccl-tests' convention (all-gather: the gathered output; reduce-scatter: the
// scattered input) and its algorithm bandwidth, bytes over time. Compared at the largest
// buffer measured, where neither the executable's launch nor the slow rise of NCCL's
// bandwidth with the buffer size weighs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sim/nccl_model.hpp"
#include "tests/sim/reference_csv.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

struct Measured {
  std::string topology;
  std::string collective;
  int group_size = 0;
  double bytes = 0;
  double bytes_per_s = 0;
};

std::vector<Measured> xla_collectives() {
  std::vector<Measured> rows;
  for (const auto& f : reference_rows("topology/collective_reference_xla.csv", 7))
    rows.push_back({f[0], f[1], std::stoi(f[2]), std::stod(f[4]), std::stod(f[5])});
  return rows;
}

// The largest buffer measured of each (topology, collective, group size).
std::map<std::tuple<std::string, std::string, int>, Measured> largest(
    const std::vector<Measured>& rows) {
  std::map<std::tuple<std::string, std::string, int>, Measured> out;
  for (const auto& r : rows) {
    auto& m = out[{r.topology, r.collective, r.group_size}];
    if (r.bytes > m.bytes) m = r;
  }
  return out;
}

// The model's algorithm bandwidth for a group inside one NVLink domain (one NCCL node).
NcclChoice priced(const Topology& t, const Measured& m) {
  return nccl_choose(t.nccl, reference_collective(m.collective), m.bytes, {m.group_size, 1, 1});
}

TEST(CollectiveReferenceXla, TheTableHoldsEachPresetsMeasuredGroups) {
  const auto rows = xla_collectives();
  EXPECT_EQ(rows.size(), 2610u);
  std::map<std::string, int> per_preset;
  for (const auto& r : rows) {
    ++per_preset[r.topology];
    EXPECT_GT(r.bytes_per_s, 0) << r.topology << " " << r.collective << " " << r.bytes;
  }
  EXPECT_EQ(per_preset.at("dgx-h100"), 264);
  EXPECT_EQ(per_preset.at("dgx-b200"), 264);
  EXPECT_EQ(per_preset.at("gb200-nvl72"), 1041);
  EXPECT_EQ(per_preset.at("gb300-nvl72"), 1041);
}

// Every measured ring all-gather and reduce-scatter, 2 to 72 GPUs: groups smaller than 8 at
// their measured fraction of the 8-GPU ring's bus bandwidth (nccl.ring_group_fraction).
// Without those fractions the H100's 2-GPU reduce-scatter ran 1.80 times as fast as measured.
TEST(CollectiveReferenceXla, RingCollectivesOfEveryGroupAreWithinTwentyPercent) {
  int compared = 0;
  for (const auto& [key, m] : largest(xla_collectives())) {
    if (m.collective != "all_gather" && m.collective != "reduce_scatter") continue;
    const Topology t = load_topology(m.topology);
    const NcclChoice c = priced(t, m);
    EXPECT_EQ(c.algorithm, NcclAlgorithm::ring);
    const double ratio = (m.bytes / c.seconds) / m.bytes_per_s;
    EXPECT_GT(ratio, 0.8) << m.topology << " " << m.collective << " on " << m.group_size
                          << " GPUs, " << m.bytes << " B";
    EXPECT_LT(ratio, 1.2) << m.topology << " " << m.collective << " on " << m.group_size
                          << " GPUs, " << m.bytes << " B";
    ++compared;
  }
  EXPECT_EQ(compared, 44);  // 2, 4 and 8 GPUs on h100 and b200; 4 to 72 on each rack
}

// NVLink SHARP moves each GPU's buffer once each way whatever the group: on a rack the
// measured all-reduce runs at one algorithm bandwidth from 8 to 72 GPUs, and so does the
// model (nccl.nvls_bus_ranks), within 15 % of every group's. With a bus bandwidth held
// constant instead, the 8-GPU group would run 1.24 times as fast as the 72.
TEST(CollectiveReferenceXla, NvlsAllReduceRunsAtOneAlgorithmBandwidthWhateverTheGroup) {
  for (const std::string preset : {"gb200-nvl72", "gb300-nvl72"}) {
    const Topology t = load_topology(preset);
    double low = 1e300, high = 0, model_low = 1e300, model_high = 0;
    for (const auto& [key, m] : largest(xla_collectives())) {
      if (m.topology != preset || m.collective != "all_reduce" || m.group_size < 8) continue;
      low = std::min(low, m.bytes_per_s);
      high = std::max(high, m.bytes_per_s);
      const NcclChoice c = priced(t, m);
      EXPECT_EQ(c.algorithm, NcclAlgorithm::nvls) << preset << " " << m.group_size;
      const double model = m.bytes / c.seconds;
      model_low = std::min(model_low, model);
      model_high = std::max(model_high, model);
      EXPECT_NEAR(model / m.bytes_per_s, 1.0, 0.15) << preset << " on " << m.group_size;
    }
    EXPECT_LT(high / low, 1.1) << preset << ": measured";
    EXPECT_LT(model_high / model_low, 1.01) << preset << ": model";
  }
}

}  // namespace
}  // namespace tandem::sim
