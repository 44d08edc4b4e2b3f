// Every Device op of the cuda binding against the cpu binding on fresh seeded inputs, in
// fp32 (relative error ≤ 1e-5) and bf16 (≤ 1e-2), outputs poisoned with NaN first; and the
// binding's own contracts: memory accounting identical to the cpu binding's, stream and
// event ordering, trace_time. Each test skips at run time, with the CUDA runtime's reason,
// where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/ops.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace tandem::testing {
namespace {

class CudaOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TANDEM_REQUIRE_GPU();
    d_ = std::make_unique<TwoDevices>();
  }
  DType dtype() const { return GetParam(); }
  double tol() const { return tolerance(GetParam()); }
  TwoDevices& d() { return *d_; }
  CpuDevice& cpu() { return d_->cpu(); }
  CudaDevice& gpu() { return d_->gpu(); }
  Stream& cs() { return d_->cpu().default_stream(); }
  Stream& gs() { return d_->gpu().default_stream(); }
  void expect_attention_matches(const AttentionDropout& drop, std::uint64_t seed);

 private:
  std::unique_ptr<TwoDevices> d_;
};

TEST_P(CudaOps, GemmAllTransposesAlphaBeta) {
  const std::int64_t M = 33, N = 65, K = 130;
  std::uint64_t seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = d().random(ta ? Shape{K, M} : Shape{M, K}, dtype(), seed++);
      auto b = d().random(tb ? Shape{N, K} : Shape{K, N}, dtype(), seed++);
      // Written (β = 0) in the tensors' dtype.
      auto c = d().poisoned({M, N}, dtype());
      cpu().gemm(cs(), {.a = a.cpu,
                        .b = b.cpu,
                        .c = c.cpu,
                        .transpose_a = ta,
                        .transpose_b = tb,
                        .alpha = 0.5f});
      gpu().gemm(gs(), {.a = a.gpu,
                        .b = b.gpu,
                        .c = c.gpu,
                        .transpose_a = ta,
                        .transpose_b = tb,
                        .alpha = 0.5f});
      EXPECT_TRUE(d().close(c, tol())) << "transpose_a " << ta << ", transpose_b " << tb;
      // Accumulated (β = 1) into an fp32 buffer, as weight gradients into main grads.
      auto acc = d().random({M, N}, DType::fp32, seed++);
      cpu().gemm(
          cs(),
          {.a = a.cpu, .b = b.cpu, .c = acc.cpu, .transpose_a = ta, .transpose_b = tb, .beta = 1});
      gpu().gemm(
          gs(),
          {.a = a.gpu, .b = b.gpu, .c = acc.gpu, .transpose_a = ta, .transpose_b = tb, .beta = 1});
      EXPECT_TRUE(d().close(acc, tol()))
          << "accumulating, transpose_a " << ta << ", transpose_b " << tb;
    }
  }
}

// The GEMM's epilogues (core/device.hpp GemmArgs): a linear layer's forward with its bias,
// and the weight-gradient GEMM accumulating into fp32 with its bias gradient read off dY —
// through cuBLASLt's BIAS / BGRADB epilogues for 16-bit operands (kernels/cuda/
// gemm_lt_plan.hpp), cuBLAS and the bias kernels for fp32 — against the cpu binding's GEMM
// and bias kernels.
TEST_P(CudaOps, GemmEpiloguesMatchTheCpu) {
  const std::int64_t tokens = 64, in = 32, out = 48;
  auto x = d().random({tokens, in}, dtype(), 71);
  auto w = d().random({out, in}, dtype(), 72);
  auto bias = d().random({out}, dtype(), 73);
  auto y = d().poisoned({tokens, out}, dtype());
  cpu().gemm(cs(), {.a = x.cpu, .b = w.cpu, .c = y.cpu, .transpose_b = true, .bias = &bias.cpu});
  gpu().gemm(gs(), {.a = x.gpu, .b = w.gpu, .c = y.gpu, .transpose_b = true, .bias = &bias.gpu});
  EXPECT_TRUE(d().close(y, tol())) << "forward with its bias";
  auto dy = d().random({tokens, out}, dtype(), 74);
  auto dw = d().random({out, in}, DType::fp32, 75);
  auto db = d().random({out}, DType::fp32, 76);
  cpu().gemm(
      cs(),
      {.a = dy.cpu, .b = x.cpu, .c = dw.cpu, .transpose_a = true, .beta = 1, .bias_grad = &db.cpu});
  gpu().gemm(
      gs(),
      {.a = dy.gpu, .b = x.gpu, .c = dw.gpu, .transpose_a = true, .beta = 1, .bias_grad = &db.gpu});
  EXPECT_TRUE(d().close(dw, tol())) << "weight gradient";
  EXPECT_TRUE(d().close(db, tol())) << "bias gradient, accumulated";
}

TEST_P(CudaOps, BiasAddAndGrad) {
  const std::int64_t rows = 77, C = 97;
  auto x = d().random({rows, C}, dtype(), 11);
  auto bias = d().random({C}, dtype(), 12);
  cpu().bias_add(cs(), x.cpu, bias.cpu);
  gpu().bias_add(gs(), x.gpu, bias.gpu);
  EXPECT_TRUE(d().close(x, tol()));
  auto grad = d().random({rows, C}, dtype(), 13);
  auto grad_bias = d().random({C}, DType::fp32, 14);  // accumulated into
  cpu().bias_grad(cs(), grad.cpu, grad_bias.cpu);
  gpu().bias_grad(gs(), grad.gpu, grad_bias.gpu);
  EXPECT_TRUE(d().close(grad_bias, tol()));
}

