// Building the SimGrid platform of platform.hpp, in one of two layouts. Fat tree (and a
// single domain, and a rail-optimized fabric whose spine is not oversubscribed): a star zone
// of full zones, one per NVLink domain, routes by table lookup. Rail-optimized with an
// oversubscribed spine: one Dijkstra zone of hosts, domain switches and rail routers joined by
// directed edges. SimGrid's Dijkstra weighs an edge by its number of links and forbids
// empty edges, so every edge carries at least one link and the intended path is the unique
// shortest one: inside a domain 2 links (vs 4 through a rail); same rail 4 (vs 5 over the
// spine); cross rail 5 (vs 6 hopping through the domain's GPU on the destination rail
// first). Without an nvlink_domain section a domain is a node, and the zones, switches and
// names are those of the node-by-node platform ("node-<n>").
#include "sim/platform.hpp"

#include <algorithm>
#include <simgrid/s4u/NetZone.hpp>
#include <string>

#include "core/error.hpp"

namespace tandem::sim {
namespace {

namespace s4u = simgrid::s4u;
using Dir = s4u::LinkInRoute::Direction;

s4u::LinkInRoute up(s4u::Link* l) {
  return s4u::LinkInRoute(l, Dir::UP);
}
s4u::LinkInRoute down(s4u::Link* l) {
  return s4u::LinkInRoute(l, Dir::DOWN);
}

void check(const Topology& t, int world_size) {
  if (world_size < 1)
    throw ConfigError("world_size", std::to_string(world_size), "must be at least 1");
  const int per_domain = gpus_per_nvlink_domain(t);
  const bool domain = t.nvlink_domain.gpus > 0;
  if (world_size > per_domain && t.fabric.nics_per_node < 1)
    throw ConfigError("world_size", std::to_string(world_size),
                      "needs more than one " + std::string(domain ? "NVLink domain" : "node") +
                          " of " + std::to_string(per_domain) + " ranks, and topology " + t.name +
                          " has no NICs (fabric.nics_per_node = 0)");
}

// "node-3" without a domain section (a domain is a node), "nvl-3" with one.
std::string domain_name(const Topology& t, int domain) {
  return (t.nvlink_domain.gpus > 0 ? "nvl-" : "node-") + std::to_string(domain);
}

// Links shared by both layouts: the NICs of every node and the fabric's core or spine.
void create_fabric_links(s4u::NetZone* zone, const Topology& t, Platform& p, int nics) {
  for (int n = 0; n < p.nodes; ++n)
    for (int i = 0; i < nics; ++i)
      p.nic_links.push_back(
          zone->create_split_duplex_link("nic-" + std::to_string(n) + "-" + std::to_string(i),
                                         t.fabric.nic.bandwidth.value)
              ->set_latency(t.fabric.nic.latency.value / 2)
              ->seal());
  if (nics == 0) return;
  const bool rail = t.fabric.kind == FabricKind::rail_optimized;
  const double injection = static_cast<double>(p.nodes) * nics * t.fabric.nic.bandwidth.value;
  p.fabric_link = zone->create_link(rail ? "spine" : "core", injection / t.fabric.oversubscription)
                      ->set_latency(0)
                      ->seal();
}

s4u::Link* create_gpu_link(s4u::NetZone* zone, const Topology& t, int rank) {
  return zone
      ->create_split_duplex_link("gpu-" + std::to_string(rank), t.node.gpu_link.bandwidth.value)
      ->set_latency(t.node.gpu_link.latency.value / 2)
      ->seal();
}

// Fat tree (and any single domain): a star of domain zones. Each NVLink domain is a full
// zone of its GPUs and a gateway router (GPU pairs: both GPU links; GPU ↔ gateway: GPU link
// + its node's NIC); the star adds the core to every inter-domain route (once: the star
// drops the duplicate). Routes are table lookups, so nothing grows faster than the ranks
// times the domain size.
void build_hierarchical(const Topology& t, Platform& p, int nics) {
  auto* top = s4u::create_star_zone("tandem");
  create_fabric_links(top, t, p, nics);
  const double host_speed = t.gpu.peak_bf16.value;  // flop/s; compute is priced elsewhere
  const int per_domain = gpus_per_nvlink_domain(t);
  for (int d = 0; d < p.nvlink_domains; ++d) {
    auto* zone = s4u::create_full_zone(domain_name(t, d));
    zone->set_parent(top);
    auto* gateway = zone->create_router(domain_name(t, d) + "-gateway");
    const int first = d * per_domain;
    const int last = std::min(first + per_domain, p.world_size);  // one past
    for (int r = first; r < last; ++r) {
      p.hosts.push_back(zone->create_host("rank-" + std::to_string(r), host_speed));
      p.gpu_links.push_back(create_gpu_link(zone, t, r));
    }
    for (int a = first; a < last; ++a) {
      auto* from = p.hosts[static_cast<std::size_t>(a)]->get_netpoint();
      auto* gpu_a = p.gpu_links[static_cast<std::size_t>(a)];
      for (int b = first; b < last; ++b)
        if (a != b)
          zone->add_route(from, p.hosts[static_cast<std::size_t>(b)]->get_netpoint(), nullptr,
                          nullptr, {up(gpu_a), down(p.gpu_links[static_cast<std::size_t>(b)])},
                          false);
      if (nics == 0) continue;
      const RankPlacement& at = p.placement[static_cast<std::size_t>(a)];
      auto* nic =
          p.nic_links[static_cast<std::size_t>(at.node * nics + nic_of_gpu(t, at.local_rank))];
      zone->add_route(from, gateway, nullptr, nullptr, {up(gpu_a), up(nic)}, false);
      zone->add_route(gateway, from, nullptr, nullptr, {down(nic), down(gpu_a)}, false);
    }
    zone->seal();
    if (nics > 0)
      top->add_route(zone->get_netpoint(), nullptr, gateway, nullptr, {up(p.fabric_link)}, true);
  }
  top->seal();
}

// Rail-optimized: one Dijkstra zone (see the top of this file), because whether a route
// crosses the spine depends on both GPUs, which a hierarchy of zones cannot see. A route
// costs a shortest-path search the first time its source sends (about 2 ms at 3072 ranks).
void build_rail(const Topology& t, Platform& p, int nics) {
  auto* zone = s4u::create_dijkstra_zone("tandem", true);
  create_fabric_links(zone, t, p, nics);
  std::vector<simgrid::kernel::routing::NetPoint*> switches;  // (nvlink_domains)
  for (int d = 0; d < p.nvlink_domains; ++d)
    switches.push_back(zone->create_router(domain_name(t, d) + "-switch"));
  std::vector<simgrid::kernel::routing::NetPoint*> rails;  // (nics)
  for (int i = 0; i < nics; ++i) rails.push_back(zone->create_router("rail-" + std::to_string(i)));
  for (int a = 0; a < nics; ++a)
    for (int b = 0; b < nics; ++b)
      if (a != b) zone->add_route(rails[a], rails[b], nullptr, nullptr, {up(p.fabric_link)}, false);

  const double host_speed = t.gpu.peak_bf16.value;
  for (const auto& place : p.placement) {
    auto* host = zone->create_host("rank-" + std::to_string(place.rank), host_speed);
    auto* gpu = create_gpu_link(zone, t, place.rank);
    p.hosts.push_back(host);
    p.gpu_links.push_back(gpu);
    auto* self = host->get_netpoint();
    auto* sw = switches[static_cast<std::size_t>(place.nvlink_domain)];
    zone->add_route(self, sw, nullptr, nullptr, {up(gpu)}, false);
    zone->add_route(sw, self, nullptr, nullptr, {down(gpu)}, false);
    const int nic_index = nic_of_gpu(t, place.local_rank);
    auto* nic = p.nic_links[static_cast<std::size_t>(place.node * nics + nic_index)];
    auto* rail = rails[static_cast<std::size_t>(nic_index)];
    zone->add_route(self, rail, nullptr, nullptr, {up(gpu), up(nic)}, false);
    zone->add_route(rail, self, nullptr, nullptr, {down(nic), down(gpu)}, false);
  }
  zone->seal();
}

// SimGrid's per-host extension slot for NcclPlatformInfo: the slot number is made once per
// process (SimGrid's plugin idiom); the data lives on the hosts of one engine.
struct NcclHostData {
  std::shared_ptr<const NcclPlatformInfo> info;
};

simgrid::xbt::Extension<s4u::Host, NcclHostData> nccl_slot() {
  static const auto slot = s4u::Host::extension_create<NcclHostData>();
  return slot;
}

void attach_nccl(const Topology& t, Platform& p) {
  if (!t.nccl.enabled) return;
  auto info = std::make_shared<NcclPlatformInfo>();
  info->spec = t.nccl;
  info->gpu_link = t.node.gpu_link.bandwidth.value;
  for (const auto& place : p.placement) {
    info->node_of.push_back(place.nvlink_domain);
    info->nic_of.push_back(nic_in_nvlink_domain(t, place.rank));
  }
  for (auto* host : p.hosts) host->extension_set(nccl_slot(), new NcclHostData{info});
}

}  // namespace

bool rail_routes_matter(const Topology& t) {
  return t.fabric.kind == FabricKind::rail_optimized && t.fabric.oversubscription > 1.0;
}

const NcclPlatformInfo* nccl_info(const simgrid::s4u::Host* host) {
  if (host == nullptr) return nullptr;
  const auto* data = host->extension(nccl_slot());
  return data ? data->info.get() : nullptr;
}

bool Platform::within_one_nvlink_domain(const std::vector<int>& members) const {
  for (int m : members)
    if (placement.at(static_cast<std::size_t>(m)).nvlink_domain !=
        placement.at(static_cast<std::size_t>(members.front())).nvlink_domain)
      return false;
  return true;
}

Platform build_platform(const Topology& t, int world_size) {
  check(t, world_size);
  Platform p;
  p.world_size = world_size;
  p.placement = place_ranks(world_size, t);
  p.nodes = p.placement.back().node + 1;
  p.nvlink_domains = p.placement.back().nvlink_domain + 1;
  // NICs only join domains: the ranks of one domain never send through them.
  const int nics = p.nvlink_domains > 1 ? t.fabric.nics_per_node : 0;
  if (nics > 0 && rail_routes_matter(t))
    build_rail(t, p, nics);
  else
    build_hierarchical(t, p, nics);
  attach_nccl(t, p);
  return p;
}

}  // namespace tandem::sim
