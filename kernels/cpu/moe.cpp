// MoE token dispatch loops; see moe.hpp. The row maps are computed serially (O(T·k)
// integer work, a sliver of the layer); the row copies and sums run in parallel over rows
// or tokens, each output row written by one thread.
#include "kernels/cpu/moe.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/threads.hpp"
#include "kernels/math/host_device.hpp"
#include "kernels/math/moe.hpp"

namespace tandem::kernels::cpu {

namespace {

void check(const char* op, MoeShape s) {
  if (s.tokens < 0 || s.hidden < 1 || s.experts < 1 || s.top_k < 1)
    throw std::invalid_argument(std::string(op) + ": tokens " + std::to_string(s.tokens) +
                                ", hidden " + std::to_string(s.hidden) + ", experts " +
                                std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) +
                                ": need tokens ≥ 0, hidden ≥ 1, experts ≥ 1 and top_k ≥ 1");
}

void check_top(MoeShape s, const std::int32_t* top) {
  std::int64_t copies = 0;
  for (std::int64_t i = 0; i < s.tokens * s.top_k; ++i) {
    if (top[i] < -1 || top[i] >= s.experts)
      throw std::invalid_argument("moe_permute: top[" + std::to_string(i / s.top_k) + ", " +
                                  std::to_string(i % s.top_k) + "] = " + std::to_string(top[i]) +
                                  ": need an expert index in [0, experts = " +
                                  std::to_string(s.experts) + ") or −1 (dropped)");
    copies += top[i] >= 0 ? 1 : 0;
  }
  if (copies != permuted_rows(s))
    throw std::invalid_argument("moe_permute: top holds " + std::to_string(copies) +
                                " copies for " + std::to_string(permuted_rows(s)) +
                                " permuted rows: need one row per copy");
}

// row_of_copy (T·k): a permuted row, or −1 for a dropped slot.
void check_row_of_copy(const char* op, MoeShape s, const std::int64_t* rows) {
  const std::int64_t slots = s.tokens * s.top_k, R = permuted_rows(s);
  for (std::int64_t i = 0; i < slots; ++i)
    if (rows[i] < -1 || rows[i] >= R)
      throw std::invalid_argument(std::string(op) + ": row_of_copy[" + std::to_string(i) +
                                  "] = " + std::to_string(rows[i]) + ": need a row in [0, " +
                                  std::to_string(R) + ") or −1 (dropped)");
}

// source_of_row (rows): the slot each permuted row holds.
void check_source_of_row(const char* op, MoeShape s, const std::int64_t* source) {
  const std::int64_t slots = s.tokens * s.top_k, R = permuted_rows(s);
  for (std::int64_t r = 0; r < R; ++r)
    if (source[r] < 0 || source[r] >= slots)
      throw std::invalid_argument(std::string(op) + ": source_of_row[" + std::to_string(r) +
                                  "] = " + std::to_string(source[r]) +
                                  ": need a slot in [0, T·k = " + std::to_string(slots) + ")");
}

// out (T, H) = per token the slot-ordered sum of its copies' rows of `rows` (T·k, H),
// weighted by weights (T, k), or unweighted when weights is nullptr.
void combine(MoeShape s, const float* rows, const float* weights, const std::int64_t* row_of_copy,
             float* out) {
  const std::int64_t H = s.hidden, k = s.top_k;
#pragma omp parallel for schedule(static) if (s.tokens * k * H >= kMinParallelElements)
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const std::int64_t* mine = row_of_copy + t * k;
    const float* w = weights != nullptr ? weights + t * k : nullptr;
    float* o = out + t * H;
    for (std::int64_t c = 0; c < H; ++c) o[c] = math::moe_combine(rows, H, mine, w, k, c);
  }
}

void check(const char* op, GroupedGemmShape s, const std::int64_t* tokens_per_expert) {
  if (s.rows < 0 || s.experts < 1 || s.in < 1 || s.out < 1)
    throw std::invalid_argument(std::string(op) + ": rows " + std::to_string(s.rows) +
                                ", experts " + std::to_string(s.experts) + ", in " +
                                std::to_string(s.in) + ", out " + std::to_string(s.out) +
                                ": need rows ≥ 0 and experts, in, out ≥ 1");
  std::int64_t sum = 0;
  for (std::int64_t e = 0; e < s.experts; ++e) {
    if (tokens_per_expert[e] < 0)
      throw std::invalid_argument(std::string(op) + ": tokens_per_expert[" + std::to_string(e) +
                                  "] = " + std::to_string(tokens_per_expert[e]) +
                                  ": need a count ≥ 0");
    sum += tokens_per_expert[e];
  }
  if (sum != s.rows)
    throw std::invalid_argument(std::string(op) + ": tokens_per_expert sums to " +
                                std::to_string(sum) + ", rows " + std::to_string(s.rows) +
                                ": need the counts to sum to rows");
}

}  // namespace

