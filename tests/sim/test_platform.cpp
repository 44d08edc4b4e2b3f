// Tests of the SimGrid platform (sim/platform.hpp) on a real engine: routes cross the links
// the topology says, a lone flow takes latency + bytes / bandwidth of its narrowest link,
// flows sharing a NIC or an oversubscribed core split its bandwidth, and 3072 ranks build
// with the routes and link counts of the topology (how long that takes is a benchmark:
// tests/bench/bench_platform). SimGrid's engine is a process-wide singleton, so every test
// that needs one runs it in a forked child (tests/tools/in_child.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sim/platform.hpp"
#include "sim/simgrid_config.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// Runs `body` in a child process (tests/tools/in_child.hpp) with a fresh SimGrid engine;
// returns what it returned. A child that throws or dies fails the test with its message.
std::string in_child(const std::function<std::string(simgrid::s4u::Engine&)>& body) {
  const nlohmann::json out = testing::in_child([&] {
    int argc = 2;
    char name[] = "test_platform";
    char quiet[] = "--log=root.thres:critical";
    char* argv[] = {name, quiet, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    configure_network_model(engine);
    return nlohmann::json{{"answer", body(engine)}};
  });
  EXPECT_FALSE(out.contains("error")) << out.dump();
  return out.contains("answer") ? out["answer"].get<std::string>()
                                : "child failed: " + out.value("error", std::string());
}

struct Flow {
  int src = 0;
  int dst = 0;
  double bytes = 0;
};

// Starts every flow at t = 0 on the platform of `topology` with `world` ranks; returns
// when each arrived, in seconds of simulated time.
std::vector<double> flow_times(const Topology& topology, int world,
                               const std::vector<Flow>& flows) {
  const std::string answer = in_child([&](simgrid::s4u::Engine& engine) {
    const Platform p = build_platform(topology, world);
    auto arrivals = std::make_shared<std::vector<double>>(flows.size(), -1.0);
    static int payload = 0;
    for (std::size_t i = 0; i < flows.size(); ++i) {
      auto* box = simgrid::s4u::Mailbox::by_name("flow-" + std::to_string(i));
      const auto bytes = static_cast<std::uint64_t>(flows[i].bytes);
      simgrid::s4u::Actor::create("send-" + std::to_string(i), p.hosts[flows[i].src],
                                  [box, bytes] { box->put(&payload, bytes); });
      simgrid::s4u::Actor::create("recv-" + std::to_string(i), p.hosts[flows[i].dst],
                                  [box, arrivals, i] {
                                    box->get<int>();
                                    (*arrivals)[i] = simgrid::s4u::Engine::get_clock();
                                  });
    }
    engine.run();
    return nlohmann::json(*arrivals).dump();
  });
  try {
    return nlohmann::json::parse(answer).get<std::vector<double>>();
  } catch (const std::exception&) {
    ADD_FAILURE() << answer;
    return std::vector<double>(flows.size(), -1.0);
  }
}

// The names of the links a message from rank `src` to rank `dst` crosses, sorted: the
// network model shares bandwidth over the set of links and sums their latencies, and
// SimGrid's Dijkstra zone lists the links of each multi-link edge in reverse.
std::vector<std::string> route(const Topology& topology, int world, int src, int dst) {
  const std::string answer = in_child([&](simgrid::s4u::Engine&) {
    const Platform p = build_platform(topology, world);
    std::vector<simgrid::s4u::Link*> links;
    double latency = 0;
    p.hosts[src]->route_to(p.hosts[dst], links, &latency);
    std::vector<std::string> names;
    for (auto* l : links) names.push_back(l->get_name());
    std::sort(names.begin(), names.end());
    return nlohmann::json(names).dump();
  });
  try {
    return nlohmann::json::parse(answer).get<std::vector<std::string>>();
  } catch (const std::exception&) {
    ADD_FAILURE() << answer;
    return {};
  }
}

using Names = std::vector<std::string>;

constexpr double kBytes = 1e9;
constexpr double kNvlinkA100 = 300e9, kNicA100 = 25e9;       // bytes/s per direction
constexpr double kNvlinkLatency = 1e-6, kNicLatency = 2e-6;  // s, the presets' estimates

TEST(PlatformRoutes, InsideANodeOnlyGpuLinks) {
  const Topology t = load_topology("dgx-a100-80g");
  EXPECT_EQ(route(t, 16, 0, 1), (Names{"gpu-0_UP", "gpu-1_DOWN"}));
  EXPECT_EQ(route(t, 16, 15, 9), (Names{"gpu-15_UP", "gpu-9_DOWN"}));
}

TEST(PlatformRoutes, FatTreeGoesThroughTheGpusOwnNicAndTheCore) {
  const Topology t = load_topology("dgx-a100-80g");
  EXPECT_EQ(route(t, 16, 0, 8),
            (Names{"core", "gpu-0_UP", "gpu-8_DOWN", "nic-0-0_UP", "nic-1-0_DOWN"}));
  EXPECT_EQ(route(t, 16, 3, 13),
            (Names{"core", "gpu-13_DOWN", "gpu-3_UP", "nic-0-3_UP", "nic-1-5_DOWN"}));
}

// dgx-h100's rail-optimized fabric under a 2:1 spine, where the routes matter.
Topology oversubscribed_rails() {
  Topology t = load_topology("dgx-h100");
  t.fabric.oversubscription = 2;
  return t;
}

TEST(PlatformRoutes, RailOptimizedStaysOnItsRailOrCrossesTheSpine) {
  const Topology t = oversubscribed_rails();
  ASSERT_TRUE(rail_routes_matter(t));
  EXPECT_EQ(route(t, 24, 2, 18), (Names{"gpu-18_DOWN", "gpu-2_UP", "nic-0-2_UP", "nic-2-2_DOWN"}));
  EXPECT_EQ(route(t, 24, 2, 9),
            (Names{"gpu-2_UP", "gpu-9_DOWN", "nic-0-2_UP", "nic-1-1_DOWN", "spine"}));
  EXPECT_EQ(route(t, 24, 2, 5), (Names{"gpu-2_UP", "gpu-5_DOWN"}));
}

TEST(PlatformRoutes, NonBlockingRailsAreBuiltAsAFatTree) {
  // The preset's spine is not oversubscribed: every route between nodes holds it, same rail
  // or not, as the fat tree's hold its core.
  const Topology t = load_topology("dgx-h100");
  ASSERT_FALSE(rail_routes_matter(t));
  EXPECT_EQ(route(t, 24, 2, 18),
            (Names{"gpu-18_DOWN", "gpu-2_UP", "nic-0-2_UP", "nic-2-2_DOWN", "spine"}));
  EXPECT_EQ(route(t, 24, 2, 9),
            (Names{"gpu-2_UP", "gpu-9_DOWN", "nic-0-2_UP", "nic-1-1_DOWN", "spine"}));
  EXPECT_EQ(route(t, 24, 2, 5), (Names{"gpu-2_UP", "gpu-5_DOWN"}));
  EXPECT_FALSE(rail_routes_matter(load_topology("dgx-a100-80g")));  // a fat tree
}

TEST(PlatformFlows, NonBlockingRailsGiveEveryFlowTheTimeTheRailRoutesGive) {
  // The same flows on dgx-h100 built both ways: as a fat tree (spine 1:1) and as rails
  // (spine just above 1:1, so its capacity is the same to a part in 10^9 and never binds).
  // Same rail, cross rail, two flows sharing a NIC, a flow inside a node, and flows crossing
  // in both directions: each arrives at the same time.
  const std::vector<Flow> flows = {{0, 8, kBytes},  {2, 9, kBytes},     {2, 18, kBytes / 2},
                                   {3, 12, kBytes}, {3, 21, kBytes},    {1, 5, kBytes},
                                   {9, 2, kBytes},  {17, 0, kBytes / 3}};
  const Topology star = load_topology("dgx-h100");
  Topology rails = star;
  rails.fabric.oversubscription = 1 + 1e-9;
  ASSERT_FALSE(rail_routes_matter(star));
  ASSERT_TRUE(rail_routes_matter(rails));
  const auto a = flow_times(star, 24, flows);
  const auto b = flow_times(rails, 24, flows);
  ASSERT_EQ(a.size(), flows.size());
  ASSERT_EQ(b.size(), flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    EXPECT_GT(a[i], 0.0) << "flow " << i;
    EXPECT_NEAR(a[i], b[i], 1e-9 * b[i]) << "flow " << i;
  }
  // Rank 3 sends twice through NIC 3 of node 0: those two take twice a lone flow's time.
  const double shared = kNvlinkLatency + kNicLatency + 2 * kBytes / 50e9;
  EXPECT_NEAR(a[3], shared, shared * 1e-6);
}

TEST(PlatformRoutes, CpuHostKeepsEveryRankOnOneNode) {
  const Topology t = load_topology("cpu-host");
  EXPECT_EQ(route(t, 8, 0, 7), (Names{"gpu-0_UP", "gpu-7_DOWN"}));
}

TEST(PlatformFlows, OneFlowInsideANodeTakesNvlinkLatencyPlusBytesOverBandwidth) {
  const auto t = flow_times(load_topology("dgx-a100-80g"), 16, {{0, 1, kBytes}});
  const double expected = kNvlinkLatency + kBytes / kNvlinkA100;  // 3.3343 ms
  EXPECT_NEAR(t.at(0), expected, expected * 1e-6);
}

TEST(PlatformFlows, OneFlowBetweenNodesRunsAtNicBandwidth) {
  const auto t = flow_times(load_topology("dgx-a100-80g"), 16, {{0, 8, kBytes}});
  const double expected = kNvlinkLatency + kNicLatency + kBytes / kNicA100;  // 40.003 ms
  EXPECT_NEAR(t.at(0), expected, expected * 1e-6);
  // H100: NDR, 50 GB/s.
  const auto h = flow_times(load_topology("dgx-h100"), 16, {{0, 8, kBytes}});
  EXPECT_NEAR(h.at(0), kNvlinkLatency + kNicLatency + kBytes / 50e9, 1e-6 * 20e-3);
}

TEST(PlatformFlows, TwoFlowsThroughOneNicTakeTwiceAsLong) {
  const Topology dgx = load_topology("dgx-a100-80g");
  // Rank 0 sends to two GPUs of node 1: both leave through NIC 0 of node 0.
  const auto shared = flow_times(dgx, 16, {{0, 8, kBytes}, {0, 9, kBytes}});
  const double both = kNvlinkLatency + kNicLatency + 2 * kBytes / kNicA100;
  EXPECT_NEAR(shared.at(0), both, both * 1e-6);
  EXPECT_NEAR(shared.at(1), both, both * 1e-6);
  // Ranks 0 and 1 use NICs 0 and 1: no contention.
  const auto apart = flow_times(dgx, 16, {{0, 8, kBytes}, {1, 9, kBytes}});
  const double alone = kNvlinkLatency + kNicLatency + kBytes / kNicA100;
  EXPECT_NEAR(apart.at(0), alone, alone * 1e-6);
  EXPECT_NEAR(apart.at(1), alone, alone * 1e-6);
}

TEST(PlatformFlows, IntraNodeTrafficDoesNotTouchTheNics) {
  // 0 → 8 leaves through NIC 0 while 1 → 2 stays on NVSwitch: neither slows the other.
  const auto t = flow_times(load_topology("dgx-a100-80g"), 16, {{0, 8, kBytes}, {1, 2, kBytes}});
  EXPECT_NEAR(t.at(0), kNvlinkLatency + kNicLatency + kBytes / kNicA100, 1e-6 * 40e-3);
  EXPECT_NEAR(t.at(1), kNvlinkLatency + kBytes / kNvlinkA100, 1e-6 * 3.3e-3);
}

TEST(PlatformFlows, OversubscribedCoreIsShared) {
  // Two nodes of 2 GPUs and 2 NICs under a 4:1 core: core = 2 · 2 · 25 GB/s / 4 = 25 GB/s.
  Topology t = load_topology("dgx-a100-80g");
  t.node.gpus_per_node = 2;
  t.fabric.nics_per_node = 2;
  t.fabric.oversubscription = 4;
  const auto alone = flow_times(t, 4, {{0, 2, kBytes}});
  const double one = kNvlinkLatency + kNicLatency + kBytes / kNicA100;
  EXPECT_NEAR(alone.at(0), one, one * 1e-6);
  // Different NICs, one core: each gets half of 25 GB/s.
  const auto two = flow_times(t, 4, {{0, 2, kBytes}, {1, 3, kBytes}});
  const double shared = kNvlinkLatency + kNicLatency + 2 * kBytes / 25e9;
  EXPECT_NEAR(two.at(0), shared, shared * 1e-6);
  EXPECT_NEAR(two.at(1), shared, shared * 1e-6);
}

class PlatformScale : public ::testing::TestWithParam<const char*> {};

TEST_P(PlatformScale, ThreeThousandRanksBuildWithTheirRoutes) {
  const Topology t = load_topology(GetParam());
  const std::string answer = in_child([&](simgrid::s4u::Engine& engine) {
    const auto start = std::chrono::steady_clock::now();
    const Platform p = build_platform(t, 3072);
    const double build =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<simgrid::s4u::Link*> links;
    double latency = 0;
    p.hosts[0]->route_to(p.hosts[3071], links, &latency);
    std::ostringstream out;
    out << build << " " << p.hosts.size() << " " << p.nodes << " " << p.nic_links.size() << " "
        << links.size() << " " << engine.get_host_count() << " " << latency;
    return out.str();
  });
  std::istringstream in(answer);
  double build = -1, latency = -1;
  std::size_t hosts = 0, nodes = 0, nics = 0, hops = 0, engine_hosts = 0;
  in >> build >> hosts >> nodes >> nics >> hops >> engine_hosts >> latency;
  ASSERT_FALSE(in.fail()) << answer;
  EXPECT_GE(build, 0.0);
  EXPECT_EQ(hosts, 3072U);
  EXPECT_EQ(engine_hosts, 3072U);
  EXPECT_EQ(nodes, 384U);
  EXPECT_EQ(nics, 384U * 8);
  // GPU, NIC, core or spine (rank 0 is on rail 0, rank 3071 on rail 7), NIC, GPU; the same
  // links on both presets, since dgx-h100's spine is non-blocking (rail_routes_matter).
  EXPECT_EQ(hops, 5U);
  EXPECT_NEAR(latency, kNvlinkLatency + kNicLatency, 1e-12);
  std::cout << "build_platform(" << GetParam() << ", 3072 ranks): " << build << " s\n";
}
INSTANTIATE_TEST_SUITE_P(Presets, PlatformScale, ::testing::Values("dgx-a100-80g", "dgx-h100"));

TEST(PlatformValidation, RejectsBadWorldSizes) {
  // Checked before SimGrid is touched, so no engine is needed.
  try {
    build_platform(load_topology("dgx-a100-80g"), 0);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations()[0].field, "world_size");
    EXPECT_EQ(e.violations()[0].value, "0");
  }
  try {
    build_platform(load_topology("cpu-host"), 65);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations()[0].field, "world_size");
    EXPECT_NE(e.violations()[0].rule.find("no NICs"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem::sim
