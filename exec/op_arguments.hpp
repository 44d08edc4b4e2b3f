// Argument checks and shape reading shared by the real bindings (cpu and cuda): both run
// the same kernels' shape structs (kernels/cpu/*.hpp), so both read them off the tensors
// the same way and reject the same mistakes with the same messages.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/device.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/router.hpp"
#include "kernels/math/copy_columns.hpp"
#include "kernels/math/dropout.hpp"

namespace tandem::op_arguments {

inline void same_numel(const char* op, const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel())
    throw std::invalid_argument(std::string(op) + ": " + a.shape.to_string() + " and " +
                                b.shape.to_string() + " differ in element count");
}

// C of a tensor read as (rows, C).
inline std::int64_t last_dim(const Tensor& t) {
  return t.shape[t.shape.rank() - 1];
}

// A bias over the last dimension of x: its C, checked (bias_gelu, bias_dropout_add).
inline std::int64_t row_bias(const char* op, const Tensor& x, const Tensor& bias) {
  if (x.shape.rank() < 1 || bias.numel() != last_dim(x))
    throw std::invalid_argument(std::string(op) + ": bias " + bias.shape.to_string() +
                                " does not match the last dimension of " + x.shape.to_string());
  return last_dim(x);
}

// The kernels' view of a hidden dropout on a (rows, C) tensor x, checked.
inline kernels::math::HiddenDropoutMask hidden_dropout(const char* op, const Tensor& x,
                                                       const HiddenDropout& d) {
  if (!(d.p >= 0 && d.p < 1))
    throw std::invalid_argument(std::string(op) + ": dropout probability " + std::to_string(d.p) +
                                " is outside [0, 1)");
  if (d.row_offset < 0)
    throw std::invalid_argument(std::string(op) + ": row_offset " + std::to_string(d.row_offset) +
                                " is negative");
  return {.stream = kernels::math::hidden_dropout_stream(d.seed, d.microbatch, d.site),
          .first = static_cast<std::uint64_t>(d.row_offset * last_dim(x)),
          .p = d.p};
}

inline kernels::cpu::AttentionShape attention_shape(const Tensor& qkv) {
  if (qkv.shape.rank() != 5 || qkv.shape[2] != 3)
    throw std::invalid_argument("attention: qkv must be (T, B, 3, heads, head_dim), got " +
                                qkv.shape.to_string());
  return {.B = qkv.shape[1], .T = qkv.shape[0], .NH = qkv.shape[3], .HD = qkv.shape[4]};
}

inline kernels::cpu::AttentionDropout attention_dropout(const AttentionDropout& d) {
  if (!(d.p >= 0 && d.p < 1))
    throw std::invalid_argument("attention: dropout probability " + std::to_string(d.p) +
                                " is outside [0, 1)");
  return {.p = d.p,
          .stream = kernels::math::dropout_stream(d.seed, d.microbatch, d.layer),
          .head_offset = d.head_offset,
          .heads_total = d.heads_total};
}

inline kernels::math::AttentionMask mask_of(AttentionMaskKind m) {
  return m == AttentionMaskKind::causal ? kernels::math::AttentionMask::causal
                                        : kernels::math::AttentionMask::none;
}

template <typename Args>
kernels::cpu::FlashShape flash_shape(const char* op, const Args& a) {
  const FlashGeometry g =
      flash_geometry(op, a.q_source, a.kv_source, a.output, a.lse, a.v_head_dim);
  return {.B = g.B,
          .Tq = g.Tq,
          .Tk = g.Tk,
          .G = g.G,
          .P = g.P,
          .HD = g.head_dim,
          .VD = g.v_head_dim,
          .q_offset = a.q_offset,
          .k_offset = a.k_offset,
          .mask = mask_of(a.mask),
          .kv_only = g.kv_only,
          .accumulate = a.accumulate};
}

inline kernels::math::RouterScore router_score_of(MoeScoreFunction f) {
  return f == MoeScoreFunction::sigmoid ? kernels::math::RouterScore::sigmoid
                                        : kernels::math::RouterScore::softmax;
}