TEST_P(CudaOps, LayerNormForwardBackward) {
  const std::int64_t rows = 45, C = 200;
  auto in = d().random({rows, C}, dtype(), 21, -2.0f, 3.0f);
  auto gamma = d().random({C}, dtype(), 22, 0.5f, 1.5f);
  auto beta = d().random({C}, dtype(), 23);
  auto out = d().poisoned({rows, C}, dtype());
  auto mean = d().poisoned({rows}, DType::fp32);
  auto rstd = d().poisoned({rows}, DType::fp32);
  cpu().layer_norm(cs(), {in.cpu, gamma.cpu, beta.cpu, out.cpu, mean.cpu, rstd.cpu});
  gpu().layer_norm(gs(), {in.gpu, gamma.gpu, beta.gpu, out.gpu, mean.gpu, rstd.gpu});
  EXPECT_TRUE(d().close(out, tol()));
  EXPECT_TRUE(d().close(mean, tol()));
  EXPECT_TRUE(d().close(rstd, tol()));
  auto dout = d().random({rows, C}, dtype(), 24);
  auto din = d().poisoned({rows, C}, dtype());
  auto dgamma = d().random({C}, DType::fp32, 25);
  auto dbeta = d().random({C}, DType::fp32, 26);
  cpu().layer_norm_backward(
      cs(), {dout.cpu, in.cpu, gamma.cpu, mean.cpu, rstd.cpu, din.cpu, dgamma.cpu, dbeta.cpu});
  gpu().layer_norm_backward(
      gs(), {dout.gpu, in.gpu, gamma.gpu, mean.gpu, rstd.gpu, din.gpu, dgamma.gpu, dbeta.gpu});
  EXPECT_TRUE(d().close(din, tol()));
  EXPECT_TRUE(d().close(dgamma, tol()));
  EXPECT_TRUE(d().close(dbeta, tol()));
}

// Causal attention on both bindings, forward then backward; with dropout the GPU draws the
// CPU's mask from the same stream (kernels/math/dropout.hpp).
void CudaOps::expect_attention_matches(const AttentionDropout& drop, std::uint64_t seed) {
  const std::int64_t B = 2, T = 70, NH = 3, HD = 16;
  auto qkv = d().random({T, B, 3, NH, HD}, dtype(), seed, -2.0f, 2.0f);
  auto out = d().poisoned({T, B, NH, HD}, dtype());
  auto probs = d().poisoned({B, NH, T, T}, dtype());
  cpu().attention(cs(), {qkv.cpu, out.cpu, probs.cpu, drop});
  gpu().attention(gs(), {qkv.gpu, out.gpu, probs.gpu, drop});
  EXPECT_TRUE(d().close(probs, tol()));
  EXPECT_TRUE(d().close(out, tol()));
  auto dout = d().random({T, B, NH, HD}, dtype(), seed + 1);
  auto dqkv = d().poisoned({T, B, 3, NH, HD}, dtype());
  // Both backward passes read the same probabilities: the gpu's, rounded as stored.
  const auto p = d().read_gpu(probs.gpu);
  auto same_probs = d().input({B, NH, T, T}, dtype(), p);
  cpu().attention_backward(cs(), {dout.cpu, qkv.cpu, same_probs.cpu, dqkv.cpu, drop});
  gpu().attention_backward(gs(), {dout.gpu, qkv.gpu, same_probs.gpu, dqkv.gpu, drop});
  EXPECT_TRUE(d().close(dqkv, 2 * tol()));  // two GEMMs deep, each rounding its output
}

TEST_P(CudaOps, CausalAttentionForwardBackward) {
  expect_attention_matches({}, 31);
}

TEST_P(CudaOps, CausalAttentionWithDropoutMatchesTheCpu) {
  expect_attention_matches(
      {.p = 0.25f, .seed = 7, .microbatch = 3, .layer = 1, .head_offset = 3, .heads_total = 6}, 41);
}

TEST_P(CudaOps, RmsNormForwardBackward) {
  const std::int64_t rows = 45, C = 200;
  auto in = d().random({rows, C}, dtype(), 121, -2.0f, 3.0f);
  auto gamma = d().random({C}, dtype(), 122, 0.5f, 1.5f);
  auto out = d().poisoned({rows, C}, dtype());
  auto rstd = d().poisoned({rows}, DType::fp32);
  cpu().rms_norm(cs(), {in.cpu, gamma.cpu, out.cpu, rstd.cpu, 1e-6f});
  gpu().rms_norm(gs(), {in.gpu, gamma.gpu, out.gpu, rstd.gpu, 1e-6f});
  EXPECT_TRUE(d().close(out, tol()));
  EXPECT_TRUE(d().close(rstd, tol()));
  auto dout = d().random({rows, C}, dtype(), 124);
  auto din = d().poisoned({rows, C}, dtype());
  auto dgamma = d().random({C}, DType::fp32, 125);
  cpu().rms_norm_backward(cs(), {dout.cpu, in.cpu, gamma.cpu, rstd.cpu, din.cpu, dgamma.cpu});
  gpu().rms_norm_backward(gs(), {dout.gpu, in.gpu, gamma.gpu, rstd.gpu, din.gpu, dgamma.gpu});
  EXPECT_TRUE(d().close(din, tol()));
  EXPECT_TRUE(d().close(dgamma, tol()));
}

TEST_P(CudaOps, SwigluForwardBackward) {
  const std::int64_t rows = 37, F = 300;
  auto in = d().random({rows, 2 * F}, dtype(), 131, -4.0f, 4.0f);
  auto out = d().poisoned({rows, F}, dtype());
  cpu().swiglu(cs(), in.cpu, out.cpu);
  gpu().swiglu(gs(), in.gpu, out.gpu);
  EXPECT_TRUE(d().close(out, tol()));
  auto dout = d().random({rows, F}, dtype(), 132);
  auto din = d().poisoned({rows, 2 * F}, dtype());
  cpu().swiglu_backward(cs(), dout.cpu, in.cpu, din.cpu);
  gpu().swiglu_backward(gs(), dout.gpu, in.gpu, din.gpu);
  EXPECT_TRUE(d().close(din, tol()));
}

