// What the sim binding charges for the ops of Llama-style layers (RMSNorm, SwiGLU, RoPE,
// fused grouped-query attention): pure functions from an op's arguments to its OpDesc
// (FLOPs and bytes of device memory moved) and from an OpDesc to seconds.
//
// RMSNorm, SwiGLU and RoPE are streaming kernels: the roofline of cost_model.hpp (rule 1)
// on the bytes they read and write. Fused attention (FlashAttention-2, Dao 2023) is priced
// from its real work, not from the unfused op's parts:
//   FLOPs    forward 4·pairs·head_dim per query head (S = Q·Kᵀ and O = P·V over the
//            visible (query, key) pairs: about half of Tq·Tk under a causal mask);
//            backward 10·pairs·head_dim (S recomputed, dP, dV, dQ, dK: 2.5× forward);
//            with value heads of their own width vd (multi-latent attention) each product
//            over the values counts vd: 2·pairs·(hd + vd) and 2·pairs·(3·hd + 2·vd)
//   bytes    the compulsory traffic only — Q, K, V, O and the log-sum-exp, and in
//            backward dO, dQ, dK, dV too; no Tq·Tk term, the scores never reach memory
//   rate     tensor cores at peak(dtype) · the preset's fraction for the kernel's library
//            (OpDesc::library): fused_attention_forward_fraction / _backward_ for cuDNN's,
//            flash_attn_forward_fraction / _backward_ for the flash-attn package's, each the
//            rate a long launch approaches; where the preset has none,
//            kFlashForwardFraction / kFlashBackwardFraction, FlashAttention-2's on A100.
//            Times the launch's shape efficiency: the kernel runs one tile of 128 queries
//            (backward: keys) a thread block, and a causal tile walks as many key blocks as
//            its position, so a launch of few heads or a short sequence ends on a tail of
//            the longest tiles, and each tile pays a fixed prologue and epilogue:
//              blocks / (blocks + tail · longest + fixed · tiles / SMs),
//            blocks the 128 × 128 blocks of visible pairs over the SMs, longest the blocks of
//            the longest tile, tiles the thread blocks (FusedAttentionKernel, measured on an
//            H200: 0.36 of the long-launch rate at 8 heads of 4096, 0.80 at 64). Head dims
//            other than 128 scale it by the kernel's measured factor. A calibration table
//            rescales both per dtype.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/device.hpp"
#include "sim/cost_model.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

// FlashAttention-2 on an A100: 0.70 of peak forward and 0.55 backward, from §4.1 of the
// paper (50–73 % of peak over its 16k-token runs; our reading: head dim 128, sequence
// 4096), over the shape efficiency of such a run on 108 SMs (0.83 and 0.75): the
// long-launch rate.
inline constexpr double kFlashForwardFraction = 0.84;
inline constexpr double kFlashBackwardFraction = 0.73;

// The tile of queries (forward) or keys (backward) one thread block of a fused attention
// kernel holds: 128 for FlashAttention-2 and cuDNN's at head dim 128.
inline constexpr std::int64_t kAttentionTile = 128;

// How a fused attention kernel's rate falls with the launch's shape (see the top of this
// file), per library and direction. tail_tiles: the longest tile's blocks the launch's end
// waits for, as a multiple of them; tile_fixed_blocks: each tile's fixed cost in key
// blocks; head_dim_64, head_dim_192: the long-launch rate at those head dims over 128's.
struct FusedAttentionKernel {
  double tail_tiles = 0;
  double tile_fixed_blocks = 0;
  double head_dim_64 = 1;
  double head_dim_192 = 1;
};
FusedAttentionKernel fused_attention_kernel(std::string_view library, bool backward);

// The share of the long-launch rate a fused attention OpDesc reaches on `sm_count` SMs
// (1 for an op without visible pairs).
double fused_attention_shape_efficiency(const OpDesc& op, int sm_count);

// (query, key) pairs a causal or unmasked block lets through, positions q_offset + i and
// k_offset + j (the count of kernels/cpu/flash_attention.hpp, recomputed here: sim does
// not run kernels).
double attention_visible_pairs(std::int64_t Tq, std::int64_t Tk, std::int64_t q_offset,
                               std::int64_t k_offset, bool causal);

// OpDescs; `dtype` is the precision ops are priced in (SimDeviceOptions::compute_dtype).
OpDesc rms_norm_desc(DType dtype, const RmsNormArgs& a);
OpDesc rms_norm_backward_desc(DType dtype, const RmsNormBackwardArgs& a);
OpDesc swiglu_desc(DType dtype, const Tensor& input, bool backward);
OpDesc rope_desc(DType dtype, const RopeArgs& a);
// batch = B · query heads, m = Tq, n = Tk, k = head_dim.
OpDesc flash_attention_desc(DType dtype, const FlashAttentionArgs& a);
OpDesc flash_attention_backward_desc(DType dtype, const FlashAttentionBackwardArgs& a);

// The share of the tensor peak the fused attention kernel of `library` (OpDesc::library)
// reaches on `gpu`: cuDNN's ("") the preset's fused_attention fractions, the flash-attn
// package's ("flash_attn") its flash_attn fractions; a missing figure falls back to the
// flash-attn package's, then to kFlash*Fraction.
double fused_attention_fraction(const GpuSpec& gpu, std::string_view library, bool backward);

// Seconds of a fused-attention OpDesc on `gpu` (the rate and traffic above, one launch).
bool is_fused_attention(std::string_view op);
double fused_attention_seconds(const GpuSpec& gpu, const OpDesc& op);

}  // namespace tandem::sim