// The router's shape: logits (T, E), top and gates (T, k), probs (T, E).
template <typename Args>
kernels::cpu::RouterShape router_shape(const char* op, const Args& a, bool force_balance) {
  const Shape& p = a.probs.shape;
  const Shape& t = a.top.shape;
  if (p.rank() != 2 || t.rank() != 2 || t[0] != p[0] || a.gates.shape != t || t[1] > p[1] ||
      t[1] < 1)
    throw std::invalid_argument(std::string(op) + ": probs " + p.to_string() + ", top " +
                                t.to_string() + " and gates " + a.gates.shape.to_string() +
                                " must be (T, E), (T, k) and (T, k) with 1 ≤ k ≤ E");
  kernels::cpu::RouterShape s{.tokens = p[0],
                              .experts = p[1],
                              .top_k = t[1],
                              .pre_softmax = a.pre_softmax,
                              .force_balance = force_balance,
                              .score = router_score_of(a.score_function),
                              .scale = a.topk_scaling_factor};
  if constexpr (requires { a.num_groups; }) {
    s.num_groups = a.num_groups;
    s.group_topk = a.group_topk;
  }
  if constexpr (requires { a.grad_gates; }) {
    const Shape& g = a.grad_gates.shape;
    if (g.rank() != 2 || g[0] != t[0] || g[1] < t[1])
      throw std::invalid_argument(std::string(op) + ": grad_gates " + g.to_string() +
                                  " must be (T, W ≥ k) for top " + t.to_string());
    s.grad_gates_width = g[1];
  }
  if (!(s.scale > 0.0f))
    throw std::invalid_argument(std::string(op) + ": topk_scaling_factor " +
                                std::to_string(s.scale) + " must be > 0");
  kernels::cpu::check_router_groups(s);
  return s;
}

// The token dropping's shape: top and gates (T, k), the dispatch tables (T, W).
inline kernels::cpu::TokenDropShape drop_shape(const char* op, const MoeDropTokensArgs& a,
                                               std::int64_t experts) {
  const Shape& t = a.top.shape;
  kernels::cpu::TokenDropShape s{.tokens = t.rank() == 2 ? t[0] : -1,
                                 .experts = experts,
                                 .top_k = t.rank() == 2 ? t[1] : 0,
                                 .capacity = a.capacity,
                                 .policy = a.policy == MoeDropPolicy::position
                                               ? kernels::math::TokenDropPolicy::position
                                               : kernels::math::TokenDropPolicy::probs,
                                 .pad_to_capacity = a.pad_to_capacity};
  const Shape want{s.tokens, s.width()};
  if (t.rank() != 2 || a.gates.shape != t || a.dispatch_top.shape != want ||
      a.dispatch_gates.shape != want || s.top_k < 1 || s.top_k > experts || a.capacity < 0)
    throw std::invalid_argument(
        std::string(op) + ": top " + t.to_string() + ", gates " + a.gates.shape.to_string() +
        ", dispatch_top " + a.dispatch_top.shape.to_string() + " and dispatch_gates " +
        a.dispatch_gates.shape.to_string() + " for " + std::to_string(experts) +
        " experts, capacity " + std::to_string(a.capacity) +
        ": need (T, k), (T, k), (T, W), (T, W) with 1 ≤ k ≤ E, W = k (+ E with padding), "
        "capacity ≥ 0");
  return s;
}

// The dispatch's shape from the tokens (T, H), the permuted rows (R, H) and the slots of
// the routing table (T·k elements: k = slots / T).
inline kernels::cpu::MoeShape moe_shape(const char* op, const Tensor& tokens, const Tensor& copies,
                                        std::int64_t slots, std::int64_t experts) {
  const Shape& x = tokens.shape;
  const Shape& y = copies.shape;
  if (x.rank() != 2 || y.rank() != 2 || x[1] != y[1] ||
      (x[0] == 0 ? slots != 0 : slots % x[0] != 0) || y[0] > slots)
    throw std::invalid_argument(std::string(op) + ": tokens " + x.to_string() + ", copies " +
                                y.to_string() + " and " + std::to_string(slots) +
                                " slots must be (T, H), (R, H) and T·k slots with R ≤ T·k");
  return {.tokens = x[0],
          .hidden = x[1],
          .experts = experts,
          .top_k = x[0] == 0 ? 1 : slots / x[0],
          .rows = y[0]};
}

