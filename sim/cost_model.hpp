// The price of one Device op on one GPU, in seconds, from its shapes and dtype: what the
// sim binding charges simulated time for. The model, in four rules:
//
// 1. Roofline. An op takes max(flops / rate, bytes / (memory_bandwidth ·
//    memory_peak_fraction)) plus one kernel launch. Non-GEMM ops compute on CUDA cores,
//    so their rate is the fp32 peak; they are memory-bound in practice.
// 2. GEMMs run on tensor cores (bf16/fp16) or CUDA cores (fp32) at peak(dtype) ·
//    gemm_peak_fraction, and pay for shape: the output is cut into gemm_tile_m ×
//    gemm_tile_n tiles (tile quantisation: m, n round up to the tile), tiles run in waves
//    of sm_count (wave quantisation: the last wave costs as much as a full one), so the
//    compute term is waves · sm_count · 2 · tile_m · tile_n · k / (peak · fraction).
//    A100 bf16, 8192³: 2048 tiles of 256×128 → 19 waves of 108 → 99.8 % of the ideal.
//    K is not quantised.
//    2b. Tile choice and split-K. cuBLAS's heuristics pick the tile and the split-K factor
//    per shape (cublasLt's split-K takes any factor). With GpuSpec::l2_bandwidth set the
//    model tries every tile no larger than the preset's, from the preset tile and its
//    transpose down to 64 × 64 (A100: 256×128, 128×256, 128×128, 256×64, 64×256, 128×64,
//    64×128, 64×64), each with split-K in any factor s (slices of ≥ 256, s ≤ sm_count).
//    Each tile costs max(2·tm·tn·k / per-SM tensor rate, (tm + tn)·k·bytes / per-SM L2
//    bandwidth) (a small tile reuses its operands less), a split adds its reduction (a
//    kernel reading s fp32 partials); the cheapest plan wins. Skinny, small-K, per-head
//    attention and small-M·N weight-gradient GEMMs take small tiles or split K; a GEMM a
//    few waves long evens out its last wave the same way.
//    A100 bf16: 256×128 and 128×128 tiles are compute-bound, 64×64 runs at ~70 %.
//    2c. Alignment. 16-bit tensor-core GEMMs are fastest when every dimension is a
//    multiple of 8 elements (16 bytes; NVIDIA's Matrix Multiplication Background guide);
//    any other shape runs cuBLAS's narrow-load kernels, at gemm_unaligned_peak_fraction
//    when the preset sets one. An unpadded vocabulary (50257 rows) is the common case; Megatron
//    pads it to a multiple of 128 · tp for this reason.
//    2d. FP8. A GEMM on FP8 operands runs at the FP8 tensor peak times
//    gemm_fp8_peak_fraction where the preset has one: cuBLASLt's FP8 kernels reach a smaller
//    share of their peak than its 16-bit ones (H100 SXM: 70.9 % against 80.3 % at each
//    dtype's best shape in a published maximum-achievable-matmul sweep).
//    2e. The sustained clock. Every SM-bound rate (the tensor and CUDA-core peaks of GEMMs,
//    fused attention and the roofline, and the L2 bandwidth of rule 2b) is scaled by the
//    preset's sustained_clock_fraction: its GEMM and attention figures come from short
//    microbenchmarks at a boosted clock, a whole training step runs at the power limit.
//    HBM-bound kernels keep memory_peak_fraction (the memory clock is not the SM's).
//    2f. A fixed cost per tile. Each output tile (each split's, under split-K) costs
//    gemm_tile_fixed_k more steps of K besides its own (the operand pipeline's fill and the
//    epilogue that converts and writes C), so a GEMM of small K runs further below
//    gemm_peak_fraction than one of large K: H100, 256 steps (fitted with the fraction on 39
//    measured cuBLAS GEMMs, topology/gemm_reference.csv): K = 2048 at 0.89 of the fraction,
//    K = 12288 at 0.98.
//    2g. Blocks on several streams. Transformer Engine's userbuffers overlap splits a
//    tensor-parallel GEMM into a block per ring step and runs the blocks on up to three
//    compute streams (comm_gemm_overlap.cpp: _stream_compute[i % streams]), so one block's
//    last wave runs beside the next block's first: such a block (OpDesc::shared_wave_tail)
//    pays its waves as tiles / SMs, not rounded up. MC 32B at tp 8, micro batch 4: a block
//    of the QKV GEMM is 2048 × 2688, 168 tiles of 256 × 128 on 132 SMs, 1.27 waves, not 2.
// 3. Attention is our non-fused Device op, priced from its parts: forward = rearrange qkv
//    into q, k, v + QKᵀ (batched GEMM) + causal softmax over the (T, T) scores + P·V
//    + rearrange the output; backward = rearrange dO + dP = dO·Vᵀ + dV = Pᵀ·dO + softmax
//    backward + dQ = dS·K + dK = dSᵀ·Q + rearrange into grad_qkv. Each part is one kernel.
//    3b. The softmax is Megatron's fused scale-mask-softmax kernel where Megatron can use
//    it (megatron_fused_softmax below); elsewhere Megatron falls back to PyTorch ops in
//    fp32, five kernels each way over the scores: B·heads = 2 (tp 8 of 16 heads, micro
//    batch 1), T = 1024 → 9 kernels forward instead of 5, 37 instead of 4 bytes per score.
//    3c. Attention dropout (OpDesc::dropout > 0) is torch's dropout kernel on P, one more
//    kernel each way: forward reads P and writes dropout(P) and a bool mask, backward reads
//    dP and the mask and writes dP (2 · element size + 1 bytes per score each way).
// 4. upload/download cross PCIe: pcie latency + bytes / pcie bandwidth, no launch.
// 5. The optimizer's ops (adam, sum_squares: one per parameter tensor here) are, in
//    Megatron, multi-tensor kernels (apex FusedAdam and multi_tensor_l2norm through
//    multi_tensor_apply: up to 110 tensors per launch): bandwidth only, no launch per
//    tensor. The host pays host_optimizer_tensor per tensor instead of a kernel issue.
//
// A CalibrationTable (sim/calibration.hpp) overrides the model: an exact row gives the
// time (plus rule 3c's dropout pass: tandem calibrate runs attention without dropout);
// otherwise a (op, dtype) with rows scales the model by their fitted factor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/tensor.hpp"
#include "sim/calibration.hpp"
#include "topology/topology.hpp"

