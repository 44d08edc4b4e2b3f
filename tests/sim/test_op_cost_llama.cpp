// The prices of the Llama-style ops (sim/op_cost_llama.hpp), worked out by hand: the visible
// (query, key) pairs of causal, unmasked and offset blocks; fused attention's FLOPs and
// compulsory bytes (no Tq·Tk term); its time on an A100 from the tensor-core peak; and that
// it undercuts the unfused attention op, which writes and reads the score matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/device_options.hpp"
#include "sim/op_cost_llama.hpp"
#include "sim/sim_device.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

Tensor phantom(Shape shape, DType dtype) {
  return Tensor{std::move(shape), dtype, nullptr, 0};
}

TEST(OpCostLlama, VisiblePairs) {
  EXPECT_EQ(attention_visible_pairs(4096, 4096, 0, 0, true), 4096.0 * 4097.0 / 2);
  EXPECT_EQ(attention_visible_pairs(100, 300, 0, 0, false), 30000.0);
  // Queries at 10, 11 against keys at 9..12: 2 + 3 visible.
  EXPECT_EQ(attention_visible_pairs(2, 4, 10, 9, true), 5.0);
  // A key block wholly in the future: nothing.
  EXPECT_EQ(attention_visible_pairs(8, 8, 0, 100, true), 0.0);
  // The closed form against the count query by query, over offsets before, inside and past
  // the key block (context parallelism's chunks) and blocks of unequal lengths.
  for (const std::int64_t tq : {1, 2, 7, 16})
    for (const std::int64_t tk : {0, 1, 5, 16})
      for (std::int64_t dq = -40; dq <= 40; dq += 3) {
        double brute = 0;
        for (std::int64_t i = 0; i < tq; ++i)
          brute += static_cast<double>(std::clamp<std::int64_t>(100 + dq + i - 100 + 1, 0, tk));
        EXPECT_EQ(attention_visible_pairs(tq, tk, 100 + dq, 100, true), brute)
            << tq << " " << tk << " " << dq;
      }
}

// One Llama-3-8B-like layer on one GPU: B = 1, T = 4096, 8 groups of 4 query heads, hd 128.
struct Layer {
  Tensor qkv = phantom(Shape{4096, 1, 8, 6, 128}, DType::bf16);
  Tensor out = phantom(Shape{4096, 1, 32, 128}, DType::bf16);
  Tensor lse = phantom(Shape{1, 32, 4096}, DType::fp32);
};

TEST(OpCostLlama, FusedAttentionCountsRealWorkWithoutTheScoreMatrix) {
  Layer l;
  const OpDesc f = flash_attention_desc(DType::bf16, {l.qkv, l.qkv, l.out, l.lse});
  const double pairs = 4096.0 * 4097.0 / 2, heads = 32, hd = 128;
  EXPECT_EQ(f.op, "flash_attention");
  EXPECT_EQ(f.batch, 32);
  EXPECT_EQ(f.m, 4096);
  EXPECT_EQ(f.n, 4096);
  EXPECT_EQ(f.k, 128);
  EXPECT_DOUBLE_EQ(f.flops, 4 * pairs * hd * heads);
  // Q and O: 32 heads; K and V: 8 groups; 2 bytes each; the lse in fp32.
  const double q = 32 * 4096 * 128.0, kv = 2 * 8 * 4096 * 128.0, lse = 32 * 4096 * 4.0;
  EXPECT_DOUBLE_EQ(f.bytes, 2 * (2 * q + kv) + lse);
  const OpDesc b =
      flash_attention_backward_desc(DType::bf16, {l.out, l.qkv, l.qkv, l.out, l.lse, l.qkv, l.qkv});
  EXPECT_DOUBLE_EQ(b.flops, 2.5 * f.flops);
  // Reads Q O dO, K V and the lse; writes dQ, dK dV.
  EXPECT_DOUBLE_EQ(b.bytes, 2 * (4 * q + 2 * kv) + lse);
}

