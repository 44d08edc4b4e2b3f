// The NCCL model run through the simulator (sim/nccl_tests.hpp, SimCommunicator on a
// SimGrid platform) against published nccl-tests figures
// (topology/nccl_tests_reference.csv, one source URL per row): simulated bus bandwidth
// within 15 % of each. Also: the flows of a cross-node group alone take the tuner's time,
// and two groups sharing a NIC take twice as long. SimGrid's engine is one per process,
// so each simulation runs in a forked child.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <string>
#include <vector>

#include "sim/nccl_model.hpp"
#include "sim/nccl_tests.hpp"
#include "sim/platform.hpp"
#include "sim/sim_communicator.hpp"
#include "sim/sim_device.hpp"
#include "sim/simgrid_config.hpp"
#include "tests/sim/reference_csv.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

using testing::in_child;

Topology with_nics(const std::string& preset, int nics) {
  auto j = to_json(load_topology(preset));
  j["fabric"]["nics_per_node"] = nics;
  return parse_topology(j, preset + " with " + std::to_string(nics) + " NICs");
}

struct Reference {
  std::string topology;
  int nics = 0;
  std::string collective;
  int gpus = 0;
  int nodes = 0;
  std::int64_t bytes = 0;
  double busbw_gbs = 0;
  std::string url;
};

std::vector<Reference> references() {
  std::vector<Reference> rows;
  for (const auto& f : reference_rows("topology/nccl_tests_reference.csv", 9))
    rows.push_back({f[1], std::stoi(f[2]), f[3], std::stoi(f[4]), std::stoi(f[5]), std::stoll(f[6]),
                    std::stod(f[7]), f[8]});
  return rows;
}

TEST(NcclTests, SimulatedBusBandwidthIsWithinFifteenPercentOfPublishedFigures) {
  const auto rows = references();
  ASSERT_GE(rows.size(), 8u);
  for (const auto& ref : rows) {
    const auto j = in_child([&] {
      const Topology t = with_nics(ref.topology, ref.nics);
      NcclTestOptions o;
      o.collective = reference_collective(ref.collective);
      o.gpus = ref.gpus;
      o.min_bytes = o.max_bytes = ref.bytes;
      const auto r = run_nccl_tests(t, o);
      return nlohmann::json{{"busbw", r.at(0).busbw / 1e9}, {"choice", r.at(0).choice}};
    });
    ASSERT_FALSE(j.contains("error")) << j.dump();
    const double got = j.at("busbw");
    EXPECT_NEAR(got, ref.busbw_gbs, 0.15 * ref.busbw_gbs)
        << ref.collective << " on " << ref.gpus << " GPUs of " << ref.topology << " (" << ref.nics
        << " NICs), " << ref.bytes << " B, " << j.at("choice").get<std::string>()
        << ", published in " << ref.url;
  }
}

TEST(NcclTests, CrossNodeFlowsAloneTakeTheTunersTime) {
  // 16 GPUs over two nodes: the flows run on SimGrid's links; alone, they must take what
  // the tuner says, at every size (latency-bound LL to bandwidth-bound Simple).
  const Topology t = load_topology("dgx-a100-80g");
  const auto j = in_child([&] {
    NcclTestOptions o;
    o.gpus = 16;
    o.min_bytes = 1024;
    o.max_bytes = 1LL << 30;
    o.factor = 32;
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : run_nccl_tests(t, o)) out.push_back({r.bytes, r.seconds});
    return out;
  });
  ASSERT_FALSE(j.is_object()) << j.dump();
  ASSERT_EQ(j.size(), 5u);
  for (const auto& row : j) {
    const double bytes = row[0].get<double>(), seconds = row[1].get<double>();
    const double expected = nccl_choose(t.nccl, Collective::all_reduce, bytes, {16, 2, 8}).seconds;
    EXPECT_NEAR(seconds, expected, 0.01 * expected) << bytes << " B";
  }
}

// Two groups at once, each timed from its first member.
double two_groups(const Topology& t, int world, std::vector<int> a, std::vector<int> b, bool both,
                  std::int64_t elements) {
  const auto j = in_child([&] {
    int argc = 1;
    char name[] = "test";
    char* argv[] = {name, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    configure_network_model(engine);
    const Platform p = build_platform(t, world);
    std::vector<RankCoordinates> coords(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) coords[static_cast<std::size_t>(r)].dp = r;
    ParallelSizes sizes;
    sizes.dp = world;
    SimWorld w(p.hosts, coords, sizes, SimMode::full);
    std::vector<std::unique_ptr<SimCommunicator>> comms;
    std::vector<std::unique_ptr<SimDevice>> devices;
    double finished = 0;
    std::vector<std::vector<int>> groups = {a};
    if (both) groups.push_back(b);
    for (const auto& g : groups)
      for (int m : g) {
        comms.push_back(
            std::make_unique<SimCommunicator>(w, g, m, "dp", "g" + std::to_string(g[0])));
        devices.push_back(std::make_unique<SimDevice>([](const OpDesc&) { return 0.0; }));
        auto* c = comms.back().get();
        auto* d = devices.back().get();
        const bool timed = m == a.front();
        simgrid::s4u::Actor::create("r" + std::to_string(m), p.hosts[static_cast<std::size_t>(m)],
                                    [c, d, elements, timed, &finished] {
                                      Tensor x = d->allocate(Shape{elements}, DType::fp32);
                                      auto work =
                                          c->all_reduce(d->default_stream(), x, ReduceOp::sum);
                                      work->wait();
                                      if (timed) finished = sim_now();
                                    });
      }
    engine.run();
    return nlohmann::json{{"seconds", finished}};
  });
  if (j.contains("error")) throw std::runtime_error(j.dump());
  return j.at("seconds").get<double>();
}

TEST(NcclTests, ConcurrentGroupsSharingANicSlowEachOtherDown) {
  // One NIC per node: the dp rings {0, 8} and {1, 9} both cross it.
  const Topology t = with_nics("dgx-a100-80g", 1);
  const std::int64_t elements = 64 << 20;  // 256 MiB: bandwidth-bound
  const double alone = two_groups(t, 16, {0, 8}, {1, 9}, false, elements);
  const double shared = two_groups(t, 16, {0, 8}, {1, 9}, true, elements);
  EXPECT_NEAR(shared, 2 * alone, 0.05 * 2 * alone);
  // With a NIC per GPU they do not meet.
  const Topology roomy = load_topology("dgx-a100-80g");
  const double apart = two_groups(roomy, 16, {0, 8}, {1, 9}, true, elements);
  EXPECT_NEAR(apart, alone, 0.02 * alone);
}

}  // namespace
}  // namespace tandem::sim