TEST_P(CudaOps, RopeForwardAndInverse) {
  // 3 groups of (2 queries, key, value), rotary on 3/4 of a 16-wide head, from position 5.
  auto x = d().random({40, 2, 3, 4, 16}, dtype(), 141, -2.0f, 2.0f);
  for (bool inverse : {false, true}) {
    cpu().rope(cs(), {.x = x.cpu,
                      .rotate_per_group = 3,
                      .rotary_dim = 12,
                      .base = 100.0f,
                      .position_offset = 5,
                      .inverse = inverse});
    gpu().rope(gs(), {.x = x.gpu,
                      .rotate_per_group = 3,
                      .rotary_dim = 12,
                      .base = 100.0f,
                      .position_offset = 5,
                      .inverse = inverse});
    EXPECT_TRUE(d().close(x, tol())) << "inverse " << inverse;
  }
}

TEST_P(CudaOps, FusedGroupedQueryAttentionForwardBackward) {
  // 2 groups of 3 query heads; 70 positions cross the CPU kernel's 64-row blocks.
  const std::int64_t B = 2, T = 70, G = 2, P = 3, HD = 16;
  auto qkv = d().random({T, B, G, P + 2, HD}, dtype(), 151, -2.0f, 2.0f);
  auto out = d().poisoned({T, B, G * P, HD}, dtype());
  auto lse = d().poisoned({B, G * P, T}, DType::fp32);
  cpu().flash_attention(cs(), {qkv.cpu, qkv.cpu, out.cpu, lse.cpu});
  gpu().flash_attention(gs(), {qkv.gpu, qkv.gpu, out.gpu, lse.gpu});
  EXPECT_TRUE(d().close(out, tol()));
  EXPECT_TRUE(d().close(lse, tol()));
  auto dout = d().random({T, B, G * P, HD}, dtype(), 152);
  auto dqkv = d().poisoned({T, B, G, P + 2, HD}, dtype());
  // Both backward passes read the gpu's output and log-sum-exp, rounded as stored.
  auto same_out = d().input({T, B, G * P, HD}, dtype(), d().read_gpu(out.gpu));
  auto same_lse = d().input({B, G * P, T}, DType::fp32, d().read_gpu(lse.gpu));
  cpu().flash_attention_backward(
      cs(), {dout.cpu, qkv.cpu, qkv.cpu, same_out.cpu, same_lse.cpu, dqkv.cpu, dqkv.cpu});
  gpu().flash_attention_backward(
      gs(), {dout.gpu, qkv.gpu, qkv.gpu, same_out.gpu, same_lse.gpu, dqkv.gpu, dqkv.gpu});
  EXPECT_TRUE(d().close(dqkv, 2 * tol()));
}

// Multi-latent attention's ops: heads of 12 query/key and 8 value features (DeepSeek's 192
// and 128 in miniature) through fused attention; the positional features rotated in
// adjacent pairs from feature 7; strided column blocks broadcast and summed.
TEST_P(CudaOps, MultiLatentAttentionOps) {
  const std::int64_t B = 2, T = 70, H = 3, HD = 12, VD = 8, W = 2 * HD + VD;
  auto qkv = d().random({T, B, H, W}, dtype(), 161, -2.0f, 2.0f);
  const auto rope = [&](Tensor& x, bool inverse) {
    return RopeArgs{.x = x,
                    .rotate_per_group = 1,
                    .rotary_dim = 4,
                    .position_offset = 3,
                    .inverse = inverse,
                    .first_feature = 7,
                    .interleaved = true};
  };
  Tensor cpu_heads = qkv.cpu.view(Shape{T, B, H, 1, W});
  Tensor gpu_heads = qkv.gpu.view(Shape{T, B, H, 1, W});
  for (bool inverse : {false, true}) {
    cpu().rope(cs(), rope(cpu_heads, inverse));
    gpu().rope(gs(), rope(gpu_heads, inverse));
    EXPECT_TRUE(d().close(qkv, tol())) << "interleaved rope, inverse " << inverse;
  }
  auto out = d().poisoned({T, B, H, VD}, dtype());
  auto lse = d().poisoned({B, H, T}, DType::fp32);
  cpu().flash_attention(cs(), {.q_source = qkv.cpu,
                               .kv_source = qkv.cpu,
                               .output = out.cpu,
                               .lse = lse.cpu,
                               .v_head_dim = VD});
  gpu().flash_attention(gs(), {.q_source = qkv.gpu,
                               .kv_source = qkv.gpu,
                               .output = out.gpu,
                               .lse = lse.gpu,
                               .v_head_dim = VD});
  EXPECT_TRUE(d().close(out, tol()));
  EXPECT_TRUE(d().close(lse, tol()));
  auto dout = d().random({T, B, H, VD}, dtype(), 162);
  auto dqkv = d().poisoned({T, B, H, W}, dtype());
  auto same_out = d().input({T, B, H, VD}, dtype(), d().read_gpu(out.gpu));
  auto same_lse = d().input({B, H, T}, DType::fp32, d().read_gpu(lse.gpu));
  cpu().flash_attention_backward(cs(), {.grad_output = dout.cpu,
                                        .q_source = qkv.cpu,
                                        .kv_source = qkv.cpu,
                                        .output = same_out.cpu,
                                        .lse = same_lse.cpu,
                                        .grad_q_source = dqkv.cpu,
                                        .grad_kv_source = dqkv.cpu,
                                        .v_head_dim = VD});
  gpu().flash_attention_backward(gs(), {.grad_output = dout.gpu,
                                        .q_source = qkv.gpu,
                                        .kv_source = qkv.gpu,
                                        .output = same_out.gpu,
                                        .lse = same_lse.gpu,
                                        .grad_q_source = dqkv.gpu,
                                        .grad_kv_source = dqkv.gpu,
                                        .v_head_dim = VD});
  EXPECT_TRUE(d().close(dqkv, 2 * tol()));
  // One block of 5 columns into every head (from_stride 0), then the heads' blocks summed.
  const std::int64_t rows = T * B;
  auto pe = d().random({rows, 5}, dtype(), 163);
  auto rows_of_heads = d().random({rows, H * W}, dtype(), 164);
  const auto broadcast = [&](const Tensor& from, Tensor& to) {
    return ColumnCopyArgs{.from = from,
                          .to = to,
                          .to_column = HD + 7,
                          .width = 5,
                          .count = H,
                          .from_stride = 0,
                          .to_stride = W};
  };
  cpu().copy_columns(cs(), broadcast(pe.cpu, rows_of_heads.cpu));
  gpu().copy_columns(gs(), broadcast(pe.gpu, rows_of_heads.gpu));
  EXPECT_TRUE(d().close(rows_of_heads, tol()));
  auto sum = d().random({rows, 5}, dtype(), 165);
  for (bool accumulate : {false, true}) {
    const auto summed = [&](const Tensor& from, Tensor& to) {
      return ColumnCopyArgs{.from = from,
                            .to = to,
                            .from_column = HD + 7,
                            .width = 5,
                            .accumulate = accumulate,
                            .count = H,
                            .from_stride = W,
                            .to_stride = 0};
    };
    cpu().copy_columns(cs(), summed(rows_of_heads.cpu, sum.cpu));
    gpu().copy_columns(gs(), summed(rows_of_heads.gpu, sum.gpu));
    EXPECT_TRUE(d().close(sum, tol())) << "summed blocks, accumulate " << accumulate;
  }
}