// DeepSeek-V3's attention core on one GPU at tp 8: B = 1, T = 4096, 16 heads whose queries
// and keys are 192 wide (128 + 64 positional) and values 128 (multi-latent attention).
TEST(OpCostLlama, FusedAttentionWithNarrowerValueHeadsCountsEachWidth) {
  Tensor rows = phantom(Shape{4096, 1, 16, 2 * 192 + 128}, DType::bf16);
  Tensor out = phantom(Shape{4096, 1, 16, 128}, DType::bf16);
  Tensor lse = phantom(Shape{1, 16, 4096}, DType::fp32);
  const OpDesc f = flash_attention_desc(
      DType::bf16,
      {.q_source = rows, .kv_source = rows, .output = out, .lse = lse, .v_head_dim = 128});
  const double pairs = 4096.0 * 4097.0 / 2, heads = 16;
  EXPECT_EQ(f.batch, 16);
  EXPECT_EQ(f.k, 192);
  // S = Q·Kᵀ over 192 features, O = P·V over 128: 2·192 + 2·128 FLOPs a visible pair.
  EXPECT_DOUBLE_EQ(f.flops, (2 * 192 + 2 * 128) * pairs * heads);
  // Q 192 and O 128 a head and row; K 192 and V 128 a head (16 key/value heads); lse fp32.
  const double q = 16 * 4096 * 192.0, o = 16 * 4096 * 128.0, kv = 16 * 4096 * 320.0;
  EXPECT_DOUBLE_EQ(f.bytes, 2 * (q + o + kv) + 16 * 4096 * 4.0);
  const OpDesc b = flash_attention_backward_desc(DType::bf16, {.grad_output = out,
                                                               .q_source = rows,
                                                               .kv_source = rows,
                                                               .output = out,
                                                               .lse = lse,
                                                               .grad_q_source = rows,
                                                               .grad_kv_source = rows,
                                                               .v_head_dim = 128});
  // S again and dQ, dK over 192; dP and dV over 128.
  EXPECT_DOUBLE_EQ(b.flops, (6 * 192 + 4 * 128) * pairs * heads);
  EXPECT_DOUBLE_EQ(b.bytes, 2 * (2 * q + 2 * o + 2 * kv) + 16 * 4096 * 4.0);
  // A row width that no head_dim fits is refused, naming the op.
  const Tensor odd = phantom(Shape{4096, 1, 16, 2 * 192 + 127}, DType::bf16);
  EXPECT_THROW(
      flash_attention_desc(
          DType::bf16,
          {.q_source = odd, .kv_source = odd, .output = out, .lse = lse, .v_head_dim = 128}),
      std::invalid_argument);
}

TEST(OpCostLlama, FusedAttentionIsPricedOnTensorCoresAndBeatsTheUnfusedOp) {
  const GpuSpec gpu = load_topology("dgx-a100-80g").gpu;
  Layer l;
  const OpDesc f = flash_attention_desc(DType::bf16, {l.qkv, l.qkv, l.out, l.lse});
  // Compute-bound: 1.4e11 FLOPs at 312 TFLOP/s · 0.84 · the shape's efficiency on 108 SMs
  // (0.77 for 32 heads of 4096) ≈ 0.7 ms, against 0.1 GB at 2 TB/s.
  // (No cuDNN figure on the A100 preset: the flash-attn package's kernel prices the op.)
  OpDesc flash = f;
  flash.library = "flash_attn";
  const double efficiency = fused_attention_shape_efficiency(flash, gpu.sm_count);
  EXPECT_NEAR(efficiency, 0.77, 0.01);
  const double compute =
      f.flops / (gpu.peak(DType::bf16).value * kFlashForwardFraction * efficiency);
  EXPECT_GT(compute, f.bytes / gpu.memory_bandwidth.value);
  const CostModel model(gpu);
  EXPECT_DOUBLE_EQ(model.model_seconds(f), gpu.kernel_launch.value + compute);
  // The unfused op on the same heads (MHA layout, 32 heads) writes and reads B·heads·T²
  // scores and multiplies the masked half too.
  const OpDesc unfused{.op = "attention", .dtype = DType::bf16, .m = 4096, .k = 128, .batch = 32};
  EXPECT_LT(model.model_seconds(f), model.model_seconds(unfused));
}

