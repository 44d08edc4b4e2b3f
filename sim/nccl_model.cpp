// The tuner of nccl_model.hpp: candidates per (algorithm, protocol), each a latency and a
// bandwidth, as NVIDIA/nccl src/graph/tuning.cc computes them.
#include "sim/nccl_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace tandem::sim {
namespace {

constexpr std::array kProtocols = {NcclProtocol::ll, NcclProtocol::ll128, NcclProtocol::simple};

double of(const PerProtocol& p, NcclProtocol proto) {
  switch (proto) {
    case NcclProtocol::ll:
      return p.ll;
    case NcclProtocol::ll128:
      return p.ll128;
    case NcclProtocol::simple:
      return p.simple;
  }
  return 0;
}

double of(const PerNodeCount& p, int nodes) {
  return nodes <= 1 ? p.one : nodes == 2 ? p.two : p.more;
}

// NCCL's static correction of tree bandwidth for mid sizes (tuning.cc
// treeCorrectionFactor): trees pipeline worse than the model at 4 KiB–16 MiB. Indexed by
// protocol and log2(bytes / 64) for 64 B to 256 MiB.
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

double tree_correction(NcclProtocol p, double bytes) {
  const double chunks = std::floor(bytes / 64);
  if (chunks < 1) return 1;
  const int log_size = static_cast<int>(std::floor(std::log2(chunks)));
  if (log_size < 0 || log_size >= 23) return 1;
  return kTreeCorrection[static_cast<int>(p)][log_size];
}

int log2_floor(int x) {
  int l = 0;
  while (x > 1) {
    x >>= 1;
    ++l;
  }
  return l;
}

// The ring steps of a collective on n ranks (tuning.cc nsteps).
int ring_steps(Collective c, int n) {
  switch (c) {
    case Collective::all_reduce:
      return 2 * (n - 1);
    case Collective::all_gather:
    case Collective::reduce_scatter:
      return n - 1;
    case Collective::broadcast:
    case Collective::all_to_all:
      return n;
  }
  return n;
}

void check(const NcclSpec& spec, double bytes, NcclShape s) {
  if (!spec.enabled)
    throw std::invalid_argument("NCCL model of a topology without an nccl section");
  if (s.ranks < 1)
    throw std::invalid_argument("collective on " + std::to_string(s.ranks) + " ranks");
  if (s.nodes < 1 || s.nodes > s.ranks)
    throw std::invalid_argument("collective on " + std::to_string(s.ranks) + " ranks over " +
                                std::to_string(s.nodes) + " nodes");
  if (!(bytes >= 0)) throw std::invalid_argument("collective of negative size");
}

// A ring of fewer GPUs inside one NVLink domain reaches less bus bandwidth than the 8-GPU
// ring nvlink_bus is (measured per collective: NcclSpec::ring_group_fraction); 1 for any
// group or collective the preset does not list.
double ring_group_fraction(const NcclSpec& spec, Collective coll, int n) {
  const auto by_collective = spec.ring_group_fraction.find(std::string(collective_name(coll)));
  if (by_collective == spec.ring_group_fraction.end()) return 1.0;
  const auto f = by_collective->second.find(n);
  return f == by_collective->second.end() ? 1.0 : f->second;
}

NcclChoice finish(NcclChoice c, Collective coll, double bytes, int n) {
  c.seconds = c.latency + (c.algorithm_bandwidth > 0 ? bytes / c.algorithm_bandwidth : 0);
  c.bus_bandwidth =
      c.seconds > 0 ? bytes / c.seconds * bus_bandwidth_factor(coll, n) : c.algorithm_bandwidth;
  return c;
}

}  // namespace

std::string_view nccl_algorithm_name(NcclAlgorithm a) {
  switch (a) {
    case NcclAlgorithm::ring:
      return "ring";
    case NcclAlgorithm::tree:
      return "tree";
    case NcclAlgorithm::nvls:
      return "nvls";
  }
  throw std::logic_error("unknown NCCL algorithm");
}

std::string_view nccl_protocol_name(NcclProtocol p) {
  switch (p) {
    case NcclProtocol::ll:
      return "LL";
    case NcclProtocol::ll128:
      return "LL128";
    case NcclProtocol::simple:
      return "Simple";
  }
  throw std::logic_error("unknown NCCL protocol");
}