TEST_P(CudaOps, GeluForwardBackward) {
  const std::int64_t n = 10007;
  auto in = d().random({n}, dtype(), 41, -6.0f, 6.0f);
  auto out = d().poisoned({n}, dtype());
  cpu().gelu(cs(), in.cpu, out.cpu);
  gpu().gelu(gs(), in.gpu, out.gpu);
  EXPECT_TRUE(d().close(out, tol()));
  auto dout = d().random({n}, dtype(), 42);
  auto din = d().poisoned({n}, dtype());
  cpu().gelu_backward(cs(), dout.cpu, in.cpu, din.cpu);
  gpu().gelu_backward(gs(), dout.gpu, in.gpu, din.gpu);
  EXPECT_TRUE(d().close(din, tol()));
}

TEST_P(CudaOps, BiasGeluAndBiasResidualAdd) {
  const std::int64_t rows = 301, C = 96;  // C·rows not a multiple of the block
  auto in = d().random({rows, C}, dtype(), 43, -6.0f, 6.0f);
  auto bias = d().random({C}, dtype(), 44);
  auto out = d().poisoned({rows, C}, dtype());
  cpu().bias_gelu(cs(), in.cpu, bias.cpu, out.cpu);
  gpu().bias_gelu(gs(), in.gpu, bias.gpu, out.gpu);
  EXPECT_TRUE(d().close(out, tol()));
  auto dout = d().random({rows, C}, dtype(), 45);
  auto din = d().poisoned({rows, C}, dtype());
  cpu().bias_gelu_backward(cs(), dout.cpu, in.cpu, bias.cpu, din.cpu);
  gpu().bias_gelu_backward(gs(), dout.gpu, in.gpu, bias.gpu, din.gpu);
  EXPECT_TRUE(d().close(din, tol()));
  auto residual = d().random({rows, C}, dtype(), 46);
  auto sum = d().poisoned({rows, C}, dtype());
  cpu().bias_dropout_add(cs(), {in.cpu, &bias.cpu, residual.cpu, sum.cpu});
  gpu().bias_dropout_add(gs(), {in.gpu, &bias.gpu, residual.gpu, sum.gpu});
  EXPECT_TRUE(d().close(sum, tol()));
  // With hidden dropout (rows from 40 on, as a sequence-parallel shard): the same mask.
  const HiddenDropout drop{.p = 0.2f, .seed = 9, .microbatch = 4, .site = 3, .row_offset = 40};
  cpu().bias_dropout_add(cs(), {in.cpu, &bias.cpu, residual.cpu, sum.cpu, drop});
  gpu().bias_dropout_add(gs(), {in.gpu, &bias.gpu, residual.gpu, sum.gpu, drop});
  EXPECT_TRUE(d().close(sum, tol()));
  cpu().bias_dropout_add(cs(), {in.cpu, nullptr, residual.cpu, sum.cpu, drop});
  gpu().bias_dropout_add(gs(), {in.gpu, nullptr, residual.gpu, sum.gpu, drop});
  EXPECT_TRUE(d().close(sum, tol()));
  auto dropped = d().poisoned({rows, C}, dtype());
  cpu().dropout(cs(), in.cpu, dropped.cpu, drop);
  gpu().dropout(gs(), in.gpu, dropped.gpu, drop);
  EXPECT_TRUE(d().close(dropped, tol()));
  cpu().dropout_backward(cs(), dout.cpu, dropped.cpu, drop);
  gpu().dropout_backward(gs(), dout.gpu, dropped.gpu, drop);
  EXPECT_TRUE(d().close(dropped, tol()));
  auto wrong_bias = d().random({C + 1}, dtype(), 47);
  EXPECT_THROW(gpu().bias_gelu(gs(), in.gpu, wrong_bias.gpu, out.gpu), std::invalid_argument);
}