// Which library's kernel runs fused attention is the run's choice (attention_backend): on
// the H100 preset cuDNN's approaches 0.74 of 989 TFLOP/s forward and FlashAttention-2's
// 0.37, backward 0.65 and 0.35 (long launches, measured on an H200); a GPU without a
// cuDNN figure falls back to the flash-attn package's, and one without either to
// FlashAttention-2's A100 figures.
TEST(OpCostLlama, FusedAttentionIsPricedAtTheChosenLibrarysRate) {
  const GpuSpec h100 = load_topology("dgx-h100").gpu;
  EXPECT_DOUBLE_EQ(fused_attention_fraction(h100, "", false), 0.74);
  EXPECT_DOUBLE_EQ(fused_attention_fraction(h100, "", true), 0.65);
  EXPECT_DOUBLE_EQ(fused_attention_fraction(h100, "flash_attn", false), 0.37);
  EXPECT_DOUBLE_EQ(fused_attention_fraction(h100, "flash_attn", true), 0.35);
  GpuSpec flash_only = h100;
  flash_only.fused_attention_forward_fraction = flash_only.fused_attention_backward_fraction = 0;
  EXPECT_DOUBLE_EQ(fused_attention_fraction(flash_only, "", false), 0.37);
  GpuSpec neither = flash_only;
  neither.flash_attn_forward_fraction = neither.flash_attn_backward_fraction = 0;
  EXPECT_DOUBLE_EQ(fused_attention_fraction(neither, "", false), kFlashForwardFraction);
  EXPECT_DOUBLE_EQ(fused_attention_fraction(neither, "flash_attn", true), kFlashBackwardFraction);

  // A compute-bound op: the time beyond the launch scales as the inverse of the fraction
  // times each kernel's efficiency at the launch's shape.
  Layer l;
  OpDesc cudnn = flash_attention_desc(DType::bf16, {l.qkv, l.qkv, l.out, l.lse});
  OpDesc flash = cudnn;
  flash.library = "flash_attn";
  const CostModel model(h100);
  const double launch = h100.kernel_launch.value;
  const double cudnn_rate = 0.74 * fused_attention_shape_efficiency(cudnn, h100.sm_count);
  const double flash_rate = 0.37 * fused_attention_shape_efficiency(flash, h100.sm_count);
  EXPECT_NEAR((model.model_seconds(flash) - launch) / (model.model_seconds(cudnn) - launch),
              cudnn_rate / flash_rate, 1e-9);
  // 32 heads of 4096: cuDNN's measured 539 and FlashAttention-2's 274 TFLOP/s forward.
  EXPECT_NEAR(cudnn_rate / flash_rate, 539.0 / 274.0, 0.1);
}

// The scenario's attention_backend reaches the ops the sim binding prices: auto on an H100
// is cuDNN's kernel, on an A100 flash-attn's (Transformer Engine's choice), flash is
// flash-attn's anywhere; and FP8's transposed copies stop at Blackwell.
TEST(OpCostLlama, TheScenariosAttentionBackendReachesTheOps) {
  const Topology h100 = load_topology("dgx-h100"), a100 = load_topology("dgx-a100-80g");
  Scenario s = default_scenario();
  s.model.transformer_impl = "transformer_engine";
  EXPECT_EQ(device_options(s, h100).fused_attention_library, "");
  EXPECT_EQ(device_options(s, a100).fused_attention_library, "flash_attn");
  EXPECT_TRUE(device_options(s, h100).fp8_transposed_copy);
  EXPECT_FALSE(device_options(s, load_topology("dgx-b200")).fp8_transposed_copy);
  s.model.attention_backend = "flash";
  const SimDeviceOptions options = device_options(s, h100);
  EXPECT_EQ(options.fused_attention_library, "flash_attn");

  std::vector<std::string> libraries;
  SimDevice device(
      [&libraries](const OpDesc& op) {
        libraries.push_back(std::string(op.op) + ":" + std::string(op.library));
        return 1e-3;
      },
      options);
  Layer l;
  device.flash_attention(device.default_stream(), {l.qkv, l.qkv, l.out, l.lse});
  EXPECT_EQ(libraries, std::vector<std::string>{"flash_attention:flash_attn"});
}

