// The cost model's arithmetic: roofline, GEMM tile and wave quantisation, attention from
// its parts, PCIe transfers, and the calibration overrides (see cost_model.hpp).
#include "sim/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "sim/op_cost_llama.hpp"

namespace tandem::sim {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

void check_known(const OpDesc& op) {
  const auto& ops = device_op_names();
  if (std::find(ops.begin(), ops.end(), op.op) == ops.end()) {
    const std::string best = closest_match(op.op, ops);
    throw std::invalid_argument("CostModel: unknown op \"" + std::string(op.op) + "\"" +
                                (best.empty() ? "" : "; did you mean \"" + best + "\"?"));
  }
  if (op.m < 0 || op.n < 0 || op.k < 0 || op.batch < 0 || op.flops < 0 || op.bytes < 0)
    throw std::invalid_argument("CostModel: op \"" + std::string(op.op) + "\" has a negative size");
}

// 2·m·n·k·batch over the dtype's element size, read A and B, write C.
double gemm_bytes(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
  const double elements =
      static_cast<double>(batch) * (static_cast<double>(m) * static_cast<double>(k) +
                                    static_cast<double>(k) * static_cast<double>(n) +
                                    static_cast<double>(m) * static_cast<double>(n));
  return elements * static_cast<double>(dtype_size(dtype).value);
}

}  // namespace

std::string op_class(std::string_view key) {
  const std::string_view op = key.substr(0, key.find(':'));  // op_report_key's suffix aside
  if (op == "gemm" || op == "fp8_gemm") return "gemm";
  if (op == "attention" || op == "attention_backward" || is_fused_attention(op)) return "attention";
  if (op == "adam" || op == "sum_squares" || op == "check_finite_and_unscale") return "optimizer";
  if (op == "upload" || op == "download") return "transfer";
  // Megatron's token dispatcher (the dropping of tokens over capacity, the permutation to
  // and from expert order, and the regrouping of chunks per expert): memory-bound kernels,
  // reported apart as the MoE layer's own class.
  if (op == "moe_drop_tokens" || op == "moe_permute" || op == "moe_permute_backward" ||
      op == "moe_unpermute" || op == "moe_unpermute_backward" || op == "copy_rows")
    return "moe dispatch";
  return "memory-bound";
}

int kernels_of_op(const OpDesc& op) {
  // The unfused softmax is 5 kernels instead of 1 each way (rule 3b).
  const int softmax_extra = megatron_fused_softmax(op) ? 0 : 4;
  const int dropout = op.dropout > 0 ? 1 : 0;  // rule 3c
  if (op.op == "attention") return 5 + softmax_extra + dropout;
  if (op.op == "attention_backward") return 7 + softmax_extra + dropout;
  return 1;
}

bool megatron_fused_softmax(const OpDesc& op) {
  if (op.op != "attention" && op.op != "attention_backward") return true;
  if (op.dtype != DType::fp16 && op.dtype != DType::bf16) return true;  // priced as before
  const std::int64_t sk = op.m, sq = op.m, batches = op.batch;
  if (!(sk > 16 && sk <= 4096 && sq % 4 == 0 && sk % 4 == 0 && batches % 4 == 0)) return false;
  std::int64_t pow2 = 1;
  while (pow2 < sk) pow2 *= 2;
  const std::int64_t warp = std::min<std::int64_t>(pow2, 32);
  const std::int64_t rows_per_warp = pow2 <= 128 ? 2 : 1;
  const std::int64_t batch_per_block = (128 / warp) * rows_per_warp;
  return batches % batch_per_block == 0;
}

std::string op_report_key(const OpDesc& op) {
  std::string key(op.op);
  return megatron_fused_softmax(op) ? key : key + ":unfused-softmax";
}

GemmTiling gemm_tiling(const GpuSpec& gpu, std::int64_t m, std::int64_t n, std::int64_t batch) {
  GemmTiling t;
  if (m <= 0 || n <= 0 || batch <= 0) return t;
  const std::int64_t tm = std::max(gpu.gemm_tile_m, 1);
  const std::int64_t tn = std::max(gpu.gemm_tile_n, 1);
  const std::int64_t sms = std::max(gpu.sm_count, 1);
  t.tiles = ceil_div(m, tm) * ceil_div(n, tn) * batch;
  t.waves = ceil_div(t.tiles, sms);
  t.efficiency =
      static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(batch) /
      (static_cast<double>(t.waves) * static_cast<double>(sms) * static_cast<double>(tm * tn));
  return t;
}