TEST_P(CudaOps, VocabParallelEmbeddingForwardBackward) {
  const std::int64_t rows = 300, C = 48, local_vocab = 50, vocab_begin = 50;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37) % 160);
  auto tokens = d().ids({rows}, ids);  // a third in the shard [50, 100), many repeated
  auto table = d().random({local_vocab, C}, dtype(), 51);
  auto out = d().poisoned({rows, C}, dtype());
  cpu().embedding(cs(), {tokens.cpu, table.cpu, out.cpu, vocab_begin});
  gpu().embedding(gs(), {tokens.gpu, table.gpu, out.gpu, vocab_begin});
  EXPECT_TRUE(d().close(out, tol()));
  auto dout = d().random({rows, C}, dtype(), 52);
  auto dtable = d().random({local_vocab, C}, DType::fp32, 53);
  cpu().embedding_backward(cs(), {tokens.cpu, dout.cpu, dtable.cpu, vocab_begin});
  gpu().embedding_backward(gs(), {tokens.gpu, dout.gpu, dtable.gpu, vocab_begin});
  EXPECT_TRUE(d().close(dtable, tol()));
}

TEST_P(CudaOps, VocabParallelCrossEntropyPhases) {
  const std::int64_t rows = 37, V = 1000, vocab_begin = 1000;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 211) % 2000);
  auto targets = d().ids({rows}, ids);  // about half of the targets in this shard
  auto logits = d().random({rows, V}, dtype(), 61, -8.0f, 8.0f);
  const CrossEntropyArgs ca{logits.cpu, targets.cpu, vocab_begin};
  const CrossEntropyArgs ga{logits.gpu, targets.gpu, vocab_begin};
  auto row_max = d().poisoned({rows}, DType::fp32);
  cpu().cross_entropy_max(cs(), ca, row_max.cpu);
  gpu().cross_entropy_max(gs(), ga, row_max.gpu);
  EXPECT_TRUE(d().close(row_max, tol()));
  auto sum_exp = d().poisoned({rows}, DType::fp32);
  auto target_logit = d().poisoned({rows}, DType::fp32);
  cpu().cross_entropy_sums(cs(), ca, row_max.cpu, sum_exp.cpu, target_logit.cpu);
  gpu().cross_entropy_sums(gs(), ga, row_max.gpu, sum_exp.gpu, target_logit.gpu);
  EXPECT_TRUE(d().close(sum_exp, tol()));
  EXPECT_TRUE(d().close(target_logit, tol()));
  auto loss = d().poisoned({rows}, DType::fp32);
  cpu().cross_entropy_loss(cs(), row_max.cpu, sum_exp.cpu, target_logit.cpu, loss.cpu);
  gpu().cross_entropy_loss(gs(), row_max.gpu, sum_exp.gpu, target_logit.gpu, loss.gpu);
  EXPECT_TRUE(d().close(loss, tol()));
  auto dloss = d().random({rows}, DType::fp32, 62, 0.1f, 1.0f);
  auto dlogits = d().poisoned({rows, V}, dtype());
  cpu().cross_entropy_backward(cs(), ca, row_max.cpu, sum_exp.cpu, dloss.cpu, dlogits.cpu);
  gpu().cross_entropy_backward(gs(), ga, row_max.gpu, sum_exp.gpu, dloss.gpu, dlogits.gpu);
  EXPECT_TRUE(d().close(dlogits, tol()));
  // In place, as the model calls it: the logits become their gradient.
  cpu().cross_entropy_backward(cs(), ca, row_max.cpu, sum_exp.cpu, dloss.cpu, logits.cpu);
  gpu().cross_entropy_backward(gs(), ga, row_max.gpu, sum_exp.gpu, dloss.gpu, logits.gpu);
  EXPECT_TRUE(d().close(logits, tol()));
}

TEST_P(CudaOps, AddScaleFillCopy) {
  const std::int64_t n = 4099;
  auto a = d().random({n}, dtype(), 71);
  auto b = d().random({n}, dtype(), 72);
  auto out = d().poisoned({n}, dtype());
  cpu().add(cs(), a.cpu, b.cpu, out.cpu);
  gpu().add(gs(), a.gpu, b.gpu, out.gpu);
  EXPECT_TRUE(d().close(out, tol()));
  cpu().add(cs(), out.cpu, b.cpu, out.cpu);  // in place
  gpu().add(gs(), out.gpu, b.gpu, out.gpu);
  EXPECT_TRUE(d().close(out, tol()));
  cpu().scale(cs(), a.cpu, -0.375f);
  gpu().scale(gs(), a.gpu, -0.375f);
  EXPECT_TRUE(d().close(a, tol()));
  // A copy must be exact, so its source is one both sides hold bit for bit: `a` after
  // scale is not (bf16 rounding differs between the bindings by an ulp).
  auto source = d().random({n}, dtype(), 73);
  auto copied = d().poisoned({n}, dtype());
  cpu().copy(cs(), source.cpu, copied.cpu);
  gpu().copy(gs(), source.gpu, copied.gpu);
  EXPECT_TRUE(d().close(copied, 0.0));
  cpu().fill(cs(), copied.cpu, 2.5f);
  gpu().fill(gs(), copied.gpu, 2.5f);
  EXPECT_TRUE(d().close(copied, 0.0));
  // A view: the second half only.
  Tensor cpu_half = b.cpu.view({n / 2}, n - n / 2), gpu_half = b.gpu.view({n / 2}, n - n / 2);
  cpu().fill(cs(), cpu_half, -1.0f);
  gpu().fill(gs(), gpu_half, -1.0f);
  EXPECT_TRUE(d().close(b, 0.0));
}

TEST_P(CudaOps, SumSquaresAccumulates) {
  const std::int64_t n = 300001;
  auto x = d().random({n}, dtype(), 81);
  auto out = d().input({1}, DType::fp32, {2.0f});
  cpu().sum_squares(cs(), x.cpu, out.cpu);
  gpu().sum_squares(gs(), x.gpu, out.gpu);
  EXPECT_TRUE(d().close(out, 1e-6));
  EXPECT_GT(d().read_gpu(out.gpu)[0], 2.0f);
}