void moe_permute(MoeShape s, const float* x, const std::int32_t* top, float* permuted,
                 std::int64_t* source_of_row, std::int64_t* row_of_copy,
                 std::int64_t* tokens_per_expert) {
  check("moe_permute", s);
  check_top(s, top);
  const std::int64_t H = s.hidden, k = s.top_k, E = s.experts, slots = s.tokens * k,
                     rows = permuted_rows(s);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(E + 1)),
      next(static_cast<std::size_t>(E));
  math::moe_count_copies(top, slots, E, tokens_per_expert);
  math::moe_expert_offsets(tokens_per_expert, E, offsets.data());
  math::moe_group_by_expert(top, slots, offsets.data(), E, next.data(), row_of_copy, source_of_row);
#pragma omp parallel for schedule(static) if (rows * H >= kMinParallelElements)
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* from = x + (source_of_row[row] / k) * H;
    std::copy(from, from + H, permuted + row * H);
  }
}

void moe_permute_backward(MoeShape s, const float* dpermuted, const std::int64_t* row_of_copy,
                          float* dx) {
  check("moe_permute_backward", s);
  check_row_of_copy("moe_permute_backward", s, row_of_copy);
  combine(s, dpermuted, nullptr, row_of_copy, dx);
}

void moe_unpermute(MoeShape s, const float* y, const float* gates, const std::int64_t* row_of_copy,
                   float* out) {
  check("moe_unpermute", s);
  check_row_of_copy("moe_unpermute", s, row_of_copy);
  combine(s, y, gates, row_of_copy, out);
}

void moe_unpermute_backward(MoeShape s, const float* dout, const float* y, const float* gates,
                            const std::int64_t* source_of_row, const std::int64_t* row_of_copy,
                            float* dy, float* dgates) {
  check("moe_unpermute_backward", s);
  check_source_of_row("moe_unpermute_backward", s, source_of_row);
  check_row_of_copy("moe_unpermute_backward", s, row_of_copy);
  const std::int64_t H = s.hidden, k = s.top_k, copies = s.tokens * k, rows = permuted_rows(s);
  const bool parallel = copies * H >= kMinParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t i = source_of_row[row];
    const float gate = gates[i];
    const float* g = dout + (i / k) * H;
    float* d = dy + row * H;
#pragma omp simd
    for (std::int64_t c = 0; c < H; ++c) d[c] = gate * g[c];
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t i = 0; i < copies; ++i) {
    if (row_of_copy[i] < 0) {  // a dropped slot: its gate was 0 and stays out of the loss
      dgates[i] = 0.0f;
      continue;
    }
    const float* g = dout + (i / k) * H;
    const float* out_row = y + row_of_copy[i] * H;
    double dot = 0;
    TANDEM_SIMD_SUM(dot)
    for (std::int64_t c = 0; c < H; ++c)
      dot += static_cast<double>(g[c]) * static_cast<double>(out_row[c]);
    dgates[i] = static_cast<float>(dot);
  }
}

void moe_grouped_gemm(GroupedGemmShape s, const float* x, const float* w,
                      const std::int64_t* tokens_per_expert, float* y) {
  check("moe_grouped_gemm", s, tokens_per_expert);
  const bool out_in = s.layout == ExpertWeightLayout::kOutIn;
  std::int64_t first = 0;  // the expert's first row
  for (std::int64_t e = 0; e < s.experts; ++e) {
    const std::int64_t n = tokens_per_expert[e];
    if (n == 0) continue;
    // y_e (n, out) = x_e (n, in) · op(w_e), op(w_e) (in, out).
    gemm({.m = n, .n = s.out, .k = s.in, .transpose_b = out_in}, x + first * s.in,
         w + e * s.in * s.out, y + first * s.out);
    first += n;
  }
}

void moe_grouped_gemm_backward(GroupedGemmShape s, const float* x, const float* w, const float* dy,
                               const std::int64_t* tokens_per_expert, float* dx, float* dw) {
  check("moe_grouped_gemm_backward", s, tokens_per_expert);
  const bool out_in = s.layout == ExpertWeightLayout::kOutIn;
  std::int64_t first = 0;
  for (std::int64_t e = 0; e < s.experts; ++e) {
    const std::int64_t n = tokens_per_expert[e];
    if (n == 0) continue;
    const float* x_e = x + first * s.in;
    const float* dy_e = dy + first * s.out;
    const std::int64_t w_offset = e * s.in * s.out;
    // dx_e (n, in) = dy_e (n, out) · op(w_e)ᵀ.
    gemm({.m = n, .n = s.in, .k = s.out, .transpose_b = !out_in}, dy_e, w + w_offset,
         dx + first * s.in);
    if (out_in) {
      // dw_e (out, in) += dy_eᵀ · x_e.
      gemm({.m = s.out, .n = s.in, .k = n, .transpose_a = true, .beta = 1}, dy_e, x_e,
           dw + w_offset);
    } else {
      // dw_e (in, out) += x_eᵀ · dy_e.
      gemm({.m = s.in, .n = s.out, .k = n, .transpose_a = true, .beta = 1}, x_e, dy_e,
           dw + w_offset);
    }
    first += n;
  }
}

}  // namespace tandem::kernels::cpu
