// OpDescs and fused-attention pricing of the Llama-style ops; see op_cost_llama.hpp.
#include "sim/op_cost_llama.hpp"

#include <algorithm>
#include <cmath>
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

// cuDNN's kernel prices the op where it asks for it and the preset has its figure; else the
// flash-attn package's does.
bool priced_as_cudnn(const GpuSpec& gpu, std::string_view library, bool backward) {
  const double cudnn =
      backward ? gpu.fused_attention_backward_fraction : gpu.fused_attention_forward_fraction;
  return library != "flash_attn" && cudnn > 0;
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
          .bytes = traffic + (a.accumulate ? bytes_of(dtype, backward ? q + kv : o) : 0.0),
          .visible_pairs = pairs};
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

FusedAttentionKernel fused_attention_kernel(std::string_view library, bool backward) {
  // Fitted on bf16 causal runs of head dim 128, sequence 2048-8192 (37 shapes each) on one
  // H200 (topology/attention_reference.csv); the head-dim factors are the same runs' 64 and
  // 192 against the 128 fit.
  if (library == "flash_attn")
    return backward ? FusedAttentionKernel{.tail_tiles = 0.7,
                                           .tile_fixed_blocks = 4.25,
                                           .head_dim_64 = 0.87,
                                           .head_dim_192 = 1.03}
                    : FusedAttentionKernel{.tail_tiles = 1.0,
                                           .tile_fixed_blocks = 1.5,
                                           .head_dim_64 = 0.86,
                                           .head_dim_192 = 1.05};
  return backward ? FusedAttentionKernel{.tail_tiles = 0.7,
                                         .tile_fixed_blocks = 3.75,
                                         .head_dim_64 = 0.76,
                                         .head_dim_192 = 0.76}
                  : FusedAttentionKernel{.tail_tiles = 0.8,
                                         .tile_fixed_blocks = 2.5,
                                         .head_dim_64 = 0.71,
                                         .head_dim_192 = 1.09};
}

double fused_attention_shape_efficiency(const OpDesc& op, int sm_count) {
  const bool backward = op.op == "flash_attention_backward";
  const FusedAttentionKernel kernel = fused_attention_kernel(op.library, backward);
  const double tile = static_cast<double>(kAttentionTile);
  // Forward: a tile of queries walks the keys it sees; backward: a tile of keys walks the
  // queries that see it.
  const std::int64_t rows = backward ? op.n : op.m, walked = backward ? op.m : op.n;
  const double tiles = static_cast<double>(op.batch) * std::ceil(static_cast<double>(rows) / tile);
  const double longest = std::ceil(static_cast<double>(walked) / tile);
  const double sms = static_cast<double>(std::max(1, sm_count));
  const double blocks = static_cast<double>(op.batch) * op.visible_pairs / (tile * tile) / sms;
  if (blocks <= 0) return 1.0;
  const double head_dim = static_cast<double>(op.k);
  // Between the measured head dims, linear; outside them, the nearest.
  const double factor = head_dim <= 64 ? kernel.head_dim_64
                        : head_dim <= 128
                            ? kernel.head_dim_64 + (1 - kernel.head_dim_64) * (head_dim - 64) / 64
                        : head_dim <= 192 ? 1 + (kernel.head_dim_192 - 1) * (head_dim - 128) / 64
                                          : kernel.head_dim_192;
  return factor * blocks /
         (blocks + kernel.tail_tiles * longest + kernel.tile_fixed_blocks * tiles / sms);
}

double fused_attention_fraction(const GpuSpec& gpu, std::string_view library, bool backward) {
  if (priced_as_cudnn(gpu, library, backward))
    return backward ? gpu.fused_attention_backward_fraction : gpu.fused_attention_forward_fraction;
  const double flash_attn =
      backward ? gpu.flash_attn_backward_fraction : gpu.flash_attn_forward_fraction;
  if (flash_attn > 0) return flash_attn;
  return backward ? kFlashBackwardFraction : kFlashForwardFraction;
}

double fused_attention_seconds(const GpuSpec& gpu, const OpDesc& op) {
  const bool backward = op.op == "flash_attention_backward";
  OpDesc kernel = op;
  kernel.library = priced_as_cudnn(gpu, op.library, backward) ? "" : "flash_attn";
  const double fraction = fused_attention_fraction(gpu, op.library, backward) *
                          fused_attention_shape_efficiency(kernel, gpu.sm_count);
  const double compute = op.flops / (gpu.peak(op.dtype).value * gpu.clock_factor() * fraction);
  const double memory = op.bytes / (gpu.memory_bandwidth.value * gpu.memory_peak_fraction);
  return gpu.kernel_launch.value + std::max(compute, memory);
}

}  // namespace tandem::sim
