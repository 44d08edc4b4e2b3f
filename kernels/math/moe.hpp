// Index and per-element math of the mixture-of-experts token dispatch (Megatron-Core's
// permute / unpermute, dropless, as its alltoall token dispatcher runs them on one rank):
// shared by the CPU loops of kernels/cpu/moe.cpp and a later CUDA kernel.
//
// The router sends every token t to k experts, top (T, k). Routed copy i = t·k + slot goes
// to expert top[i]. The T·k copies are grouped by expert, expert-major, and within one
// expert in copy order (token, then slot): the order Megatron's permute gets from a stable
// argsort of the transposed routing map (E, T). There a token cannot go to one expert
// twice (the map is a mask); here such copies are kept, one per slot, in slot order.
// Example, T = 3, k = 2, E = 4, top = [[1, 0], [1, 2], [0, 1]] (expert 3 gets nothing):
//   copy i          0  1  2  3  4  5
//   expert top[i]   1  0  1  2  0  1
//   counts        = (2, 3, 1, 0)           offsets = (0, 2, 5, 6, 6)
//   source_of_row = (1, 4, 0, 2, 5, 3)     rows 0-1: expert 0, 2-4: expert 1, 5: expert 2
//   row_of_copy   = (2, 0, 3, 5, 1, 4)     (the inverse permutation)
// With token dropping (kernels/math/router.hpp) a slot may hold −1, no copy: it is skipped,
// its row_of_copy is −1, and a token may have more slots than k (padding's filler rows).
// Every function expects −1 ≤ top[i] < experts (kernels/cpu/moe.cpp checks it) and
// allocates nothing: scratch comes from the caller.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// counts (E) = how many of the copies (T·k) of top go to each expert.
TANDEM_HOST_DEVICE inline void moe_count_copies(const std::int32_t* top, std::int64_t copies,
                                                std::int64_t experts, std::int64_t* counts) {
  for (std::int64_t e = 0; e < experts; ++e) counts[e] = 0;
  for (std::int64_t i = 0; i < copies; ++i)
    if (top[i] >= 0) ++counts[top[i]];
}

// offsets (E + 1): offsets[e] = the first row of expert e, counts[0] + … + counts[e − 1];
// offsets[E] = the number of copies.
TANDEM_HOST_DEVICE inline void moe_expert_offsets(const std::int64_t* counts, std::int64_t experts,
                                                  std::int64_t* offsets) {
  offsets[0] = 0;
  for (std::int64_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + counts[e];
}

// The permutation, a counting sort of the copies by expert that keeps copy order:
// row_of_copy (T·k)[i] = the row of copy i; source_of_row (T·k)[row] = the copy it holds.
// next (E) is scratch (it ends as offsets[1..E]).
TANDEM_HOST_DEVICE inline void moe_group_by_expert(const std::int32_t* top, std::int64_t copies,
                                                   const std::int64_t* offsets,
                                                   std::int64_t experts, std::int64_t* next,
                                                   std::int64_t* row_of_copy,
                                                   std::int64_t* source_of_row) {
  for (std::int64_t e = 0; e < experts; ++e) next[e] = offsets[e];
  for (std::int64_t i = 0; i < copies; ++i) {
    if (top[i] < 0) {
      row_of_copy[i] = -1;
      continue;
    }
    const std::int64_t row = next[top[i]]++;
    row_of_copy[i] = row;
    source_of_row[row] = i;
  }
}

// Column c of one token's combined output: Σ over its k slots, in slot order, of
// weights[slot] · rows[row_of_slot[slot]][c], rows being (T·k, hidden); −1 slots skipped. With the
// gates as weights it is the MoE output (unpermute); with weights = nullptr (all 1) the gradient of
// the token from the gradients of its permuted copies (the backward of permute).
TANDEM_HOST_DEVICE inline float moe_combine(const float* rows, std::int64_t hidden,
                                            const std::int64_t* row_of_slot, const float* weights,
                                            std::int64_t k, std::int64_t c) {
  float sum = 0;
  for (std::int64_t slot = 0; slot < k; ++slot) {
    if (row_of_slot[slot] < 0) continue;  // a dropped copy
    const float y = rows[row_of_slot[slot] * hidden + c];
    sum += weights != nullptr ? weights[slot] * y : y;
  }
  return sum;
}

}  // namespace tandem::kernels::math