std::vector<NcclChoice> nccl_candidates(const NcclSpec& spec, Collective coll, double bytes,
                                        NcclShape shape) {
  check(spec, bytes, shape);
  const int n = shape.ranks, nodes = shape.nodes;
  const int nics = std::max(1, shape.nics);
  const double ppn = static_cast<double>(n) / nodes;
  // Channels spread a cross-node ring over the NICs the node's members use; the NVLink
  // hops inside a node carry all channels at once.
  const double bus = nodes == 1 ? spec.nvlink_bus.value * ring_group_fraction(spec, coll, n)
                                : std::min(spec.nvlink_bus.value, nics * spec.nic_bus.value);
  const int channels = nodes == 1 ? spec.channels : nics;
  const double ll_max = of(spec.ll_max_bus, nodes);
  const int steps = ring_steps(coll, n);
  const int inter_steps = nodes == 1                       ? 0
                          : coll == Collective::all_reduce ? 2 * (nodes - 1)
                                                           : nodes - 1;

  std::vector<NcclChoice> out;
  if (coll == Collective::all_to_all) {
    // Grouped send/recv: every rank's (n−1)/n leaves at once, Simple, one step.
    NcclChoice c{NcclAlgorithm::ring, NcclProtocol::simple, channels, 0, 0, 0, 0};
    const double step = nodes == 1 ? spec.ring_nvlink_latency.simple : spec.ring_net_latency.simple;
    c.latency = spec.ring_base_latency.simple + step;
    c.algorithm_bandwidth = bus * n / std::max(1, n - 1);
    out.push_back(finish(c, coll, bytes, n));
    return out;
  }

  for (NcclProtocol p : kProtocols) {
    // Ring.
    double ring_bus = bus;
    if (p == NcclProtocol::ll) ring_bus = std::min(ll_max, bus * 0.5);
    if (p == NcclProtocol::ll128)
      ring_bus = std::min(bus * 0.92, channels * spec.ll128_max_channel);
    NcclChoice ring{NcclAlgorithm::ring, p, channels, 0, 0, 0, 0};
    ring.algorithm_bandwidth = ring_bus * n / steps;
    double latency = of(spec.ring_base_latency, p);
    if (coll == Collective::broadcast) {
      latency += nodes == 1 ? of(spec.ring_nvlink_latency, p) : of(spec.ring_net_latency, p);
    } else {
      double intra = of(spec.ring_nvlink_latency, p);
      if (nodes > 1) {
        const double overhead = spec.net_overhead.value * (p == NcclProtocol::simple ? 3.0 : 1.0);
        intra = std::max(intra, overhead);
      }
      // With one GPU per node every step is exposed: NCCL uses the tree network latency.
      const double inter = ppn == 1 ? of(spec.tree_net_latency, p) : of(spec.ring_net_latency, p);
      latency += (steps - inter_steps) * intra + inter_steps * inter;
      if (p == NcclProtocol::simple && nodes > 1 && coll == Collective::all_reduce &&
          bytes / (static_cast<double>(channels) * n) >= 64)
        latency *= spec.ring_plateau;
    }
    ring.latency = latency;
    out.push_back(finish(ring, coll, bytes, n));

    // Tree: all-reduce only.
    if (coll == Collective::all_reduce && n > 1) {
      const int tree_channels = nodes == 1 ? spec.channels : nics;
      double tree_bus = std::min(bus * 0.92, tree_channels * of(spec.tree_max_channel, nodes));
      if (p == NcclProtocol::ll) tree_bus = std::min(tree_bus / 3.8, ll_max);
      if (p == NcclProtocol::ll128)
        tree_bus = std::min(tree_bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                            tree_channels * of(spec.tree_ll128_max_channel, nodes));
      NcclChoice tree{NcclAlgorithm::tree, p, tree_channels, 0, 0, 0, 0};
      tree.algorithm_bandwidth = tree_bus * 0.5 * tree_correction(p, bytes);
      tree.latency =
          of(spec.tree_base_latency, p) + 2 * ((ppn - 1) * of(spec.tree_nvlink_latency, p) +
                                               log2_floor(nodes) * of(spec.tree_net_latency, p));
      out.push_back(finish(tree, coll, bytes, n));
    }
  }
  // NVLink SHARP: all-reduce inside one node, Simple only.
  if (coll == Collective::all_reduce && nodes == 1 && n > 1 && spec.nvls_bus.value > 0) {
    NcclChoice nvls{NcclAlgorithm::nvls, NcclProtocol::simple, spec.channels, 0, 0, 0, 0};
    // Each GPU sends and receives its buffer once, whatever the group: the algorithm
    // bandwidth of the group nvls_bus was measured on holds for every group size.
    const int r = std::max(2, spec.nvls_bus_ranks);
    nvls.algorithm_bandwidth = spec.nvls_bus.value * r / (2.0 * (r - 1));
    nvls.latency = spec.nvls_latency.value;
    out.push_back(finish(nvls, coll, bytes, n));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const NcclChoice& a, const NcclChoice& b) { return a.seconds < b.seconds; });
  return out;
}

