// An NVLink domain larger than a host (GB200 NVL72: 18 trays of 4 GPUs on one NVLink
// switch fabric) in the simulator: routes between trays of one rack cross GPU links only
// and the NICs carry only traffic between racks (sim/platform.hpp); NCCL's tuner sees the
// rack as one node, so a tp 8 group over two trays gets NVLink SHARP at NVLink bandwidth
// and one over two racks a ring through the NICs (sim/nccl_model.hpp); nccl-tests on 72 and
// 144 GPUs. Every expected figure is worked out by hand below from the preset's numbers
// (topology/presets/gb200-nvl72.json). SimGrid's engine is one per process: each
// simulation runs in a forked child.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "sim/nccl_model.hpp"
#include "sim/nccl_tests.hpp"
#include "sim/platform.hpp"
#include "sim/simgrid_config.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/placement.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// gb200-nvl72's figures, GB/s and µs as in the preset.
constexpr double kNvlinkBus = 721.8;  // nccl.nvlink_bus_gbs
constexpr double kNvlsBus = 840.7;    // nccl.nvls_bus_gbs
constexpr double kNicBus = 47;        // nccl.nic_bus_gbs
constexpr double kGpuLink = 900;      // node.gpu_link_gbs
constexpr double kNic = 50;           // fabric.nic_gbs
constexpr double kGpuLatency = 1, kNicLatency = 2;
constexpr double kGiga = 1e9, kMicro = 1e-6;