CostModel::CostModel(GpuSpec gpu, std::optional<CalibrationTable> table) : gpu_(std::move(gpu)) {
  if (!table) return;
  if (!table->gpu.empty() && table->gpu != gpu_.name)
    throw ConfigError("calibration.gpu", table->gpu,
                      "the table was measured on another GPU than " + gpu_.name);
  // Fitted scale per (op, dtype): geometric mean of measured / modelled over its rows.
  std::map<std::pair<std::string, DType>, std::pair<double, int>> log_sums;
  for (const auto& r : table->rows) {
    measured_[{r.op, r.dtype, r.m, r.n, r.k, r.batch}] = r.seconds;
    const OpDesc desc{.op = r.op,
                      .dtype = r.dtype,
                      .m = r.m,
                      .n = r.n,
                      .k = r.k,
                      .batch = r.batch,
                      .flops = r.flops,
                      .bytes = r.bytes};
    const double modelled = model_seconds(desc);
    if (modelled <= 0 || r.seconds <= 0) continue;
    auto& [sum, count] = log_sums[{r.op, r.dtype}];
    sum += std::log(r.seconds / modelled);
    ++count;
  }
  for (const auto& [key, acc] : log_sums) scale_[key] = std::exp(acc.first / acc.second);
}

double CostModel::calibration_scale(const std::string& op, DType dtype) const {
  const auto it = scale_.find({op, dtype});
  return it == scale_.end() ? 1.0 : it->second;
}

double CostModel::seconds(const OpDesc& op) const {
  check_known(op);
  if (const auto it = measured_.find({std::string(op.op), op.dtype, op.m, op.n, op.k, op.batch});
      it != measured_.end())
    return it->second + dropout_seconds(op);  // tandem calibrate measures without dropout
  return model_seconds(op) * calibration_scale(std::string(op.op), op.dtype);
}

double CostModel::model_seconds(const OpDesc& op) const {
  check_known(op);
  if (op.op == "gemm") {
    if (op.m == 0 || op.n == 0 || op.k == 0 || op.batch == 0)
      return roofline_seconds(op.flops, op.bytes);
    return gemm_seconds(op.dtype, op.m, op.n, op.k, op.batch, op.bytes, Operands::dtype,
                        op.shared_wave_tail);
  }
  if (op.op == "fp8_gemm") {
    if (op.m == 0 || op.n == 0 || op.k == 0 || op.batch == 0)
      return roofline_seconds(op.flops, op.bytes);
    return gemm_seconds(op.dtype, op.m, op.n, op.k, op.batch, op.bytes, Operands::fp8,
                        op.shared_wave_tail);
  }
  if (op.op == "attention" || op.op == "attention_backward") {
    if (op.m == 0 || op.k == 0 || op.batch == 0) return roofline_seconds(op.flops, op.bytes);
    return attention_seconds(op, op.op == "attention_backward");
  }
  if (is_fused_attention(op.op)) return fused_attention_seconds(gpu_, op);  // op_cost_llama
  if (op.op == "upload" || op.op == "download")
    return gpu_.pcie.latency.value + op.bytes / gpu_.pcie.bandwidth.value;
  // Rule 5: one multi-tensor kernel covers many tensors, so no launch per tensor.
  if (op_class(op.op) == "optimizer")
    return roofline_seconds(op.flops, op.bytes) - gpu_.kernel_launch.value;
  return roofline_seconds(op.flops, op.bytes);
}

double CostModel::roofline_seconds(double flops, double bytes) const {
  const double compute = flops / (gpu_.peak_fp32.value * gpu_.clock_factor());
  const double memory = bytes / (gpu_.memory_bandwidth.value * gpu_.memory_peak_fraction);
  return gpu_.kernel_launch.value + std::max(compute, memory);
}

double CostModel::operand_peak(DType dtype, Operands operands) const {
  if (operands == Operands::dtype) return gpu_.peak(dtype).value * gpu_.clock_factor();
  const double fp8 = gpu_.peak(Precision::fp8).value * gpu_.clock_factor();
  if (fp8 <= 0)
    throw ConfigError("gpu.peak_tflops.fp8", gpu_.name,
                      "the GPU has no FP8 tensor rate in its preset: FP8 GEMMs cannot be priced");
  return fp8;
}