TEST(OpCostLlama, StreamingOpsMoveTheirBytes) {
  const Tensor x = phantom(Shape{8192, 4096}, DType::bf16);
  const Tensor g = phantom(Shape{4096}, DType::bf16);
  Tensor y = x, rstd = phantom(Shape{8192}, DType::fp32);
  const OpDesc n = rms_norm_desc(DType::bf16, {x, g, y, rstd});
  EXPECT_EQ(n.m, 8192);
  EXPECT_EQ(n.n, 4096);
  EXPECT_DOUBLE_EQ(n.bytes, 2.0 * 2 * 8192 * 4096);  // read x, write y
  const Tensor gate_up = phantom(Shape{8192, 2 * 14336}, DType::bf16);
  const OpDesc s = swiglu_desc(DType::bf16, gate_up, false);
  EXPECT_EQ(s.n, 14336);
  EXPECT_DOUBLE_EQ(s.bytes, 2.0 * 8192 * (2 * 14336 + 14336));  // read gate and up, write out
  Tensor qkv = phantom(Shape{4096, 2, 8, 6, 128}, DType::bf16);
  const OpDesc r = rope_desc(DType::bf16, {.x = qkv, .rotate_per_group = 5, .rotary_dim = 128});
  EXPECT_DOUBLE_EQ(r.bytes, 2.0 * 2 * 4096 * 2 * 8 * 5 * 128);  // q and k, in place
}

// A GEMM's epilogues (Transformer Engine's bias and bias gradient) ride on its kernel: one
// op priced, carrying the bias read once (N bf16 values) or the fp32 bias gradient read and
// written once (M values), not a bias_add / bias_grad op of its own; and the rules that
// keep an epilogue to what cuBLASLt's can do are refused with the shapes named.
TEST(OpCostLlama, GemmEpiloguesArePricedInTheGemm) {
  std::vector<OpDesc> ops;
  SimDevice device(
      [&ops](const OpDesc& op) {
        ops.push_back(op);
        return 1e-3;
      },
      SimDeviceOptions{.compute_dtype = DType::bf16});
  Stream& s = device.default_stream();
  const Tensor x = phantom(Shape{512, 256}, DType::bf16), w = phantom(Shape{768, 256}, DType::bf16);
  const Tensor bias = phantom(Shape{768}, DType::bf16);
  Tensor y = phantom(Shape{512, 768}, DType::bf16);
  device.gemm(s, {.a = x, .b = w, .c = y, .transpose_b = true});
  device.gemm(s, {.a = x, .b = w, .c = y, .transpose_b = true, .bias = &bias});
  // dW (768, 256) = dYᵀ · X with dY = y (512, 768): its bias gradient is dY's 768 column sums.
  Tensor dw = phantom(Shape{768, 256}, DType::fp32), db = phantom(Shape{768}, DType::fp32);
  device.gemm(s, {.a = y, .b = x, .c = dw, .transpose_a = true, .beta = 1});
  device.gemm(s, {.a = y, .b = x, .c = dw, .transpose_a = true, .beta = 1, .bias_grad = &db});
  ASSERT_EQ(ops.size(), 4u);
  for (const OpDesc& op : ops) EXPECT_EQ(op.op, "gemm");
  EXPECT_DOUBLE_EQ(ops[1].bytes - ops[0].bytes, 2.0 * 768);
  EXPECT_DOUBLE_EQ(ops[3].bytes - ops[2].bytes, 8.0 * 768);
  EXPECT_DOUBLE_EQ(ops[1].flops, ops[0].flops);

  auto refused = [&](const GemmArgs& a) {
    try {
      device.gemm(s, a);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const Tensor short_bias = phantom(Shape{256}, DType::bf16);
  EXPECT_NE(refused({.a = x, .b = w, .c = y, .transpose_b = true, .bias = &short_bias})
                .find("needs 768 values and beta 0; has 256"),
            std::string::npos);
  EXPECT_NE(refused({.a = x, .b = w, .c = y, .transpose_b = true, .beta = 1, .bias = &bias})
                .find("and beta 1"),
            std::string::npos);
  Tensor dx = phantom(Shape{512, 256}, DType::bf16), db512 = phantom(Shape{512}, DType::fp32);
  EXPECT_NE(refused({.a = y, .b = w, .c = dx, .bias_grad = &db512}).find("A held (M, K)"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::sim
