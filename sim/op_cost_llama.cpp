// OpDescs and fused-attention pricing of the Llama-style ops; see op_cost_llama.hpp.
#include "sim/op_cost_llama.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem::sim {
namespace {

double elements(const Tensor& t) {
  return static_cast<double>(t.numel());
}

std::int64_t last_dim(const Tensor& t) {
  return t.shape.rank() == 0 ? 1 : t.shape[t.shape.rank() - 1];
}

double bytes_of(DType dtype, double count) {
  return count * static_cast<double>(dtype_size(dtype).value);
}

template <typename Args>
OpDesc flash_desc(const char* op, DType dtype, const Args& a, bool backward) {
  const FlashGeometry g =
      flash_geometry(op, a.q_source, a.kv_source, a.output, a.lse, a.v_head_dim);
  const double heads = static_cast<double>(g.B * g.G * g.P);
  const double pairs = attention_visible_pairs(g.Tq, g.Tk, a.q_offset, a.k_offset,
                                               a.mask == AttentionMaskKind::causal);
  // Query and key heads hd wide, value heads vd (multi-latent attention: vd < hd).
  const double hd = static_cast<double>(g.head_dim), vd = static_cast<double>(g.v_head_dim);
  const double rows = heads * static_cast<double>(g.Tq);
  const double q = rows * hd, o = rows * vd;                            // Q (dQ), O (dO)
  const double kv = static_cast<double>(g.B * g.G * g.Tk) * (hd + vd);  // K and V
  const double lse = rows * 4.0;                                        // fp32
  const double traffic = backward
                             ? bytes_of(dtype, 2 * q + 2 * o + 2 * kv) + lse  // Q dQ O dO K V dK dV
                             : bytes_of(dtype, q + o + kv) + lse;             // Q O K V
  // Forward QKᵀ (2·hd) and PV (2·vd) a pair; backward QKᵀ again, dV = PᵀdO and dP = dO·Vᵀ
  // (2·vd each), dQ and dK (2·hd each): 4·pairs·hd and 10·pairs·hd when vd = hd.
  const double per_pair = backward ? 6.0 * hd + 4.0 * vd : 2.0 * hd + 2.0 * vd;
  return {.op = op,
          .dtype = dtype,
          .m = g.Tq,
          .n = g.Tk,
          .k = g.head_dim,
          .batch = g.B * g.G * g.P,
          .flops = per_pair * pairs * heads,
          // Accumulating reads what it adds to: the earlier output (forward), the gradients.
          .bytes = traffic + (a.accumulate ? bytes_of(dtype, backward ? q + kv : o) : 0.0)};
}

}  // namespace

double attention_visible_pairs(std::int64_t Tq, std::int64_t Tk, std::int64_t q_offset,
                               std::int64_t k_offset, bool causal) {
  if (!causal) return static_cast<double>(Tq) * static_cast<double>(Tk);
  // Query i sees clamp(c + i, 0, Tk) keys, c = q_offset − k_offset + 1: none for i < lo,
  // c + i for lo ≤ i < hi, all Tk from hi on. In closed form (priced per attention op, the
  // loop over 8192 queries was a tenth of a dry run); exact in integers.
  const std::int64_t c = q_offset - k_offset + 1;
  const std::int64_t lo = std::clamp<std::int64_t>(1 - c, 0, Tq);
  const std::int64_t hi = std::clamp<std::int64_t>(Tk - c, lo, Tq);
  const std::int64_t rising = (hi - lo) * c + (lo + hi - 1) * (hi - lo) / 2;
  return static_cast<double>(rising + (Tq - hi) * Tk);
}

OpDesc rms_norm_desc(DType dtype, const RmsNormArgs& a) {
  // Σx², then x·rstd·γ: 4 FLOPs an element; reads x, writes y.
  return {.op = "rms_norm",
          .dtype = dtype,
          .m = a.input.numel() / std::max<std::int64_t>(1, last_dim(a.input)),
          .n = last_dim(a.input),
          .flops = 4.0 * elements(a.input),
          .bytes = bytes_of(dtype, 2 * elements(a.input))};
}

OpDesc rms_norm_backward_desc(DType dtype, const RmsNormBackwardArgs& a) {
  // Reads dy and x, writes dx (the γ gradient's column sums ride along).
  return {.op = "rms_norm_backward",
          .dtype = dtype,
          .m = a.input.numel() / std::max<std::int64_t>(1, last_dim(a.input)),
          .n = last_dim(a.input),
          .flops = 8.0 * elements(a.input),
          .bytes = bytes_of(dtype, 3 * elements(a.input))};
}

OpDesc swiglu_desc(DType dtype, const Tensor& input, bool backward) {
  // input (rows, 2F). Forward reads 2F, writes F; backward reads 2F and dy (F), writes 2F.
  const double in = elements(input);
  return {.op = backward ? "swiglu_backward" : "swiglu",
          .dtype = dtype,
          .m = input.numel() / std::max<std::int64_t>(1, last_dim(input)),
          .n = last_dim(input) / 2,
          .flops = (backward ? 8.0 : 4.0) * in / 2,
          .bytes = bytes_of(dtype, backward ? 2.5 * in : 1.5 * in)};
}

OpDesc rope_desc(DType dtype, const RopeArgs& a) {
  // In place on the rotated heads' first rotary_dim features: read and write them.
  const Shape& x = a.x.shape;
  if (x.rank() != 5) throw std::invalid_argument("rope: expected a 5-d grouped tensor");
  const double rotated =
      static_cast<double>(x[0] * x[1] * x[2] * a.rotate_per_group * a.rotary_dim);
  return {.op = "rope",
          .dtype = dtype,
          .m = x[0] * x[1],
          .n = x[2] * a.rotate_per_group * a.rotary_dim,
          .k = a.rotary_dim,
          .flops = 3.0 * rotated,
          .bytes = bytes_of(dtype, 2 * rotated)};
}

OpDesc flash_attention_desc(DType dtype, const FlashAttentionArgs& a) {
  return flash_desc("flash_attention", dtype, a, false);
}

OpDesc flash_attention_backward_desc(DType dtype, const FlashAttentionBackwardArgs& a) {
  return flash_desc("flash_attention_backward", dtype, a, true);
}

bool is_fused_attention(std::string_view op) {
  return op == "flash_attention" || op == "flash_attention_backward";
}

double fused_attention_fraction(const GpuSpec& gpu, std::string_view library, bool backward) {
  const double flash_attn =
      backward ? gpu.flash_attn_backward_fraction : gpu.flash_attn_forward_fraction;
  const double cudnn =
      backward ? gpu.fused_attention_backward_fraction : gpu.fused_attention_forward_fraction;
  if (library != "flash_attn" && cudnn > 0) return cudnn;
  if (flash_attn > 0) return flash_attn;
  return backward ? kFlashBackwardFraction : kFlashForwardFraction;
}

double fused_attention_seconds(const GpuSpec& gpu, const OpDesc& op) {
  const bool backward = op.op == "flash_attention_backward";
  const double fraction = fused_attention_fraction(gpu, op.library, backward);
  const double compute = op.flops / (gpu.peak(op.dtype).value * gpu.clock_factor() * fraction);
  const double memory = op.bytes / (gpu.memory_bandwidth.value * gpu.memory_peak_fraction);
  return gpu.kernel_launch.value + std::max(compute, memory);
}

}  // namespace tandem::sim
