// The network model tandem configures gives a single flow latency + size / bandwidth, on
// a real SimGrid engine (SimGrid's defaults would cap it by the TCP window).
#include <gtest/gtest.h>

#include <simgrid/s4u.hpp>

#include "sim/simgrid_config.hpp"

namespace {

TEST(SimGridConfig, SingleFlowTakesLatencyPlusSizeOverBandwidth) {
  int argc = 1;
  char name[] = "test_sim";
  char* argv[] = {name, nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  tandem::sim::configure_network_model(engine);

  auto* zone = simgrid::s4u::create_full_zone("node");
  auto* a = zone->create_host("gpu0", 1e12);
  auto* b = zone->create_host("gpu1", 1e12);
  const double bandwidth = 900e9;  // bytes/s, one direction
  const double latency = 10e-6;    // s
  auto* link = zone->create_split_duplex_link("nvlink", bandwidth)->set_latency(latency)->seal();
  zone->add_route(a->get_netpoint(), b->get_netpoint(), nullptr, nullptr,
                  {simgrid::s4u::LinkInRoute(link, simgrid::s4u::LinkInRoute::Direction::UP)},
                  true);
  zone->seal();

  const double bytes = 1e9;
  double arrival = -1;
  auto* box = simgrid::s4u::Mailbox::by_name("p2p");
  static int payload = 42;
  simgrid::s4u::Actor::create("sender", a,
                              [&] { box->put(&payload, static_cast<uint64_t>(bytes)); });
  simgrid::s4u::Actor::create("receiver", b, [&] {
    const int* got = box->get<int>();
    EXPECT_EQ(*got, 42);
    arrival = simgrid::s4u::Engine::get_clock();
  });
  engine.run();
  const double expected = latency + bytes / bandwidth;  // 1.1211 ms
  EXPECT_NEAR(arrival, expected, expected * 1e-6);
}

}  // namespace
