// NCCL as it runs: for one collective on a group of `ranks` GPUs over `nodes` nodes, the
// algorithm (ring, tree, NVLink SHARP) and protocol (LL, LL128, Simple) NCCL's tuner
// picks, and the time it predicts, from the constants of a topology's NcclSpec. The
// behaviour follows NVIDIA/nccl src/graph/tuning.cc (ncclTopoTuneModel,
// ncclTopoGetAlgoTime); the code is ours:
//
//   bus bandwidth  ring:  inside a node the NVLink bus bandwidth B; across nodes
//                         min(B, nics · nic_bus) (channels spread over the NICs a node's
//                         members use; one GPU per node means one NIC)
//                  LL:    min(ll_max, B / 2)     LL128: min(0.92 · B, channels · ll128 cap)
//                  tree (all-reduce): min(0.92 · B, channels · tree cap), then LL: / 3.8
//                         (cap ll_max), LL128: · 7/9 in a node, 120/128 across (cap)
//                  NVLS (all-reduce in one node): the NVLS bus bandwidth measured on r
//                  GPUs (nvls_bus_ranks)
//   algorithm bw   ring: bus · n / steps (steps 2(n−1) all-reduce, n−1 all-gather /
//                  reduce-scatter, n broadcast); tree: bus / 2 times NCCL's tree
//                  correction for mid sizes; NVLS: bus · r / 2(r−1) for any group (each
//                  GPU's buffer crosses its NVLink once each way, the switch reducing)
//   latency        ring: base + intra steps · NVLink step + inter steps · network step
//                  (2(nodes−1) inter steps for all-reduce, nodes−1 otherwise; ×1.4 for
//                  large multi-node Simple all-reduce); tree: base + 2((ppn−1) · NVLink
//                  step + log2(nodes) · network step); NVLS: its own latency
//   time           latency + bytes / algorithm bw; the pick is the fastest candidate
//
// `bytes` is nccl-tests' size (collective_cost.hpp). All-to-all is no tuner algorithm:
// it is priced as NCCL's grouped send/recv, (n−1)/n · bytes over the bus bandwidth plus
// one Simple ring step.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"
#include "sim/collective_cost.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

enum class NcclAlgorithm { ring, tree, nvls };
enum class NcclProtocol { ll, ll128, simple };

std::string_view nccl_algorithm_name(NcclAlgorithm a);  // "ring", "tree", "nvls"
std::string_view nccl_protocol_name(NcclProtocol p);    // "LL", "LL128", "Simple"

// The shape of a group as NCCL's tuner sees it.
struct NcclShape {
  int ranks = 1;
  int nodes = 1;
  int nics = 1;  // NICs per node that the group's rings cross (channels spread over them)
};

struct NcclChoice {
  NcclAlgorithm algorithm = NcclAlgorithm::ring;
  NcclProtocol protocol = NcclProtocol::simple;
  int channels = 1;                // rings across nodes (one per NIC used); inside a node NCCL's
  double latency = 0;              // seconds
  double bus_bandwidth = 0;        // bytes/s, as nccl-tests reports it (algorithm bw · factor)
  double algorithm_bandwidth = 0;  // bytes/s
  double seconds = 0;              // latency + bytes / algorithm_bandwidth
  bool measured = false;           // the bandwidth is that of the spec's measured nccl-tests table
};

// NCCL's view of a group of global ranks: how many, on how many nodes, and the NICs per
// node its channels can spread over (the fewest any node's members send through).
// node_of and nic_of give a rank's node and the NIC (within the node) it sends through.
NcclShape nccl_shape_of(const std::vector<int>& members, const std::function<int(int)>& node_of,
                        const std::function<int(int)>& nic_of);

// Every candidate the tuner weighs for this collective (disabled ones left out), fastest
// first. Throws std::invalid_argument for a disabled spec, ranks < 1, nodes < 1 or more
// nodes than ranks, or negative bytes.
std::vector<NcclChoice> nccl_candidates(const NcclSpec& spec, Collective c, double bytes,
                                        NcclShape shape);
// The tuner's pick: the fastest candidate. One rank costs nothing. Where the spec holds a
// measured all-reduce table for a group of this size in one node, a ring collective
// (all-reduce, all-gather, reduce-scatter) keeps the pick's latency and takes the bus
// bandwidth the table shows at this size once that latency is taken off (outside the
// table, the bandwidth of its nearest end): so an all-reduce in the table's range takes
// the measured time.
NcclChoice nccl_choose(const NcclSpec& spec, Collective c, double bytes, NcclShape shape);

// The measured all-reduce time of `bytes` on `ranks` GPUs from nccl-tests rows (bytes, bus
// bytes/s), linear between rows; outside them, at the bus bandwidth of the nearest row.
double measured_all_reduce_seconds(const std::vector<std::pair<double, double>>& rows, int ranks,
                                   double bytes);

// "ring/LL128 x8" for reports and traces.
std::string nccl_choice_label(const NcclChoice& choice);

}  // namespace tandem::sim
