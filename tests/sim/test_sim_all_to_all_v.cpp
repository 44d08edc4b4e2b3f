// SimCommunicator::all_to_all_v prices the split it is given: uniform splits take the
// all-to-all's time (on NCCL's model over the platform, and in closed form, where
// sim/collective_cost.hpp's (n−1)/n·S over the link is the reference); a skewed split that
// moves the same bytes but sends them all to one member takes longer, by that member's
// load; symmetric mode applies the representative's split to every member.
// SimGrid's engine can start once per process, so each simulation runs in a child.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/collective_cost.hpp"
#include "sim/platform.hpp"
#include "sim/sim_communicator.hpp"
#include "sim/sim_device.hpp"
#include "sim/simgrid_config.hpp"
#include "tests/tools/in_child.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

using Matrix = std::vector<std::vector<std::int64_t>>;  // [src][dst] elements, group order

// Runs `body` in a forked child and returns the number it produced (or throws its error).
double in_child(const std::function<double()>& body) {
  const auto j = testing::in_child([&] { return nlohmann::json{{"seconds", body()}}; });
  if (j.contains("error")) throw std::runtime_error(j.at("error").get<std::string>());
  return j.at("seconds").get<double>();
}

struct Setup {
  std::string topology;
  int world = 0;
  std::vector<int> members;  // global ranks, group order; dp coordinate = position
  SimMode mode = SimMode::full;
  std::optional<LinkSpec> closed_form;
};