namespace tandem::sim {

// One Device op as the sim binding sees it.
struct OpDesc {
  // The Device method name: "gemm", "layer_norm", … (device_op_names()). A view, so that
  // describing an op allocates nothing (the simulator prices millions in a search): it
  // names a string literal, or a calibration table's row where one is priced.
  std::string_view op;
  DType dtype = DType::fp32;  // the precision the op computes in
  // gemm: C(m, n) = A(m, k) · B(k, n), per batch entry.
  // attention, attention_backward: batch = B · heads, m = T (sequence), k = head_dim
  //   (n unused); flops and bytes are ignored, the parts are priced from the shape.
  // other ops: m = rows, n = columns (0 if n/a).
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;  // gemm batch count
  double flops = 0;        // useful floating-point operations
  double bytes = 0;        // bytes read + written from device memory
  float dropout = 0;       // attention, attention_backward: dropout probability (rule 3c)
  // flash_attention, flash_attention_backward: the (query, key) pairs one head's mask lets
  // through (about half of m · n when causal), for the kernel's tile schedule.
  double visible_pairs = 0;
  // The library whose kernel runs the op, where the run chooses among several: fused
  // attention "flash_attn" (the flash-attn package) or "" (cuDNN's, Transformer Engine's
  // FusedAttention). A view, as `op`: a literal, or a string the simulator's options hold.
  std::string_view library;
  // gemm, fp8_gemm: one block of a GEMM that a library splits and runs on several streams
  // (Transformer Engine's userbuffers overlap: a block per ring step, on up to 3 compute
  // streams), so its last wave shares the SMs with the next block's first (rule 2g).
  bool shared_wave_tail = false;
};

// The class a Device op's time is reported under (tandem simulate's breakdown, tandem
// trace diff): "gemm"; "attention" (its batched GEMMs and softmax, or the fused flash
// attention kernel); "memory-bound" (norms,
// elementwise, embedding, cross entropy: bandwidth + launch); "moe dispatch" (the MoE token
// dispatcher's dropping, permutations and regrouping: memory-bound too, apart); "optimizer"
// (adam and the gradient-norm reduction); "transfer" (upload, download over PCIe).
std::string op_class(std::string_view op);

// Kernels the host launches for one Device op: the parts rule 3 prices attention from
// (5 forward, 7 backward; 4 more each way when the softmax runs unfused, rule 3b; 1 more
// each way with dropout, rule 3c), 1 for
// every other op. The host issue clock charges each.
int kernels_of_op(const OpDesc& op);

// Rule 3b: whether Megatron runs the causal softmax of an "attention" /
// "attention_backward" op (batch = B·heads on this tensor-parallel rank, m = T) as its
// fused CUDA kernel. Megatron's FusedScaleMaskSoftmax.is_kernel_available
// (megatron/model/fused_softmax.py; the same test in Megatron-DeepSpeed) takes the kernel
// only for 16-bit scores with 16 < sk ≤ 4096, sq and sk multiples of 4, and attn_batches
// = B·heads a multiple of 4 and of the kernel's batches per block (get_batch_per_block in
// scaled_upper_triang_masked_softmax.h: 128 threads, one warp of min(32, 2^⌈log2 sk⌉)
// lanes per row, 2 rows per warp when 2^⌈log2 sk⌉ ≤ 128: 4 for sk = 1024, 8 for sk ≤ 128).
// Otherwise it runs PyTorch ops in fp32: scores.float(), · scale, masked_fill_, softmax,
// .half() forward and their five autograd kernels backward. fp32 scores are priced as
// fused (rule 3) as before.
bool megatron_fused_softmax(const OpDesc& attention);

// The key a Device op's seconds are booked under in per-op reports (SimDevice::op_seconds,
// tandem simulate --json's op_seconds): the op name, with ":unfused-softmax" appended to
// attention ops whose softmax runs unfused (rule 3b). op_class() ignores the suffix.
std::string op_report_key(const OpDesc& op);

// How a GEMM's output splits into tiles and waves on a GPU (rule 2 above).
struct GemmTiling {
  std::int64_t tiles = 0;  // ceil(m / tile_m) · ceil(n / tile_n) · batch
  std::int64_t waves = 0;  // ceil(tiles / sm_count)
  // Useful work / work done: 2·m·n·k·batch / (waves · sm_count · 2·tile_m·tile_n·k).
  double efficiency = 0;
};
GemmTiling gemm_tiling(const GpuSpec& gpu, std::int64_t m, std::int64_t n, std::int64_t batch);

class CostModel {
 public:
  // Throws ConfigError when the table names a different GPU than `gpu`.
  explicit CostModel(GpuSpec gpu, std::optional<CalibrationTable> table = {});