// The router on logits in the test's dtype (bf16 rounding makes ties: both bindings rank
// them to the lower expert), in each gate mode and with forced balance; its backward with
// and without the load-balancing term. Experts and counts must match exactly.
TEST_P(CudaOps, MoeRouterForwardBackward) {
  const std::int64_t T = 53, E = 12, k = 3;
  const std::vector<float> aux_grad = random_floats(static_cast<std::size_t>(E), 151);
  std::uint64_t seed = 152;
  for (bool pre_softmax : {false, true}) {
    for (bool force_balance : {false, true}) {
      const std::string mode = std::string("pre_softmax ") + (pre_softmax ? "on" : "off") +
                               ", force_balance " + (force_balance ? "on" : "off");
      auto logits = d().random({T, E}, dtype(), seed++, -2.0f, 2.0f);
      auto probs = d().poisoned({T, E}, DType::fp32);
      auto gates = d().poisoned({T, k}, DType::fp32);
      auto top = d().ids({T, k}, std::vector<std::int32_t>(static_cast<std::size_t>(T * k), -1));
      std::vector<std::int64_t> cpu_counts(static_cast<std::size_t>(E), -1),
          gpu_counts(static_cast<std::size_t>(E), -1);
      cpu().moe_router(cs(),
                       {.logits = logits.cpu,
                        .probs = probs.cpu,
                        .top = top.cpu,
                        .gates = gates.cpu,
                        .pre_softmax = pre_softmax,
                        .force_balance = force_balance},
                       cpu_counts);
      gpu().moe_router(gs(),
                       {.logits = logits.gpu,
                        .probs = probs.gpu,
                        .top = top.gpu,
                        .gates = gates.gpu,
                        .pre_softmax = pre_softmax,
                        .force_balance = force_balance},
                       gpu_counts);
      EXPECT_TRUE(d().same_ints<std::int32_t>(top)) << mode;
      EXPECT_EQ(gpu_counts, cpu_counts) << mode;
      EXPECT_EQ(std::accumulate(gpu_counts.begin(), gpu_counts.end(), std::int64_t{0}), T * k);
      EXPECT_TRUE(d().close(probs, 1e-5)) << mode;  // fp32 from logits rounded alike
      EXPECT_TRUE(d().close(gates, 1e-5)) << mode;
      auto grad_gates = d().random({T, k}, DType::fp32, seed++);
      for (bool with_aux : {false, true}) {
        auto grad_logits = d().poisoned({T, E}, DType::fp32);
        const std::span<const float> aux =
            with_aux ? std::span<const float>(aux_grad) : std::span<const float>();
        cpu().moe_router_backward(cs(), {.probs = probs.cpu,
                                         .top = top.cpu,
                                         .gates = gates.cpu,
                                         .grad_gates = grad_gates.cpu,
                                         .aux_grad = aux,
                                         .grad_logits = grad_logits.cpu,
                                         .pre_softmax = pre_softmax});
        gpu().moe_router_backward(gs(), {.probs = probs.gpu,
                                         .top = top.gpu,
                                         .gates = gates.gpu,
                                         .grad_gates = grad_gates.gpu,
                                         .aux_grad = aux,
                                         .grad_logits = grad_logits.gpu,
                                         .pre_softmax = pre_softmax});
        EXPECT_TRUE(d().close(grad_logits, 1e-5)) << mode << ", aux_grad " << with_aux;
      }
    }
  }
  // More experts per token than the GPU router keeps in registers.
  const std::int64_t wide = kernels::cuda::kRouterMaxTopK + 1;
  auto logits = d().random({4, wide}, dtype(), seed++);
  auto probs = d().poisoned({4, wide}, DType::fp32);
  auto gates = d().poisoned({4, wide}, DType::fp32);
  auto top = d().ids({4, wide}, std::vector<std::int32_t>(static_cast<std::size_t>(4 * wide), 0));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(wide));
  EXPECT_THROW(
      gpu().moe_router(
          gs(), {.logits = logits.gpu, .probs = probs.gpu, .top = top.gpu, .gates = gates.gpu},
          counts),
      std::invalid_argument);
}