// The sorted link names a message from `src` to `dst` crosses on the platform of `world`
// ranks, and the time a lone message of `bytes` takes, from a child with its own engine.
struct Route {
  std::vector<std::string> links;
  double seconds = 0;
};
Route route(const Topology& t, int world, int src, int dst, double bytes) {
  const nlohmann::json out = testing::in_child([&] {
    int argc = 2;
    char name[] = "test_nvlink_domain";
    char quiet[] = "--log=root.thres:critical";
    char* argv[] = {name, quiet, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    configure_network_model(engine);
    const Platform p = build_platform(t, world);
    std::vector<simgrid::s4u::Link*> links;
    double latency = 0;
    p.hosts[static_cast<std::size_t>(src)]->route_to(p.hosts[static_cast<std::size_t>(dst)], links,
                                                     &latency);
    std::vector<std::string> names;
    for (auto* l : links) names.push_back(l->get_name());
    std::sort(names.begin(), names.end());
    auto arrival = std::make_shared<double>(-1);
    static int payload = 0;
    auto* box = simgrid::s4u::Mailbox::by_name("m");
    simgrid::s4u::Actor::create("send", p.hosts[static_cast<std::size_t>(src)], [box, bytes] {
      box->put(&payload, static_cast<std::uint64_t>(bytes));
    });
    simgrid::s4u::Actor::create("recv", p.hosts[static_cast<std::size_t>(dst)], [box, arrival] {
      box->get<int>();
      *arrival = simgrid::s4u::Engine::get_clock();
    });
    engine.run();
    return nlohmann::json{{"links", names},
                          {"seconds", *arrival},
                          {"domains", p.nvlink_domains},
                          {"nodes", p.nodes},
                          {"nics", p.nic_links.size()}};
  });
  EXPECT_FALSE(out.contains("error")) << out.dump();
  if (out.contains("error")) return {};
  EXPECT_EQ(out.at("domains"), world > 72 ? 2 : 1);
  EXPECT_EQ(out.at("nodes"), (world + 3) / 4);
  // NICs join racks only: none on the platform of one rack.
  EXPECT_EQ(out.at("nics"), world > 72 ? 4 * ((world + 3) / 4) : 0);
  return {out.at("links").get<std::vector<std::string>>(), out.at("seconds").get<double>()};
}

using Names = std::vector<std::string>;

TEST(NvlinkDomainPlatform, TraysOfOneRackTalkOverNvlinkAndRacksOverNics) {
  const Topology t = load_topology("gb200-nvl72");
  const double bytes = 9e8;
  // Rank 0 (tray 0) to rank 7 (tray 1): both GPU links, 1 µs + 0.9 GB at 900 GB/s = 1.001 ms.
  const Route trays = route(t, 144, 0, 7, bytes);
  EXPECT_EQ(trays.links, (Names{"gpu-0_UP", "gpu-7_DOWN"}));
  EXPECT_NEAR(trays.seconds, kGpuLatency * kMicro + bytes / (kGpuLink * kGiga), 1e-9);
  // Rank 0 to 71, the rack's last tray: still NVLink.
  EXPECT_EQ(route(t, 144, 0, 71, bytes).links, (Names{"gpu-0_UP", "gpu-71_DOWN"}));
  // Rank 5 (tray 1, GPU 1) to rank 77 (rack 1, tray 19, GPU 1): its tray's NIC 1 on both
  // sides, the same rail; 1 + 2 µs + 0.9 GB at 50 GB/s = 18.003 ms. The spine is in the route
  // because it is not oversubscribed, so the rails are built as a fat tree (sim/platform.hpp:
  // there it never binds and adds no latency).
  const Route racks = route(t, 144, 5, 77, bytes);
  EXPECT_EQ(racks.links,
            (Names{"gpu-5_UP", "gpu-77_DOWN", "nic-1-1_UP", "nic-19-1_DOWN", "spine"}));
  EXPECT_NEAR(racks.seconds, (kGpuLatency + kNicLatency) * kMicro + bytes / (kNic * kGiga), 1e-9);
  // One rack alone has no NICs on its platform (checked inside route()).
  EXPECT_EQ(route(t, 72, 3, 68, bytes).links, (Names{"gpu-3_UP", "gpu-68_DOWN"}));
}

// NCCL's view of a group as the simulator's communicator builds it (sim/platform.cpp): the
// node is the rank's NVLink domain, the NIC numbered across the domain's trays.
NcclShape shape_of(const Topology& t, const std::vector<int>& members) {
  const auto p = place_ranks(144, t);
  return nccl_shape_of(
      members, [&](int r) { return p.at(static_cast<std::size_t>(r)).nvlink_domain; },
      [&](int r) { return nic_in_nvlink_domain(t, r); });
}

TEST(NvlinkDomainCost, TpEightOverTwoTraysIsNvlinkOverTwoRacksIsNot) {
  const Topology t = load_topology("gb200-nvl72");
  const double s = 256.0 * (1 << 20);  // a 256 MiB all-reduce
  // Ranks 0-7: trays 0 and 1 of rack 0. One NCCL node: NVLink SHARP at the algorithm
  // bandwidth of the 72 GPUs its bus figure was measured on (nvls_bus_ranks), bus · 72 / 142
  // = 426.3 GB/s, whatever the group; latency 25 µs: 25 µs + 629.7 µs.
  const NcclShape in_rack = shape_of(t, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(in_rack.nodes, 1);
  const NcclChoice nvls = nccl_choose(t.nccl, Collective::all_reduce, s, in_rack);
  EXPECT_EQ(nvls.algorithm, NcclAlgorithm::nvls);
  const double nvls_seconds = 25 * kMicro + s * 142 / (72 * kNvlsBus * kGiga);
  EXPECT_NEAR(nvls.seconds, nvls_seconds, 1e-12);
  // Without NVLS the ring over NVLink: bus 721.8 GB/s, latency 8.4 + 14 steps · 3.4 µs.
  const auto all = nccl_candidates(t.nccl, Collective::all_reduce, s, in_rack);
  const auto ring = std::find_if(all.begin(), all.end(), [](const NcclChoice& c) {
    return c.algorithm == NcclAlgorithm::ring && c.protocol == NcclProtocol::simple;
  });
  ASSERT_NE(ring, all.end());
  EXPECT_NEAR(ring->seconds, (8.4 + 14 * 3.4) * kMicro + s * 14 / (8 * kNvlinkBus * kGiga), 1e-12);

  // Ranks 68-75: tray 17 of rack 0 and tray 18 of rack 1. Two NCCL nodes, each using its
  // tray's 4 NICs: ring bus min(721.8, 4 · 47) = 188 GB/s; latency 8.4 + 12 NVLink steps ·
  // max(3.4, 3 · 1 net overhead) + 2 network steps · 14 µs = 77.2 µs, · 1.4 (multi-node ring
  // plateau) = 108.08 µs; 256 MiB · 14/8 at 188 GB/s = 2498.7 µs.
  const NcclShape two_racks = shape_of(t, {68, 69, 70, 71, 72, 73, 74, 75});
  EXPECT_EQ(two_racks.nodes, 2);
  EXPECT_EQ(two_racks.nics, 4);
  const NcclChoice across = nccl_choose(t.nccl, Collective::all_reduce, s, two_racks);
  EXPECT_EQ(across.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(across.protocol, NcclProtocol::simple);
  const double across_seconds =
      1.4 * (8.4 + 12 * 3.4 + 2 * 14) * kMicro + s * 14 / (8 * 4 * kNicBus * kGiga);
  EXPECT_NEAR(across.seconds, across_seconds, 1e-12);
  EXPECT_GT(across.seconds, 3.5 * nvls.seconds);

  // A dp pair with one GPU per rack (rank 3 and 75): one NIC each side, the NIC rate.
  const NcclChoice pair = nccl_choose(t.nccl, Collective::all_reduce, s, shape_of(t, {3, 75}));
  EXPECT_EQ(pair.algorithm, NcclAlgorithm::ring);
  EXPECT_NEAR(pair.algorithm_bandwidth, kNicBus * kGiga, 1);  // n = 2: bus · 2 / 2

  // The same 8 ranks on 8-GPU DGX B200 nodes: one node, NVLS at its own 811 GB/s.
  const Topology b200 = load_topology("dgx-b200");
  const auto b200_places = place_ranks(16, b200);
  const NcclShape dgx = nccl_shape_of(
      {0, 1, 2, 3, 4, 5, 6, 7},
      [&](int r) { return b200_places.at(static_cast<std::size_t>(r)).nvlink_domain; },
      [&](int r) { return nic_in_nvlink_domain(b200, r); });
  EXPECT_EQ(dgx.nodes, 1);
  EXPECT_NEAR(nccl_choose(b200.nccl, Collective::all_reduce, s, dgx).seconds,
              25 * kMicro + s * 14 / (8 * 811 * kGiga), 1e-12);
}

// nccl-tests through the simulator's communicator: one rack at NVLink SHARP's bus
// bandwidth, two racks at the ring's over NVLink (NCCL spreads the ring's channels over the
// rack's 72 NICs, so 72 · 47 GB/s does not bind; NVLS is single-node in NCCL and NVLS-tree
// is not modelled).
TEST(NvlinkDomainNcclTests, OneRackRunsNvlsAndTwoRacksARingOverNvlink) {
  const Topology t = load_topology("gb200-nvl72");
  const std::int64_t s = 8LL << 30;
  auto run = [&](int gpus) {
    return testing::in_child([&] {
      NcclTestOptions o;
      o.gpus = gpus;
      o.min_bytes = o.max_bytes = s;
      const auto rows = run_nccl_tests(t, o);
      return nlohmann::json{{"busbw", rows.at(0).busbw / kGiga},
                            {"choice", rows.at(0).choice},
                            {"table", format_nccl_tests(t, o, rows)}};
    });
  };
  const auto one = run(72);
  ASSERT_FALSE(one.contains("error")) << one.dump();
  EXPECT_EQ(one.at("choice").get<std::string>().rfind("nvls/Simple", 0), 0U) << one.dump();
  // 8 GiB: 25 µs + 8 GiB · 142 / (72 · 840.7 GB/s) = 20.15 ms; bus = 8 GiB / t · 142/72.
  const double t72 = 25e-6 + double(s) * 142 / (72 * kNvlsBus * kGiga);
  EXPECT_NEAR(one.at("busbw").get<double>(), double(s) / t72 * 142 / 72 / kGiga, 0.5);
  EXPECT_NE(one.at("table").get<std::string>().find("72 GPUs (18 nodes in 1 NVLink domain of "
                                                    "gb200-nvl72)"),
            std::string::npos)
      << one.at("table");

  const auto two = run(144);
  ASSERT_FALSE(two.contains("error")) << two.dump();
  EXPECT_EQ(two.at("choice").get<std::string>().rfind("ring/Simple", 0), 0U) << two.dump();
  // Ring over 144: 286 steps, 2 of them between racks; latency 1.4 · (8.4 + 284 · 3.4 + 2 ·
  // 14) µs = 1402.8 µs; 8 GiB · 286/144 at 721.8 GB/s = 23.64 ms.
  const double t144 =
      1.4 * (8.4 + 284 * 3.4 + 2 * 14) * 1e-6 + double(s) * 286 / (144 * kNvlinkBus * kGiga);
  EXPECT_NEAR(two.at("busbw").get<double>(), double(s) / t144 * 286 / 144 / kGiga, 0.5);
  EXPECT_NE(two.at("table").get<std::string>().find("(36 nodes in 2 NVLink domains"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::sim
