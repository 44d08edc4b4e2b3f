// Argument checks every communicator binding makes before it issues a collective (MPI on
// the cpu binding, NCCL on the cuda binding), with the same messages: each names the call
// and the group ("all_gather on group tp (size 2): output holds 6 elements, expected size ×
// input = 2 × 4 = 8"), so one rank's log line says which collective was misused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace tandem::collective_checks {

// Where a check runs: the collective and the communicator it was issued on.
struct CallSite {
  std::string_view op;     // "all_reduce", "batch_p2p", …
  std::string_view group;  // the communicator's name, "tp", "dp-cp", …
  int group_size = 0;
};

// "all_gather on group tp (size 2)"
std::string describe(const CallSite& where);

// True when the byte ranges of a and b share storage and intersect.
bool overlaps(const Tensor& a, const Tensor& b);

// Each throws std::invalid_argument naming `where` when its rule is broken.
void check_same_dtype(const Tensor& input, const Tensor& output, const CallSite& where);
void check_disjoint(const Tensor& input, const Tensor& output, const CallSite& where);
// have == size × block, e.g. an all-gather's output against its input.
void check_multiple(std::int64_t have, std::string_view have_what, int size, std::int64_t block,
                    std::string_view block_what, const CallSite& where);
// The split sizes of an all_to_all_v: `counts` holds `size` non-negative element counts
// summing to `total` (the tensor named `tensor_what`, e.g. "input" with "send_counts").
void check_split_counts(std::span<const std::int64_t> counts, std::string_view counts_what,
                        std::int64_t total, std::string_view tensor_what, int size,
                        const CallSite& where);
// An all_gather_counts: `all` holds `size` members' `mine` counts.
void check_gathered_counts(std::size_t mine, std::size_t all, int size, const CallSite& where);
// 0 ≤ r < size, e.g. a broadcast's root or a p2p peer.
void check_rank(int r, std::string_view what, int size, const CallSite& where);

}  // namespace tandem::collective_checks
