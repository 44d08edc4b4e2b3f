// The SimGrid platform of a Topology: one host per rank ("rank-<r>"), each GPU's
// split-duplex link into its NVLink domain's switch (the node's NVSwitch, or the NVSwitch
// trays of a GB200 NVL72 rack joining 18 nodes), each node's NICs, and the fabric between
// domains. Building is linear in the ranks. Routes (a fat tree is a star of node zones, so a
// route is a table lookup; a rail-optimized fabric with an oversubscribed spine is one
// Dijkstra zone, so a route costs a shortest-path search, about 2 ms at 3072 ranks, the
// first time its source sends):
//
//   same domain       GPU link ↑ → domain switch → GPU link ↓ (same node or not)
//   fat tree          GPU link ↑ → NIC ↑ → core → NIC ↓ → GPU link ↓
//   rail, same rail   GPU link ↑ → NIC ↑ → rail switch → NIC ↓ → GPU link ↓
//   rail, cross rail  GPU link ↑ → NIC ↑ → rail switch → spine → rail switch → NIC ↓ → GPU link ↓
//
// A rail-optimized fabric whose spine is not oversubscribed (every preset's) is built as the
// fat tree, its spine in every route between domains: there it never binds and adds no
// latency, so every flow takes the time the rail routes give (rail_routes_matter).
//
// GPU g of a node sends and receives through its node's NIC nic_of_gpu(g) (g itself on
// DGX nodes). NICs carry only traffic between domains: two trays of one NVL72 rack talk
// over NVLink. Without an nvlink_domain section a domain is one node, and all of this is
// the node-by-node platform. The core (fat tree) or spine (rail) is one shared link of
// nodes · nics · nic bandwidth / oversubscription. Latencies are split in halves over the
// two links a hop crosses, so one flow alone takes gpu_link.latency + bytes /
// gpu_link.bandwidth inside a domain and gpu_link.latency + nic.latency + bytes /
// nic.bandwidth between domains. Compute is priced
// by sim/cost_model.hpp; a host's speed (its bf16 peak) is informative only.
#pragma once

#include <memory>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <vector>

#include "topology/placement.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

struct Platform {
  int world_size = 0;
  int nodes = 0;
  int nvlink_domains = 0;
  std::vector<simgrid::s4u::Host*> hosts;      // (world_size): rank r's host, "rank-<r>"
  std::vector<RankPlacement> placement;        // (world_size): node, GPU, domain of rank r
  std::vector<simgrid::s4u::Link*> gpu_links;  // (world_size): split-duplex, "gpu-<r>"
  std::vector<simgrid::s4u::Link*> nic_links;  // (nodes · nics_per_node), "nic-<node>-<i>"
  simgrid::s4u::Link* fabric_link = nullptr;   // "core" or "spine"; null in one domain

  // True when every member sits in one NVLink domain: its transfers cross GPU links only.
  bool within_one_nvlink_domain(const std::vector<int>& members) const;
};

// What the NCCL model (sim/nccl_model.hpp) needs from a platform, reachable from each of
// its hosts so that a communicator built on any host finds it: the topology's NcclSpec
// and, per rank, its node as NCCL sees it and the NIC it sends through. NCCL fuses the
// nodes of a multi-node NVLink domain into one (its MNNVL clique: src/graph/topo.cc), so
// its node is the NVLink domain, and a domain's NICs are numbered across its nodes.
struct NcclPlatformInfo {
  NcclSpec spec;
  std::vector<int> node_of;  // (world_size): the rank's NVLink domain
  std::vector<int> nic_of;   // (world_size): NIC index within the domain
  double gpu_link = 0;       // bytes/s, a GPU's NVLink per direction (node.gpu_link)
};

// The NCCL information build_platform attached to `host`; null when the host has none or
// the topology has no enabled "nccl" section (then collectives stay ideal rings).
const NcclPlatformInfo* nccl_info(const simgrid::s4u::Host* host);

// Whether a rail-optimized fabric needs its own routes (the Dijkstra zone): only when its
// spine is oversubscribed. A spine of nodes · nics · nic bandwidth cannot be saturated by
// the NICs feeding it and adds no latency, so whether a route crosses it changes no flow's
// time; such a fabric is built as a fat tree, whose routes are table lookups (a Dijkstra
// search per sending rank took three quarters of a 6144-rank H100 simulation).
bool rail_routes_matter(const Topology& topology);

// Builds the platform into the engine's (empty) platform and seals it. Call once per
// engine, after configure_network_model (sim/simgrid_config.hpp). Throws ConfigError when
// world_size < 1, or when the ranks need several NVLink domains and the topology has no NICs.
Platform build_platform(const Topology& topology, int world_size);

}  // namespace tandem::sim
