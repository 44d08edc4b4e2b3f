// The closed forms of collective_cost.hpp, one line each.
#include "sim/collective_cost.hpp"

#include <stdexcept>
#include <string>

namespace tandem::sim {
namespace {

void check(Bytes bytes, int n, LinkSpec link) {
  if (n < 1) throw std::invalid_argument("collective on " + std::to_string(n) + " ranks");
  if (bytes.value < 0) throw std::invalid_argument("collective of negative size");
  if (!(link.bandwidth.value > 0))
    throw std::invalid_argument("collective over a link of no bandwidth");
}

// (n−1)/n of the bytes over the bandwidth, plus `hops` latencies.
Seconds ring_time(Bytes bytes, int n, LinkSpec link, double bytes_factor, double hops) {
  check(bytes, n, link);
  if (n == 1) return Seconds(0);
  return Seconds(bytes_factor * static_cast<double>(bytes.value) / link.bandwidth.value +
                 hops * link.latency.value);
}

}  // namespace

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::broadcast:
      return "broadcast";
    case Collective::all_to_all:
      return "all_to_all";
  }
  throw std::logic_error("unknown collective");
}

std::optional<Collective> collective_named(std::string_view name) {
  for (auto c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                 Collective::broadcast, Collective::all_to_all})
    if (collective_name(c) == name) return c;
  return std::nullopt;
}

double bus_bandwidth_factor(Collective c, int n) {
  if (n < 1) throw std::invalid_argument("collective on " + std::to_string(n) + " ranks");
  const double share = static_cast<double>(n - 1) / n;
  switch (c) {
    case Collective::all_reduce:
      return 2 * share;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
      return share;
    case Collective::broadcast:
      return 1;
  }
  throw std::logic_error("unknown collective");
}

Seconds ring_all_reduce_time(Bytes bytes, int n, LinkSpec link) {
  return ring_time(bytes, n, link, 2.0 * (n - 1) / n, 2.0 * (n - 1));
}
Seconds ring_all_gather_time(Bytes bytes, int n, LinkSpec link) {
  return ring_time(bytes, n, link, static_cast<double>(n - 1) / n, n - 1);
}
Seconds ring_reduce_scatter_time(Bytes bytes, int n, LinkSpec link) {
  return ring_time(bytes, n, link, static_cast<double>(n - 1) / n, n - 1);
}
Seconds broadcast_time(Bytes bytes, int n, LinkSpec link) {
  return ring_time(bytes, n, link, 1.0, n - 1);
}
Seconds all_to_all_time(Bytes bytes, int n, LinkSpec link) {
  return ring_time(bytes, n, link, static_cast<double>(n - 1) / n, 1.0);
}
Seconds p2p_time(Bytes bytes, LinkSpec link) {
  check(bytes, 2, link);
  return Seconds(link.latency.value + static_cast<double>(bytes.value) / link.bandwidth.value);
}

Seconds collective_time(Collective c, Bytes bytes, int n, LinkSpec link) {
  switch (c) {
    case Collective::all_reduce:
      return ring_all_reduce_time(bytes, n, link);
    case Collective::all_gather:
      return ring_all_gather_time(bytes, n, link);
    case Collective::reduce_scatter:
      return ring_reduce_scatter_time(bytes, n, link);
    case Collective::broadcast:
      return broadcast_time(bytes, n, link);
    case Collective::all_to_all:
      return all_to_all_time(bytes, n, link);
  }
  throw std::logic_error("unknown collective");
}

}  // namespace tandem::sim
