// The token dispatch of a mixture-of-experts layer on the CPU, as Megatron-Core's MoE layer
// runs it with the alltoall token dispatcher (dropless):
//   permute    x (T, H) → x_p (T·k, H): the k routed copies of every token, grouped by
//              expert (expert-major, then token, then slot; kernels/math/moe.hpp)
//   experts    y_p = grouped GEMM: expert e's row block of x_p times its own weight
//   unpermute  out[t] = Σ_slot gate[t, slot] · y_p[row of (t, slot)], in slot order
// and the backward of each. With expert parallelism, permute and unpermute are the
// dispatcher's local steps before the first all-to-all and after the last one (experts
// are numbered rank by rank, so expert-major is also destination-rank-major); the experts
// then see their rows regrouped after the all-to-all, which this file does not do.
// The row maps tie the two orders together:
//   source_of_row (T·k): the copy i = t·k + slot a permuted row holds (t = i / k)
//   row_of_copy   (T·k): the permuted row of copy i (the inverse)
// Megatron multiplies by the gates inside the experts (after the activation, before the
// second GEMM, whose bias it scales by the gate too) and sums without them in unpermute;
// the second GEMM being linear, applying them at the combine gives the same values up to
// rounding.
// Every call is deterministic: each output row is written by one thread, sums run in a
// fixed order, and the values do not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::cpu {

struct MoeShape {
  std::int64_t tokens = 0;   // T
  std::int64_t hidden = 0;   // H, the width of the rows moved
  std::int64_t experts = 0;  // E
  std::int64_t top_k = 0;    // k: slots per token (the dispatch table's width)
  // Permuted rows, the slots that hold a copy; −1: every slot (T·k, dropless). With token
  // dropping a slot may be −1 (no copy; kernels/math/moe.hpp) and the rows fewer.
  std::int64_t rows = -1;
};

TANDEM_HOST_DEVICE inline std::int64_t permuted_rows(MoeShape s) {
  return s.rows >= 0 ? s.rows : s.tokens * s.top_k;
}

// Below, "T·k" rows read permuted_rows(s) when slots are dropped, and a row map entry of −1
// (row_of_copy of a dropped slot) is skipped.
// Throws std::invalid_argument unless tokens ≥ 0, hidden ≥ 1, experts ≥ 1, top_k ≥ 1,
// every top[t, slot] is an expert index in [0, experts) or −1, and the copies number rows.
void moe_permute(MoeShape s, const float* x,        // (T, H)
                 const std::int32_t* top,           // (T, k) the router's experts
                 float* permuted,                   // (T·k, H) written
                 std::int64_t* source_of_row,       // (T·k) written
                 std::int64_t* row_of_copy,         // (T·k) written
                 std::int64_t* tokens_per_expert);  // (E) written

// dx (T, H) written: dx[t] = Σ_slot dpermuted[row_of_copy[t·k + slot]], in slot order.
void moe_permute_backward(MoeShape s, const float* dpermuted,  // (T·k, H)
                          const std::int64_t* row_of_copy,     // (T·k)
                          float* dx);                          // (T, H)

// The combine: out (T, H) written, out[t] = Σ_slot gates[t, slot] · y[row_of_copy[t·k +
// slot]], in slot order. The row maps' entries must lie in [0, T·k) (checked).
void moe_unpermute(MoeShape s, const float* y,       // (T·k, H) expert outputs, permuted
                   const float* gates,               // (T, k)
                   const std::int64_t* row_of_copy,  // (T·k)
                   float* out);                      // (T, H)

// Both written: dy[row] = gates[i] · dout[i / k] for i = source_of_row[row], and
// dgates[t, slot] = <dout[t], y[row_of_copy[t·k + slot]]> (summed in double).
void moe_unpermute_backward(MoeShape s, const float* dout,      // (T, H)
                            const float* y,                     // (T·k, H)
                            const float* gates,                 // (T, k)
                            const std::int64_t* source_of_row,  // (T·k)
                            const std::int64_t* row_of_copy,    // (T·k)
                            float* dy,                          // (T·k, H)
                            float* dgates);                     // (T, k)

// How each expert's weight matrix is stored, expert-major and contiguous in (E, …).
enum class ExpertWeightLayout {
  // (in, out), y = x·w: Megatron's GroupedMLP (grouped_gemm's gmm) viewed its weight1 as
  // (E, H, F) and its weight2 as (E, F, H).
  kInOut,
  // (out, in), y = x·wᵀ: TransformerEngine's GroupedLinear (its weight0 … weight{E−1}
  // stacked), behind Megatron's TEGroupedMLP, and our linear layers (kernels/cpu/gemm.hpp).
  kOutIn,
};

// The experts' grouped GEMM: rows = Σ tokens_per_expert, expert e owns the next
// tokens_per_expert[e] rows of x and y.
struct GroupedGemmShape {
  std::int64_t rows = 0;     // T·k
  std::int64_t experts = 0;  // E
  std::int64_t in = 0;       // H for fc1
  std::int64_t out = 0;      // F for fc1
  ExpertWeightLayout layout = ExpertWeightLayout::kInOut;
};

// y (rows, out) written: y_e = x_e · w_e (kInOut) or x_e · w_eᵀ (kOutIn) per expert through
// gemm(), experts with no rows skipped. Throws std::invalid_argument unless rows ≥ 0,
// experts, in, out ≥ 1, every tokens_per_expert[e] ≥ 0 and their sum is rows.
void moe_grouped_gemm(GroupedGemmShape s, const float* x,     // (rows, in)
                      const float* w,                         // (E, in, out) or (E, out, in)
                      const std::int64_t* tokens_per_expert,  // (E)
                      float* y);                              // (rows, out)

// dx (rows, in) written: dx_e = dy_e · (w_e as (in, out))ᵀ. dw accumulated: dw_e += the
// gradient, x_eᵀ · dy_e (kInOut) or dy_eᵀ · x_e (kOutIn), through gemm with β = 1 as the
// linear layers' weight gradients accumulate over microbatches; an expert with no rows
// leaves its dw_e unchanged.
void moe_grouped_gemm_backward(GroupedGemmShape s, const float* x,     // (rows, in)
                               const float* w,                         // as in the forward
                               const float* dy,                        // (rows, out)
                               const std::int64_t* tokens_per_expert,  // (E)
                               float* dx,                              // (rows, in)
                               float* dw);                             // as w

}  // namespace tandem::kernels::cpu