double measured_all_reduce_seconds(const std::vector<std::pair<double, double>>& rows, int ranks,
                                   double bytes) {
  if (rows.empty() || ranks < 2) return 0;
  const double factor = bus_bandwidth_factor(Collective::all_reduce, ranks);
  // `b` bytes at the bus bandwidth of row `r`.
  auto at_row = [&](double b, const std::pair<double, double>& r) { return b * factor / r.second; };
  if (bytes <= rows.front().first) return at_row(bytes, rows.front());
  if (bytes >= rows.back().first) return at_row(bytes, rows.back());
  const auto hi = std::lower_bound(rows.begin(), rows.end(), bytes,
                                   [](const auto& r, double b) { return r.first < b; });
  const auto lo = hi - 1;
  const double t0 = at_row(lo->first, *lo), t1 = at_row(hi->first, *hi);
  return t0 + (bytes - lo->first) * (t1 - t0) / (hi->first - lo->first);
}

namespace {

// The achieved bus bandwidth of a measured all-reduce of `bytes` once the tuner's latency
// is taken off; outside the table, that of its nearest end (the bandwidth held, not the
// time). 0 where the measured time is within the tuner's latency.
double achieved_bus_bandwidth(const NcclSpec& spec,
                              const std::vector<std::pair<double, double>>& rows, double bytes,
                              NcclShape shape) {
  const double at = std::clamp(bytes, rows.front().first, rows.back().first);
  const double latency = nccl_candidates(spec, Collective::all_reduce, at, shape).front().latency;
  const double transfer = measured_all_reduce_seconds(rows, shape.ranks, at) - latency;
  if (transfer <= 0) return 0;
  return at * bus_bandwidth_factor(Collective::all_reduce, shape.ranks) / transfer;
}

}  // namespace

NcclChoice nccl_choose(const NcclSpec& spec, Collective c, double bytes, NcclShape shape) {
  check(spec, bytes, shape);
  if (shape.ranks == 1) return NcclChoice{};
  NcclChoice pick = nccl_candidates(spec, c, bytes, shape).front();
  // A measured table for this group in one node: the tuner's pick and latency, the
  // bandwidth the table shows. Ring collectives only; all-to-all and broadcast keep the
  // tuner's bandwidth.
  const auto table = spec.measured_all_reduce_busbw.find(shape.ranks);
  const bool ring_collective =
      c == Collective::all_reduce || c == Collective::all_gather || c == Collective::reduce_scatter;
  if (shape.nodes != 1 || !ring_collective || table == spec.measured_all_reduce_busbw.end() ||
      bytes <= 0)
    return pick;
  const double bus = achieved_bus_bandwidth(spec, table->second, bytes, shape);
  if (bus <= 0) return pick;
  pick.algorithm_bandwidth = bus * shape.ranks / ring_steps(c, shape.ranks);
  pick.measured = true;
  return finish(pick, c, bytes, shape.ranks);
}

std::string nccl_choice_label(const NcclChoice& c) {
  return std::string(nccl_algorithm_name(c.algorithm)) + "/" +
         std::string(nccl_protocol_name(c.protocol)) + " x" + std::to_string(c.channels) +
         (c.measured ? " measured" : "");
}

NcclShape nccl_shape_of(const std::vector<int>& members, const std::function<int(int)>& node_of,
                        const std::function<int(int)>& nic_of) {
  std::map<int, std::set<int>> nics_of_node;
  for (int m : members) nics_of_node[node_of(m)].insert(nic_of(m));
  NcclShape shape;
  shape.ranks = static_cast<int>(members.size());
  shape.nodes = static_cast<int>(nics_of_node.size());
  shape.nics = 0;
  for (const auto& [node, nics] : nics_of_node)
    shape.nics = shape.nics == 0 ? static_cast<int>(nics.size())
                                 : std::min(shape.nics, static_cast<int>(nics.size()));
  shape.nics = std::max(1, shape.nics);
  return shape;
}

}  // namespace tandem::sim