// Bytes per row of a copy_rows and the check that every block lies inside both tensors.
inline std::int64_t row_copy_bytes(const RowCopyArgs& a) {
  const Shape& f = a.from.shape;
  const Shape& t = a.to.shape;
  if (f.rank() != 2 || t.rank() != 2 || f[1] != t[1] || a.from.dtype != a.to.dtype)
    throw std::invalid_argument("copy_rows: from " + f.to_string() + " and to " + t.to_string() +
                                " must be (rows, C) of one width and dtype");
  for (const RowBlock& b : a.blocks)
    if (b.rows < 0 || b.from_row < 0 || b.to_row < 0 || b.from_row + b.rows > f[0] ||
        b.to_row + b.rows > t[0])
      throw std::invalid_argument("copy_rows: block of " + std::to_string(b.rows) +
                                  " rows from row " + std::to_string(b.from_row) + " to row " +
                                  std::to_string(b.to_row) + " leaves " + f.to_string() + " or " +
                                  t.to_string());
  return f[1] * dtype_size(a.from.dtype).value;
}

inline kernels::math::ColumnCopy column_copy(const ColumnCopyArgs& a) {
  const Shape &f = a.from.shape, &t = a.to.shape;
  const std::int64_t last = a.count - 1;  // the last block's index
  // Blocks that share a destination column are summed only when they share all of them.
  const bool overlapping = a.count > 1 && a.to_stride > 0 && a.to_stride < a.width;
  if (f.rank() != 2 || t.rank() != 2 || f[0] != t[0] || a.from.dtype != a.to.dtype || a.width < 0 ||
      a.count < 1 || a.from_stride < 0 || a.to_stride < 0 || overlapping || a.from_column < 0 ||
      a.to_column < 0 || a.from_column + last * a.from_stride + a.width > f[1] ||
      a.to_column + last * a.to_stride + a.width > t[1])
    throw std::invalid_argument(
        "copy_columns: " + std::to_string(a.count) + " block(s) of " + std::to_string(a.width) +
        " columns from " + std::to_string(a.from_column) + " (stride " +
        std::to_string(a.from_stride) + ") of " + f.to_string() + " to " +
        std::to_string(a.to_column) + " (stride " + std::to_string(a.to_stride) + ") of " +
        t.to_string() +
        ": needs two (rows, columns) tensors of one dtype and rows, the columns inside both, and "
        "destination blocks apart (stride ≥ width) or all on the same columns (stride 0)");
  return {.rows = f[0],
          .width = a.width,
          .from_ld = f[1],
          .from_column = a.from_column,
          .to_ld = t[1],
          .to_column = a.to_column,
          .accumulate = a.accumulate,
          .count = a.count,
          .from_stride = a.from_stride,
          .to_stride = a.to_stride};
}

inline kernels::cpu::RopeShape rope_shape(const RopeArgs& a) {
  const Shape& x = a.x.shape;
  if (x.rank() != 5)
    throw std::invalid_argument("rope: expected (T, B, groups, per_group, head_dim), got " +
                                x.to_string());
  if (a.rotary_dim <= 0 || a.rotary_dim % 2 != 0 || a.first_feature < 0 ||
      a.first_feature + a.rotary_dim > x[4] || a.rotate_per_group < 0 || a.rotate_per_group > x[3])
    throw std::invalid_argument("rope: rotary_dim " + std::to_string(a.rotary_dim) +
                                " from feature " + std::to_string(a.first_feature) +
                                " must be even and within head_dim " + std::to_string(x[4]) +
                                ", rotate_per_group within the group");
  return {.T = x[0],
          .B = x[1],
          .groups = x[2],
          .per_group = x[3],
          .rotate_per_group = a.rotate_per_group,
          .head_dim = x[4],
          .rotary_dim = a.rotary_dim,
          .position_offset = a.position_offset,
          .base = a.base,
          .first_feature = a.first_feature,
          .interleaved = a.interleaved};
}

// SwiGLU: input (rows, 2F), output (rows, F).
inline std::int64_t swiglu_width(const char* op, const Tensor& input, const Tensor& output) {
  const std::int64_t two_f = last_dim(input);
  if (two_f % 2 != 0 || output.numel() * 2 != input.numel())
    throw std::invalid_argument(std::string(op) + ": input " + input.shape.to_string() +
                                " must be (rows, 2F) for an output of (rows, F), got " +
                                output.shape.to_string());
  return two_f / 2;
}

inline kernels::cpu::CrossEntropyShape ce_shape(const CrossEntropyArgs& a) {
  return {a.logits.shape[0], last_dim(a.logits), a.vocab_begin};
}

}  // namespace tandem::op_arguments