  // The time of `op` in seconds: a calibration row's, or the model's times the fitted
  // scale of its (op, dtype). Throws std::invalid_argument for an unknown op name or a
  // negative size.
  double seconds(const OpDesc& op) const;
  // The uncalibrated model (rules 1-4).
  double model_seconds(const OpDesc& op) const;
  // The factor calibration applies to (op, dtype) without an exact row; 1 when none.
  double calibration_scale(const std::string& op, DType dtype) const;

  const GpuSpec& gpu() const { return gpu_; }

 private:
  using RowKey =
      std::tuple<std::string, DType, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

  // A GEMM's operands: in its dtype, or FP8 (1 byte each, the GPU's FP8 tensor rate; the
  // Device's fp8_gemm op).
  enum class Operands { dtype, fp8 };
  double gemm_seconds(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                      std::int64_t batch, double bytes, Operands operands = Operands::dtype,
                      bool shared_wave_tail = false) const;
  double operand_peak(DType dtype, Operands operands) const;  // FLOP/s
  struct GemmPlan {
    double compute_seconds = 0;  // waves of tiles, without launch
    double extra_seconds = 0;    // the split-K reduction kernel
    std::int64_t tile_m = 0, tile_n = 0, split_k = 1;
  };
  GemmPlan gemm_plan(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                     std::int64_t batch, double peak_fraction, Operands operands,
                     bool shared_wave_tail) const;
  // gemm_peak_fraction, or gemm_unaligned_peak_fraction when a dimension's rows are not a
  // multiple of 16 bytes (rule 2c); on FP8 operands gemm_fp8_peak_fraction where the preset
  // has one (rule 2d).
  double gemm_fraction(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                       Operands operands) const;
  double roofline_seconds(double flops, double bytes) const;  // CUDA-core rate, one launch
  double attention_seconds(const OpDesc& op, bool backward) const;
  // The dropout pass of an attention op with OpDesc::dropout > 0 (rule 3c), else 0.
  double dropout_seconds(const OpDesc& op) const;
  // The softmax part of attention (rules 3 and 3b): `scores` elements of the (T, T) maps.
  double softmax_seconds(const OpDesc& op, double scores, bool backward) const;

  GpuSpec gpu_;
  std::map<RowKey, double> measured_;                      // exact rows → seconds
  std::map<std::pair<std::string, DType>, double> scale_;  // fitted measured / model
};

}  // namespace tandem::sim