double CostModel::gemm_seconds(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                               std::int64_t batch, double bytes, Operands operands,
                               bool shared_wave_tail) const {
  const GemmTiling tiling = gemm_tiling(gpu_, m, n, batch);
  // The work the machine does: full waves of full tiles (rule 2 of cost_model.hpp); a block
  // whose last wave is shared with the next block's pays its tiles alone (rule 2g).
  const double waves = shared_wave_tail ? static_cast<double>(tiling.tiles) /
                                              static_cast<double>(std::max(gpu_.sm_count, 1))
                                        : static_cast<double>(tiling.waves);
  const double done_flops = waves * gpu_.sm_count * 2.0 * gpu_.gemm_tile_m * gpu_.gemm_tile_n *
                            (static_cast<double>(k) + gpu_.gemm_tile_fixed_k);
  const double fraction = gemm_fraction(dtype, m, n, k, operands);
  double compute = done_flops / (operand_peak(dtype, operands) * fraction);
  double extra = 0;  // a split-K reduction pass, when that is the cheaper plan
  if (gpu_.l2_bandwidth.value > 0) {
    const GemmPlan plan = gemm_plan(dtype, m, n, k, batch, fraction, operands, shared_wave_tail);
    if (plan.compute_seconds + plan.extra_seconds < compute) {
      compute = plan.compute_seconds;
      extra = plan.extra_seconds;
    }
  }
  if (bytes <= 0) bytes = gemm_bytes(dtype, m, n, k, batch);  // FP8 ops give their bytes
  const double memory = bytes / (gpu_.memory_bandwidth.value * gpu_.memory_peak_fraction);
  return gpu_.kernel_launch.value + std::max(compute, memory) + extra;
}

double CostModel::gemm_fraction(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                                Operands operands) const {
  if (operands == Operands::fp8)
    return gpu_.gemm_fp8_peak_fraction > 0 ? gpu_.gemm_fp8_peak_fraction : gpu_.gemm_peak_fraction;
  const std::int64_t size = dtype_size(dtype).value;
  if (gpu_.gemm_unaligned_peak_fraction <= 0 || size != 2) return gpu_.gemm_peak_fraction;
  const bool aligned = (m * size) % 16 == 0 && (n * size) % 16 == 0 && (k * size) % 16 == 0;
  return aligned ? gpu_.gemm_peak_fraction : gpu_.gemm_unaligned_peak_fraction;
}

// Rule 2b: try every tile no larger than the preset's whose sides are the preset's sides or
// their halvings down to 64 (the preset tile and its transpose among them), each with split-K in
// any factor s (slices of at least 256, s ≤ SMs; partial results reduced by a second kernel); each
// tile at min(tensor rate, L2 operand traffic); keep the fastest.
CostModel::GemmPlan CostModel::gemm_plan(DType dtype, std::int64_t m, std::int64_t n,
                                         std::int64_t k, std::int64_t batch, double peak_fraction,
                                         Operands operands, bool shared_wave_tail) const {
  const double sms = std::max(gpu_.sm_count, 1);
  const double per_sm_flops = operand_peak(dtype, operands) * peak_fraction / sms;
  const double per_sm_l2 = gpu_.l2_bandwidth.value * gpu_.clock_factor() / sms;
  const double size =
      operands == Operands::fp8 ? 1.0 : static_cast<double>(dtype_size(dtype).value);
  const std::int64_t tile_m = std::max(gpu_.gemm_tile_m, 1), tile_n = std::max(gpu_.gemm_tile_n, 1);
  // Tile sides: the preset's two and their halvings down to 64.
  std::vector<std::int64_t> sides;
  for (std::int64_t side : {tile_m, tile_n})
    for (; side >= 1; side /= 2) {
      sides.push_back(side);
      if (side / 2 < 64) break;
    }
  std::sort(sides.begin(), sides.end());
  sides.erase(std::unique(sides.begin(), sides.end()), sides.end());
  GemmPlan best;
  best.compute_seconds = std::numeric_limits<double>::infinity();
  for (const std::int64_t tm : sides) {
    for (const std::int64_t tn : sides) {
      if (tm * tn > tile_m * tile_n) continue;
      const std::int64_t tiles = ceil_div(m, tm) * ceil_div(n, tn) * batch;
      const std::int64_t max_split =
          std::max<std::int64_t>(1, std::min<std::int64_t>(gpu_.sm_count, k / 256));
      for (std::int64_t split = 1; split <= max_split; ++split) {
        const double slice = static_cast<double>(ceil_div(k, split));
        const double work = static_cast<double>(tiles * split) / sms;
        const double waves = shared_wave_tail ? work : std::ceil(work);
        const double tile_compute =
            2.0 * static_cast<double>(tm * tn) * (slice + gpu_.gemm_tile_fixed_k) / per_sm_flops;
        const double tile_operands = static_cast<double>(tm + tn) * slice * size / per_sm_l2;
        const double compute = waves * std::max(tile_compute, tile_operands);
        // Split K writes s fp32 partial C's and a second kernel sums them.
        const double extra =
            split == 1 ? 0.0
                       : gpu_.kernel_launch.value +
                             static_cast<double>(split + 1) * static_cast<double>(m * n * batch) *
                                 4.0 / (gpu_.memory_bandwidth.value * gpu_.memory_peak_fraction);
        if (compute + extra < best.compute_seconds + best.extra_seconds) {
          best = {compute, extra, tm, tn, split};
        }
      }
    }
  }
  return best;
}