// DeepSeek-V3's router on the GPU against the CPU: sigmoid scores, group-limited choice
// with an expert bias, a scaling factor, the aux loss's own counts; its backward (gates'
// gradient rows wider than k, as a padded dispatch table's); then token dropping by gate
// and by position, padded or not: the dispatch tables and counts exactly the CPU's.
TEST_P(CudaOps, MoeSigmoidRouterAndTokenDropping) {
  const std::int64_t T = 47, E = 16, k = 4;
  std::vector<float> bias = random_floats(static_cast<std::size_t>(E), 161);
  for (float& b : bias) b *= 0.1f;
  const std::vector<float> aux_grad = random_floats(static_cast<std::size_t>(E), 162);
  auto logits = d().random({T, E}, dtype(), 163, -2.0f, 2.0f);
  auto probs = d().poisoned({T, E}, DType::fp32);
  auto gates = d().poisoned({T, k}, DType::fp32);
  auto top = d().ids({T, k}, std::vector<std::int32_t>(static_cast<std::size_t>(T * k), -1));
  std::vector<std::int64_t> cpu_counts(E), gpu_counts(E), cpu_aux(E), gpu_aux(E);
  auto args = [&](auto& l, auto& p, auto& t, auto& g, std::vector<std::int64_t>& aux) {
    return MoeRouterArgs{.logits = l,
                         .probs = p,
                         .top = t,
                         .gates = g,
                         .score_function = MoeScoreFunction::sigmoid,
                         .num_groups = 4,
                         .group_topk = 2,
                         .topk_scaling_factor = 2.5f,
                         .expert_bias = bias,
                         .aux_tokens_per_expert = aux};
  };
  cpu().moe_router(cs(), args(logits.cpu, probs.cpu, top.cpu, gates.cpu, cpu_aux), cpu_counts);
  gpu().moe_router(gs(), args(logits.gpu, probs.gpu, top.gpu, gates.gpu, gpu_aux), gpu_counts);
  EXPECT_TRUE(d().same_ints<std::int32_t>(top));
  EXPECT_EQ(gpu_counts, cpu_counts);
  EXPECT_EQ(gpu_aux, cpu_aux);
  EXPECT_TRUE(d().close(probs, 1e-5));
  EXPECT_TRUE(d().close(gates, 1e-5));
  auto grad_gates = d().random({T, k + E}, DType::fp32, 164);
  auto grad_logits = d().poisoned({T, E}, DType::fp32);
  auto backward = [&](Device& dev, Stream& st, auto& p, auto& t, auto& g, auto& gg, auto& gl) {
    dev.moe_router_backward(st, {.probs = p,
                                 .top = t,
                                 .gates = g,
                                 .grad_gates = gg,
                                 .aux_grad = aux_grad,
                                 .grad_logits = gl,
                                 .score_function = MoeScoreFunction::sigmoid,
                                 .topk_scaling_factor = 2.5f});
  };
  backward(cpu(), cs(), probs.cpu, top.cpu, gates.cpu, grad_gates.cpu, grad_logits.cpu);
  backward(gpu(), gs(), probs.gpu, top.gpu, gates.gpu, grad_gates.gpu, grad_logits.gpu);
  EXPECT_TRUE(d().close(grad_logits, 1e-5));
  for (const auto policy : {MoeDropPolicy::probs, MoeDropPolicy::position})
    for (const bool pad : {false, true}) {
      const std::int64_t W = pad ? k + E : k;
      auto dtop = d().ids({T, W}, std::vector<std::int32_t>(static_cast<std::size_t>(T * W), 7));
      auto dgates = d().poisoned({T, W}, DType::fp32);
      std::vector<std::int64_t> cpu_rows(E), gpu_rows(E);
      const std::int64_t capacity = (T * k + E - 1) / E;  // factor 1.0
      cpu().moe_drop_tokens(cs(),
                            {.top = top.cpu,
                             .gates = gates.cpu,
                             .dispatch_top = dtop.cpu,
                             .dispatch_gates = dgates.cpu,
                             .capacity = capacity,
                             .policy = policy,
                             .pad_to_capacity = pad},
                            cpu_rows);
      gpu().moe_drop_tokens(gs(),
                            {.top = top.gpu,
                             .gates = gates.gpu,
                             .dispatch_top = dtop.gpu,
                             .dispatch_gates = dgates.gpu,
                             .capacity = capacity,
                             .policy = policy,
                             .pad_to_capacity = pad},
                            gpu_rows);
      EXPECT_TRUE(d().same_ints<std::int32_t>(dtop)) << "pad " << pad;
      EXPECT_TRUE(d().close(dgates, 0.0)) << "pad " << pad;
      EXPECT_EQ(gpu_rows, cpu_rows) << "pad " << pad;
    }
}

