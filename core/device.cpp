#include "core/device.hpp"

#include <stdexcept>

namespace tandem {

HostTurns& Device::host_turns() {
  if (!host_turns_) host_turns_ = std::make_unique<ThreadTurns>();
  return *host_turns_;
}

const std::vector<std::string>& device_op_names() {
  static const std::vector<std::string> names = {"gemm",
                                                 "bias_add",
                                                 "bias_grad",
                                                 "layer_norm",
                                                 "layer_norm_backward",
                                                 "attention",
                                                 "attention_backward",
                                                 "gelu",
                                                 "gelu_backward",
                                                 "bias_gelu",
                                                 "bias_gelu_backward",
                                                 "bias_dropout_add",
                                                 "dropout",
                                                 "dropout_backward",
                                                 "embedding",
                                                 "embedding_backward",
                                                 "cross_entropy_max",
                                                 "cross_entropy_sums",
                                                 "cross_entropy_loss",
                                                 "cross_entropy_backward",
                                                 "add",
                                                 "scale",
                                                 "fill",
                                                 "copy",
                                                 "copy_columns",
                                                 "copy_rows",
                                                 "sum_squares",
                                                 "check_finite_and_unscale",
                                                 "adam",
                                                 "rms_norm",
                                                 "rms_norm_backward",
                                                 "swiglu",
                                                 "swiglu_backward",
                                                 "rope",
                                                 "flash_attention",
                                                 "flash_attention_backward",
                                                 "moe_router",
                                                 "moe_router_backward",
                                                 "moe_drop_tokens",
                                                 "moe_permute",
                                                 "moe_permute_backward",
                                                 "moe_unpermute",
                                                 "moe_unpermute_backward",
                                                 "fp8_quantize",
                                                 "fp8_gemm",
                                                 "fp8_update_scale",
                                                 "fp8_amax",
                                                 "fp8_compute_scale",
                                                 "upload",
                                                 "download"};
  return names;
}

FlashGeometry flash_geometry(const char* op, const Tensor& q_source, const Tensor& kv_source,
                             const Tensor& output, const Tensor& lse, std::int64_t v_head_dim) {
  const Shape& q = q_source.shape;
  const Shape& k = kv_source.shape;
  auto fail = [&](const std::string& rule) {
    throw std::invalid_argument(std::string(op) + ": q_source " + q.to_string() + ", kv_source " +
                                k.to_string() + ", output " + output.shape.to_string() +
                                " and lse " + lse.shape.to_string() + ": " + rule);
  };
  FlashGeometry g;
  if (v_head_dim <= 0) {
    // (T, B, G, P + 2, head_dim); kv_source the same past the sequence, or (…, 2, head_dim).
    if (q.rank() != 5 || q[3] < 3)
      fail("expected q_source (T, B, groups, heads_per_group + 2, head_dim)");
    if (k.rank() != 5 || q[1] != k[1] || q[2] != k[2] || (q[3] != k[3] && k[3] != 2) ||
        q[4] != k[4])
      fail("q_source and kv_source differ past the sequence");
    g = {.Tq = q[0], .Tk = k[0], .B = q[1], .G = q[2], .P = q[3] - 2, .head_dim = q[4]};
    g.v_head_dim = g.head_dim;
    g.kv_only = k[3] == 2;
  } else {
    // (T, B, G, (P + 1)·head_dim + v_head_dim) rows; P from the lse (B, G·P, Tq).
    if (q.rank() != 4 || k.rank() != 4 || q[1] != k[1] || q[2] != k[2])
      fail("with v_head_dim the sources are (T, B, groups, features), alike past the sequence");
    g = {.Tq = q[0], .Tk = k[0], .B = q[1], .G = q[2], .v_head_dim = v_head_dim};
    const std::int64_t rows = g.B * g.G * g.Tq;
    if (rows == 0 || lse.numel() % rows != 0 || lse.numel() / rows < 1)
      fail("the lse must hold B · G · P · Tq values, P ≥ 1");
    g.P = lse.numel() / rows;
    const std::int64_t keys = q[3] - v_head_dim;
    if (keys <= 0 || keys % (g.P + 1) != 0)
      fail("a group's row must be (P + 1) · head_dim + v_head_dim = " + std::to_string(v_head_dim) +
           " features wide");
    g.head_dim = keys / (g.P + 1);
    g.kv_only = k[3] != q[3];
    if (g.kv_only && k[3] != g.head_dim + v_head_dim)
      fail("kv_source rows must be as wide as q_source's or head_dim + v_head_dim");
  }
  if (output.numel() != g.Tq * g.B * g.G * g.P * g.v_head_dim ||
      lse.numel() != g.B * g.G * g.P * g.Tq)
    fail("output or lse does not match q_source");
  return g;
}

GemmShape check_gemm(const GemmArgs& a) {
  const GemmShape g{.m = a.transpose_a ? a.a.shape[1] : a.a.shape[0],
                    .n = a.transpose_b ? a.b.shape[0] : a.b.shape[1],
                    .k = a.transpose_a ? a.a.shape[0] : a.a.shape[1]};
  const std::int64_t kb = a.transpose_b ? a.b.shape[1] : a.b.shape[0];
  // Spelled only on failure: every GEMM of every simulated step passes here, and building
  // the text each time took about a fifth of a search's dry runs (Llama 3 8B on 64 GPUs).
  const auto what = [&a] {
    return "gemm: " + a.a.shape.to_string() + (a.transpose_a ? "ᵀ" : "") + " · " +
           a.b.shape.to_string() + (a.transpose_b ? "ᵀ" : "") + " into " + a.c.shape.to_string();
  };
  if (g.k != kb || a.c.numel() != g.m * g.n)
    throw std::invalid_argument(what() + " do not conform");
  if (a.bias != nullptr && (a.bias->numel() != g.n || a.beta != 0))
    throw std::invalid_argument(what() + ": a bias epilogue needs " + std::to_string(g.n) +
                                " values and beta 0; has " + std::to_string(a.bias->numel()) +
                                " and beta " + std::to_string(a.beta));
  if (a.bias_grad != nullptr && (a.bias_grad->numel() != g.m || !a.transpose_a))
    throw std::invalid_argument(what() + ": a bias-gradient epilogue needs " + std::to_string(g.m) +
                                " values and A held (K, M) (transpose_a); has " +
                                std::to_string(a.bias_grad->numel()) +
                                (a.transpose_a ? "" : " and A held (M, K)"));
  return g;
}

std::string_view fp8_format_name(Fp8Format f) {
  return f == Fp8Format::e4m3 ? "e4m3" : "e5m2";
}

Fp8Tensor allocate_fp8(Device& d, std::int64_t rows, std::int64_t cols, const Fp8Layout& layout,
                       MemoryUse use) {
  Fp8Layout l = layout;
  if (l.scaling == Fp8Scaling::tensor) l.block_rows = l.block_cols = 0;
  auto blocks = [](std::int64_t dim, std::int64_t block) {
    return block > 0 ? (dim + block - 1) / block : 1;
  };
  return {.codes = d.allocate(Shape{(rows * cols + 3) / 4}, DType::int32, use),
          .scale_inv = d.allocate(Shape{blocks(rows, l.block_rows), blocks(cols, l.block_cols)},
                                  DType::fp32, use),
          .rows = rows,
          .cols = cols,
          .layout = l};
}

}  // namespace tandem