// Seconds until the last member's fp32 all_to_all_v with split matrix m is done
// (uniform = true: all_to_all of m[0][0] elements per peer instead).
double time_exchange(const Setup& s, const Matrix& m, bool uniform_all_to_all = false) {
  return in_child([&] {
    const Topology t = load_topology(s.topology);
    int argc = 1;
    char name[] = "test";
    char* argv[] = {name, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    configure_network_model(engine);
    const Platform p = build_platform(t, s.world);
    std::vector<RankCoordinates> coords(static_cast<std::size_t>(s.world));
    const int n = static_cast<int>(s.members.size());
    for (int i = 0; i < n; ++i) coords[static_cast<std::size_t>(s.members[i])].dp = i;
    ParallelSizes sizes;
    sizes.dp = n;
    SimWorld w(p.hosts, coords, sizes, s.mode);
    std::vector<std::unique_ptr<SimCommunicator>> comms;
    std::vector<std::unique_ptr<SimDevice>> devices;
    double finished = 0;
    for (int i = 0; i < n; ++i) {
      const int rank = s.members[static_cast<std::size_t>(i)];
      if (!w.present(rank)) continue;
      comms.push_back(std::make_unique<SimCommunicator>(w, s.members, rank, "ep", "g"));
      if (s.closed_form) comms.back()->set_closed_form(*s.closed_form);
      devices.push_back(std::make_unique<SimDevice>([](const OpDesc&) { return 0.0; }));
      auto* c = comms.back().get();
      auto* d = devices.back().get();
      std::vector<std::int64_t> send = m[static_cast<std::size_t>(i)], recv;
      for (int src = 0; src < n; ++src) recv.push_back(m[static_cast<std::size_t>(src)][i]);
      simgrid::s4u::Actor::create(
          "r" + std::to_string(rank), p.hosts[static_cast<std::size_t>(rank)],
          [c, d, send, recv, uniform_all_to_all, &finished] {
            const auto in_n = std::accumulate(send.begin(), send.end(), std::int64_t{0});
            const auto out_n = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
            Tensor in = d->allocate(Shape{in_n}, DType::fp32);
            Tensor out = d->allocate(Shape{out_n}, DType::fp32);
            auto& st = d->default_stream();
            auto work = uniform_all_to_all ? c->all_to_all(st, in, out)
                                           : c->all_to_all_v(st, in, send, out, recv);
            work->wait();
            finished = std::max(finished, sim_now());
          });
    }
    engine.run();
    return finished;
  });
}

Matrix uniform(int n, std::int64_t per_peer) {
  return Matrix(static_cast<std::size_t>(n),
                std::vector<std::int64_t>(static_cast<std::size_t>(n), per_peer));
}

// The same bytes moved as uniform(n, per_peer) (n(n−1)·per_peer), all of them to member
// `hot`: every other member sends it n·per_peer.
Matrix all_to_one(int n, std::int64_t per_peer, int hot) {
  Matrix m(static_cast<std::size_t>(n), std::vector<std::int64_t>(static_cast<std::size_t>(n), 0));
  for (int i = 0; i < n; ++i)
    if (i != hot) m[static_cast<std::size_t>(i)][static_cast<std::size_t>(hot)] = n * per_peer;
  return m;
}

// Four DGX A100 nodes, one member on each: every pair crosses the NICs, on NCCL's model.
const Setup kAcrossNodes{"dgx-a100-80g", 32, {0, 8, 16, 24}, SimMode::full, std::nullopt};
constexpr std::int64_t kPerPeer = 4 << 20;  // 16 MiB of fp32 to each peer

TEST(SimAllToAllV, UniformSplitsTakeTheAllToAllsTimeAcrossNodes) {
  const double v = time_exchange(kAcrossNodes, uniform(4, kPerPeer));
  const double a2a = time_exchange(kAcrossNodes, uniform(4, kPerPeer), true);
  EXPECT_GT(a2a, 0);
  EXPECT_NEAR(v, a2a, 1e-9 * a2a);
}

TEST(SimAllToAllV, AllToOneTakesAboutFourTimesAsLongForTheSameBytes) {
  const double even = time_exchange(kAcrossNodes, uniform(4, kPerPeer));
  const double skewed = time_exchange(kAcrossNodes, all_to_one(4, kPerPeer, 0));
  // Uniform: each NIC carries 3 blocks in and 3 out at once; all-to-one: the hot member's
  // NIC takes 12 blocks in. The bandwidth term grows 4×; the latency term stays.
  EXPECT_GT(skewed, 3.5 * even);
  EXPECT_LT(skewed, 4.0 * even);
}

// A one-rank-per-member platform without an NCCL model, priced in closed form.
const LinkSpec kLink{BytesPerSecond(100e9), Seconds(2e-6)};
Setup closed_form(SimMode mode) {
  return {"cpu-host", 4, {0, 1, 2, 3}, mode, kLink};
}

TEST(SimAllToAllV, UniformSplitsMatchTheClosedFormAllToAll) {
  const double bytes = 4.0 * 4 * kPerPeer;  // input of each member
  const double expected = all_to_all_time(Bytes(static_cast<std::int64_t>(bytes)), 4, kLink).value;
  // (n−1)/n·S over the link plus one latency, by hand.
  ASSERT_DOUBLE_EQ(expected, 2e-6 + 0.75 * bytes / 100e9);
  EXPECT_NEAR(time_exchange(closed_form(SimMode::full), uniform(4, kPerPeer)), expected,
              1e-12 + 1e-9 * expected);
  EXPECT_NEAR(time_exchange(closed_form(SimMode::full), uniform(4, kPerPeer), true), expected,
              1e-12 + 1e-9 * expected);
}

TEST(SimAllToAllV, ClosedFormIsTheBusiestMembersLoad) {
  // The hot member receives 3 × 4 blocks.
  const double expected = 2e-6 + 12.0 * 4 * kPerPeer / 100e9;
  EXPECT_NEAR(time_exchange(closed_form(SimMode::full), all_to_one(4, kPerPeer, 2)), expected,
              1e-9 * expected);
}

TEST(SimAllToAllV, SymmetricModeAppliesTheRepresentativesSplitToEveryMember) {
  // Only member 0 runs; it sends 4 blocks to member 1 and nothing else. Read as every
  // member's split, member 1 receives 4 blocks from each of 0, 2 and 3.
  Matrix hot1(4, std::vector<std::int64_t>{0, 4 * kPerPeer, 0, 0});
  const double expected = 2e-6 + 12.0 * 4 * kPerPeer / 100e9;
  EXPECT_NEAR(time_exchange(closed_form(SimMode::symmetric), hot1), expected, 1e-9 * expected);
  // Full mode with every member actually sending that split agrees.
  EXPECT_NEAR(time_exchange(closed_form(SimMode::full), hot1), expected, 1e-9 * expected);
}

TEST(SimAllToAllV, BadSplitsAreRefusedBeforeAnythingIsIssued) {
  const double got = in_child([] {
    const Topology t = load_topology("cpu-host");
    int argc = 1;
    char name[] = "test";
    char* argv[] = {name, nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    const Platform p = build_platform(t, 2);
    std::vector<RankCoordinates> coords(2);
    coords[1].dp = 1;
    ParallelSizes sizes;
    sizes.dp = 2;
    SimWorld w(p.hosts, coords, sizes, SimMode::full);
    SimCommunicator c(w, {0, 1}, 0, "ep", "g");
    SimDevice d([](const OpDesc&) { return 0.0; });
    Tensor in = d.allocate(Shape{6}, DType::fp32), out = d.allocate(Shape{6}, DType::fp32);
    const std::vector<std::int64_t> ok{3, 3}, negative{7, -1}, three{2, 2, 2}, short_sum{2, 2};
    auto message = [&](std::span<const std::int64_t> send, std::span<const std::int64_t> recv) {
      try {
        c.all_to_all_v(d.default_stream(), in, send, out, recv);
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    if (message(negative, ok) != "all_to_all_v on g: send_counts[1] = -1 is negative")
      throw std::runtime_error("negative: " + message(negative, ok));
    if (message(three, ok) !=
        "all_to_all_v on g: send_counts holds 3 counts, expected one per rank = 2")
      throw std::runtime_error("length: " + message(three, ok));
    if (message(ok, short_sum) !=
        "all_to_all_v on g: recv_counts sum to 4 elements but output "
        "holds 6")
      throw std::runtime_error("sum: " + message(ok, short_sum));
    return 1.0;
  });
  EXPECT_EQ(got, 1.0);
}

}  // namespace
}  // namespace tandem::sim