// The dispatch: permute's rows and maps (exactly the CPU's), the combine with the gates and
// the backward of both. top repeats experts, leaves one empty and routes a token twice to
// one expert (kept: one copy per slot).
TEST_P(CudaOps, MoePermuteUnpermuteForwardBackward) {
  const std::int64_t T = 41, H = 70, E = 6, k = 2;
  std::vector<std::int32_t> experts(static_cast<std::size_t>(T * k));
  for (std::size_t i = 0; i < experts.size(); ++i)
    experts[i] = static_cast<std::int32_t>((i * 7 + i / 5) % 5);  // expert 5 gets none
  experts[6] = experts[7];  // token 3: both slots to one expert
  auto top = d().ids({T, k}, experts);
  auto input = d().random({T, H}, dtype(), 161);
  auto permuted = d().poisoned({T * k, H}, dtype());
  auto row_of_copy = d().integers({T * k}, DType::int64);
  auto source_of_row = d().integers({T * k}, DType::int64);
  cpu().moe_permute(cs(), {.input = input.cpu,
                           .top = top.cpu,
                           .permuted = permuted.cpu,
                           .row_of_copy = row_of_copy.cpu,
                           .source_of_row = source_of_row.cpu,
                           .experts = E});
  gpu().moe_permute(gs(), {.input = input.gpu,
                           .top = top.gpu,
                           .permuted = permuted.gpu,
                           .row_of_copy = row_of_copy.gpu,
                           .source_of_row = source_of_row.gpu,
                           .experts = E});
  EXPECT_TRUE(d().same_ints<std::int64_t>(row_of_copy));
  EXPECT_TRUE(d().same_ints<std::int64_t>(source_of_row));
  EXPECT_TRUE(d().close(permuted, 0.0));  // copies
  auto gates = d().random({T, k}, DType::fp32, 162, 0.0f, 1.0f);
  auto output = d().poisoned({T, H}, dtype());
  cpu().moe_unpermute(cs(), {.expert_output = permuted.cpu,
                             .gates = gates.cpu,
                             .row_of_copy = row_of_copy.cpu,
                             .output = output.cpu});
  gpu().moe_unpermute(gs(), {.expert_output = permuted.gpu,
                             .gates = gates.gpu,
                             .row_of_copy = row_of_copy.gpu,
                             .output = output.gpu});
  EXPECT_TRUE(d().close(output, tol()));
  auto grad_permuted = d().random({T * k, H}, dtype(), 163);
  auto grad_input = d().poisoned({T, H}, dtype());
  cpu().moe_permute_backward(cs(), {.grad_permuted = grad_permuted.cpu,
                                    .row_of_copy = row_of_copy.cpu,
                                    .grad_input = grad_input.cpu});
  gpu().moe_permute_backward(gs(), {.grad_permuted = grad_permuted.gpu,
                                    .row_of_copy = row_of_copy.gpu,
                                    .grad_input = grad_input.gpu});
  EXPECT_TRUE(d().close(grad_input, tol()));
  auto grad_output = d().random({T, H}, dtype(), 164);
  auto grad_expert_output = d().poisoned({T * k, H}, dtype());
  auto grad_gates = d().poisoned({T, k}, DType::fp32);
  cpu().moe_unpermute_backward(cs(), {.grad_output = grad_output.cpu,
                                      .expert_output = permuted.cpu,
                                      .gates = gates.cpu,
                                      .source_of_row = source_of_row.cpu,
                                      .row_of_copy = row_of_copy.cpu,
                                      .grad_expert_output = grad_expert_output.cpu,
                                      .grad_gates = grad_gates.cpu});
  gpu().moe_unpermute_backward(gs(), {.grad_output = grad_output.gpu,
                                      .expert_output = permuted.gpu,
                                      .gates = gates.gpu,
                                      .source_of_row = source_of_row.gpu,
                                      .row_of_copy = row_of_copy.gpu,
                                      .grad_expert_output = grad_expert_output.gpu,
                                      .grad_gates = grad_gates.gpu});
  EXPECT_TRUE(d().close(grad_expert_output, tol()));
  EXPECT_TRUE(d().close(grad_gates, 1e-5));  // dot products in double of the same inputs
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps, ::testing::Values(DType::fp32, DType::bf16, DType::fp16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

class CudaBinding : public ::testing::Test {
 protected:
  void SetUp() override { TANDEM_REQUIRE_GPU(); }
};

TEST_F(CudaBinding, AdamMatchesCpuOverFiveSteps) {
  TwoDevices d;
  const std::int64_t n = 5003;
  auto p = d.random({n}, DType::fp32, 91);
  auto m = d.input({n}, DType::fp32, Floats(static_cast<std::size_t>(n), 0.0f));
  auto v = d.input({n}, DType::fp32, Floats(static_cast<std::size_t>(n), 0.0f));
  for (std::int64_t step = 1; step <= 5; ++step) {
    auto g = d.random({n}, DType::fp32, 100 + static_cast<std::uint64_t>(step));
    const auto args = [&](Tensor& pp, Tensor& gg, Tensor& mm, Tensor& vv) {
      return AdamArgs{pp, gg, mm, vv, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step};
    };
    d.cpu().adam(d.cpu().default_stream(), args(p.cpu, g.cpu, m.cpu, v.cpu));
    d.gpu().adam(d.gpu().default_stream(), args(p.gpu, g.gpu, m.gpu, v.gpu));
  }
  EXPECT_TRUE(d.close(p, 1e-5));
  EXPECT_TRUE(d.close(m, 1e-5));
  EXPECT_TRUE(d.close(v, 1e-5));
}

TEST_F(CudaBinding, MemoryAccountingMatchesTheCpuBinding) {
  CpuDevice cpu;
  CudaDevice gpu(0);
  for (Device* dev : {static_cast<Device*>(&cpu), static_cast<Device*>(&gpu)}) {
    Tensor a = dev->allocate({1000, 3}, DType::fp32);
    {
      Tensor b = dev->allocate({7}, DType::bf16);
      Tensor c = dev->allocate({5}, DType::int32);
    }
    Tensor d = dev->allocate({7}, DType::bf16);  // reuses a cached block on both
  }
  EXPECT_EQ(gpu.memory().live(), cpu.memory().live());
  EXPECT_EQ(gpu.memory().peak(), cpu.memory().peak());
  EXPECT_EQ(gpu.memory().peak(), Bytes(12000 + 14 + 20));
  EXPECT_EQ(gpu.memory().live(), Bytes(0));
}

TEST_F(CudaBinding, EventsOrderStreamsAndTraceTimeWaits) {
  CudaDevice gpu(0);
  auto side = gpu.create_stream("side");
  auto done = gpu.create_event();
  Tensor x = gpu.allocate({1 << 22}, DType::fp32);
  gpu.fill(gpu.default_stream(), x, 1.0f);
  for (int i = 0; i < 20; ++i) gpu.scale(gpu.default_stream(), x, 2.0f);
  gpu.default_stream().record(*done);
  side->wait(*done);  // the side stream's add runs after the scaling
  Tensor y = gpu.allocate({1 << 22}, DType::fp32);
  gpu.add(*side, x, x, y);
  const auto before = std::chrono::steady_clock::now();
  const auto t = gpu.trace_time(*side);
  EXPECT_GE(t, before);
  EXPECT_TRUE(done->query());
  std::vector<float> host(static_cast<std::size_t>(y.numel()));
  gpu.download(*side, y, host);
  EXPECT_EQ(host.front(), 2.0f * 1048576.0f);
  EXPECT_EQ(host.back(), 2.0f * 1048576.0f);
}

TEST_F(CudaBinding, RejectsForeignStreamsAndBadShapes) {
  CudaDevice gpu(0);
  CpuDevice cpu;
  Tensor x = gpu.allocate({4}, DType::fp32);
  EXPECT_THROW(gpu.fill(cpu.default_stream(), x, 0.0f), std::invalid_argument);
  Tensor a = gpu.allocate({2, 3}, DType::fp32), b = gpu.allocate({4, 5}, DType::fp32),
         c = gpu.allocate({2, 5}, DType::fp32);
  EXPECT_THROW(gpu.gemm(gpu.default_stream(), {.a = a, .b = b, .c = c}), std::invalid_argument);
  Tensor ids = gpu.allocate({4}, DType::int32);
  EXPECT_THROW(gpu.gelu(gpu.default_stream(), ids, ids), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::testing
