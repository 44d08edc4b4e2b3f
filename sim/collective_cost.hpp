// Closed-form times of NCCL-like collectives on n ranks joined by links of one bandwidth
// (per direction) and one latency (per hop): pure functions the tests and the SimGrid
// collectives are checked against. `bytes` is what nccl-tests calls the size: the buffer
// for all-reduce and broadcast, the gathered output for all-gather, the input for
// reduce-scatter, each rank's send buffer for all-to-all.
//
//   all-reduce (ring: reduce-scatter then all-gather)  2(n−1)/n · bytes/bw + 2(n−1) · latency
//   all-gather, reduce-scatter (ring)                    (n−1)/n · bytes/bw +  (n−1) · latency
//   broadcast (pipelined chain, fine chunks)                       bytes/bw +  (n−1) · latency
//   all-to-all (every send issued at once, as NCCL's     (n−1)/n · bytes/bw +          latency
//               grouped send/recv)
//   p2p                                                            bytes/bw +          latency
//
// One rank (n = 1) costs nothing. The bus bandwidth nccl-tests reports is the algorithm
// bandwidth (bytes / time) times bus_bandwidth_factor(): 2(n−1)/n for all-reduce, (n−1)/n
// for all-gather, reduce-scatter and all-to-all, 1 for broadcast.
#pragma once

#include <optional>
#include <string_view>

#include "core/units.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all };

std::string_view collective_name(Collective c);  // "all_reduce", …
// The collective of that name; std::nullopt for any other.
std::optional<Collective> collective_named(std::string_view name);

double bus_bandwidth_factor(Collective c, int n);

// Throws std::invalid_argument for n < 1, negative bytes or a non-positive bandwidth.
Seconds ring_all_reduce_time(Bytes bytes, int n, LinkSpec link);
Seconds ring_all_gather_time(Bytes bytes, int n, LinkSpec link);
Seconds ring_reduce_scatter_time(Bytes bytes, int n, LinkSpec link);
Seconds broadcast_time(Bytes bytes, int n, LinkSpec link);
Seconds all_to_all_time(Bytes bytes, int n, LinkSpec link);
Seconds p2p_time(Bytes bytes, LinkSpec link);
Seconds collective_time(Collective c, Bytes bytes, int n, LinkSpec link);

}  // namespace tandem::sim