// Rule 3c: torch's dropout on P reads it and writes the result and a bool mask; its
// backward reads the gradient and the mask and writes the gradient.
double CostModel::dropout_seconds(const OpDesc& op) const {
  if (op.dropout <= 0 || (op.op != "attention" && op.op != "attention_backward")) return 0;
  const double size = static_cast<double>(dtype_size(op.dtype).value);
  const double scores =
      static_cast<double>(op.batch) * static_cast<double>(op.m) * static_cast<double>(op.m);
  return roofline_seconds(0, (2 * size + 1) * scores);
}

double CostModel::attention_seconds(const OpDesc& op, bool backward) const {
  const std::int64_t bh = op.batch;  // B · heads
  const std::int64_t t = op.m;       // sequence
  const std::int64_t d = op.k;       // head_dim
  const double size = static_cast<double>(dtype_size(op.dtype).value);
  const double scores = static_cast<double>(bh) * static_cast<double>(t) * static_cast<double>(t);
  const double head_elems =
      static_cast<double>(bh) * static_cast<double>(t) * static_cast<double>(d);
  auto gemm = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    return gemm_seconds(op.dtype, m, n, k, bh, 0);
  };
  const double dropout = dropout_seconds(op);
  if (!backward) {
    return roofline_seconds(0, 2 * 3 * head_elems * size)  // qkv → q, k, v head-major
           + gemm(t, t, d)                                 // S = Q·Kᵀ
           + softmax_seconds(op, scores, false)            // scale, mask, softmax
           + dropout                                       // P → dropout(P)
           + gemm(t, d, t)                                 // O = P·V
           + roofline_seconds(0, 2 * head_elems * size);   // O → (B, T, heads, D)
  }
  return roofline_seconds(0, 2 * head_elems * size)         // dO → head-major
         + gemm(t, t, d)                                    // dP = dO·Vᵀ
         + gemm(t, d, t)                                    // dV = Pᵀ·dO
         + dropout                                          // dP through the mask
         + softmax_seconds(op, scores, true)                // dS = P ⊙ (dP − rowsum(dP ⊙ P))
         + gemm(t, d, t)                                    // dQ = dS·K
         + gemm(t, d, t)                                    // dK = dSᵀ·Q
         + roofline_seconds(0, 2 * 3 * head_elems * size);  // dq, dk, dv → grad_qkv
}

double CostModel::softmax_seconds(const OpDesc& op, double scores, bool backward) const {
  const double size = static_cast<double>(dtype_size(op.dtype).value);
  if (megatron_fused_softmax(op)) {
    return backward ? roofline_seconds(4 * scores, 3 * scores * size)   // read P, dP; write dS
                    : roofline_seconds(5 * scores, 2 * scores * size);  // read S; write P
  }
  // Rule 3b, PyTorch in fp32 (bytes per score: 16-bit `size`, fp32 4, bool mask 1).
  if (!backward) {
    return roofline_seconds(0, (size + 4) * scores)     // scores.float()
           + roofline_seconds(scores, 8 * scores)       // · scale
           + roofline_seconds(0, 9 * scores)            // masked_fill_(mask, -10000)
           + roofline_seconds(5 * scores, 8 * scores)   // softmax
           + roofline_seconds(0, (4 + size) * scores);  // .half()
  }
  return roofline_seconds(0, (size + 4) * scores)     // grad of .half(): to fp32
         + roofline_seconds(4 * scores, 12 * scores)  // softmax backward (P, dP → dS)
         + roofline_seconds(0, 9 * scores)            // masked_fill backward
         + roofline_seconds(scores, 8 * scores)       // grad of · scale
         + roofline_seconds(0, (4 + size) * scores);  // grad of .float(): to 16 bits
}

}  // namespace tandem::sim
