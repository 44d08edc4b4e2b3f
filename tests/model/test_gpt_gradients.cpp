// The whole GPT step's gradient, on the real cpu binding: a 2-layer model's analytic
// gradients (forward, backward through every layer, the tied embedding and the
// vocab-parallel loss) against central finite differences of its loss; and the three
// recomputation modes give the same gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/model/random_microbatch.hpp"

namespace tandem {
namespace {

constexpr GptDims kDims{.num_layers = 2,
                        .hidden = 16,
                        .heads = 2,
                        .ffn = 64,
                        .seq = 8,
                        .micro_batch = 2,
                        .padded_vocab = 128,
                        .max_positions = 8};

// Llama-style: grouped-query attention (2 groups of 2 heads), SwiGLU, RMSNorm, RoPE on 3/4
// of each head, untied output layer, no linear biases, fused attention.
constexpr GptDims kLlamaDims{.num_layers = 2,
                             .hidden = 16,
                             .heads = 4,
                             .ffn = 24,
                             .seq = 8,
                             .micro_batch = 2,
                             .padded_vocab = 128,
                             .max_positions = 8,
                             .options = {.num_query_groups = 2,
                                         .swiglu = true,
                                         .normalization = Normalization::rms_norm,
                                         .norm_epsilon = 1e-6f,
                                         .rope = true,
                                         .rotary_base = 100.0f,
                                         .rotary_percent = 0.75f,
                                         .add_bias_linear = false,
                                         .flash_attn = true,
                                         .untie_embeddings_and_output_weights = true}};

// A mixture of experts on the Llama frame: layer 1 only (layer 0 stays dense), 4 experts
// of width 12, top-2, a shared expert of width 8.
GptDims moe_dims(float aux_loss_coeff) {
  GptDims d = kLlamaDims;
  d.moe_layers = {false, true};
  d.moe = {
      .num_experts = 4, .top_k = 2, .ffn = 12, .shared_ffn = 8, .aux_loss_coeff = aux_loss_coeff};
  return d;
}

struct TinyGpt {
  CpuDevice device;
  SelfCommunicator tp{device, "tp"};
  SelfCommunicator ep{device, "ep"};
  ModelEnv env{device,  device.default_stream(), tp, false, DType::fp32,
               nullptr, CpCommType::p2p,         &ep};
  ParameterSet params{1, 0};
  GptChunk chunk;
  MicrobatchTensors mb;

  explicit TinyGpt(Recompute r, const GptDims& dims = kDims)
      : chunk(params, dims, ChunkPlan{0, 2, true, true}, r) {
    params.allocate(device);
    params.initialize(device, device.default_stream(), 7);
    mb = testing::random_microbatch(device, kDims);
  }

  double loss() {
    chunk.forward(env, 0, Tensor{}, mb);
    const Tensor& l = chunk.row_losses(0);
    double s = 0;
    for (std::int64_t i = 0; i < l.numel(); ++i) s += l.data<float>()[i];
    const double mean = s / static_cast<double>(l.numel());
    chunk.discard(0);  // `l` dies here
    return mean;
  }

  // Gradients of the mean loss.
  std::vector<float> gradients() {
    device.fill(device.default_stream(), params.grads(), 0.0f);
    chunk.forward(env, 0, Tensor{}, mb);
    chunk.backward(env, 0, Tensor{}, 1.0f);
    const float* g = params.grads().data<float>();
    return {g, g + params.numel()};
  }
};

void expect_finite_difference_gradients(TinyGpt& m) {
  const auto grads = m.gradients();
  std::mt19937 gen(11);
  int checked = 0;
  for (auto& p : m.params.all()) {
    // A few coordinates of every parameter, the largest-gradient one among them.
    std::uniform_int_distribution<std::int64_t> pick(0, p.value.numel() - 1);
    for (int k = 0; k < 3; ++k) {
      const std::int64_t i = pick(gen);
      float& w = p.value.data<float>()[i];
      const float saved = w, eps = 1e-2f;
      w = saved + eps;
      const double up = m.loss();
      w = saved - eps;
      const double down = m.loss();
      w = saved;
      const double numeric = (up - down) / (2.0 * eps);
      const double analytic = grads[static_cast<std::size_t>(p.grad_offset + i)];
      EXPECT_NEAR(analytic, numeric, 2e-3 + 3e-2 * std::abs(numeric))
          << p.spec.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

// The MoE layer's gradients (router through the gates, experts, shared expert) against
// central differences. Routing is piecewise constant: where a step moves a token to
// another expert the loss jumps, so a coordinate whose difference quotients at ε and ε/2
// disagree sits on such a kink and is skipped (at most a tenth of them).
void expect_moe_gradients(const GptDims& dims, const std::vector<float>& expert_bias = {}) {
  TinyGpt m(Recompute::none, dims);
  if (!expert_bias.empty()) m.chunk.moe_layers().at(0)->expert_bias() = expert_bias;
  // Experts 64 times louder than their init, so the gates (and the router behind them)
  // move the loss well above the finite differences' noise.
  for (auto& p : m.params.all())
    if (p.spec.expert)
      for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 8.0f;
  const auto grads = m.gradients();
  std::mt19937 gen(5);
  int checked = 0, kinks = 0, experts = 0, router = 0;
  for (auto& p : m.params.all()) {
    std::uniform_int_distribution<std::int64_t> pick(0, p.value.numel() - 1);
    // The router's gradients are small: more of them, against a tighter floor.
    const bool is_router = p.spec.name == "layers.1.mlp.router.weight";
    for (int k = 0; k < (is_router ? 12 : 3); ++k) {
      const std::int64_t i = pick(gen);
      float& w = p.value.data<float>()[i];
      const float saved = w;
      auto quotient = [&](float eps) {
        w = saved + eps;
        const double up = m.loss();
        w = saved - eps;
        const double down = m.loss();
        w = saved;
        return (up - down) / (2.0 * static_cast<double>(eps));
      };
      const double coarse = quotient(4e-3f), fine = quotient(2e-3f);
      const double tolerance = (is_router ? 1e-4 : 2e-3) + 3e-2 * std::abs(fine);
      if (std::abs(coarse - fine) > tolerance) {
        ++kinks;
        continue;
      }
      const double analytic = grads[static_cast<std::size_t>(p.grad_offset + i)];
      EXPECT_NEAR(analytic, fine, tolerance) << p.spec.name << "[" << i << "]";
      ++checked;
      experts += p.spec.expert;
      router += is_router;
    }
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(experts, 10);
  EXPECT_GE(router, 6);
  EXPECT_LE(kinks * 10, checked + kinks);
}

TEST(MoeGradients, MatchFiniteDifferences) {
  expect_moe_gradients(moe_dims(0.0f));
}

// DeepSeek-V3's router: sigmoid scores, group-limited (2 groups of 2, the top-2 from the
// best group... or both), a nonzero expert bias on the choice, a scaling factor on the
// gates (the aux loss is not in the finite differences: see the kernel test for its
// gradient through the normalised sigmoid scores).
TEST(MoeGradients, SigmoidGroupLimitedRouterMatchesFiniteDifferences) {
  GptDims d = moe_dims(0.0f);
  d.moe.score_function = MoeScoreFunction::sigmoid;
  d.moe.num_groups = 2;
  d.moe.group_topk = 1;
  d.moe.topk_scaling_factor = 2.5f;
  d.moe.expert_bias = true;
  expect_moe_gradients(d, {0.02f, -0.03f, 0.01f, 0.0f});
}

// Token dropping by gate at capacity 1.0 (the dropped copies' gates get no gradient).
TEST(MoeGradients, TokenDroppingMatchesFiniteDifferences) {
  GptDims d = moe_dims(0.0f);
  d.moe.capacity_factor = 1.0;
  expect_moe_gradients(d);
  d.moe.pad_to_capacity = true;
  expect_moe_gradients(d);
}

// Layer 1 holds the router (4 × 16), four experts by global index (fc1 gate + up rows,
// fc2) flagged as experts, and the shared expert; no dense fc1 / fc2.
TEST(MoeGradients, TheLayerHoldsItsExpertsByGlobalIndex) {
  TinyGpt m(Recompute::none, moe_dims(0.0f));
  int experts = 0;
  bool router = false, shared = false, dense_mlp = false;
  for (const auto& p : m.params.all()) {
    if (p.spec.name == "layers.1.mlp.router.weight") {
      router = true;
      EXPECT_EQ(p.local_shape, (Shape{4, 16}));
      EXPECT_FALSE(p.spec.expert);
    }
    if (p.spec.name.rfind("layers.1.mlp.experts.", 0) == 0) {
      ++experts;
      EXPECT_TRUE(p.spec.expert) << p.spec.name;
    }
    if (p.spec.name == "layers.1.mlp.experts.3.fc1.weight") {
      EXPECT_EQ(p.local_shape, (Shape{24, 16}));
    }
    if (p.spec.name == "layers.1.mlp.experts.3.fc2.weight") {
      EXPECT_EQ(p.local_shape, (Shape{16, 12}));
    }
    shared = shared || p.spec.name == "layers.1.mlp.shared_experts.fc1.weight";
    dense_mlp = dense_mlp || p.spec.name == "layers.1.mlp.fc1.weight";
  }
  EXPECT_TRUE(router);
  EXPECT_TRUE(shared);
  EXPECT_FALSE(dense_mlp);
  EXPECT_EQ(experts, 8);
  // The experts' weights sit after all the others, in buckets of their own.
  for (const auto& b : m.params.buckets())
    for (int i : b.params) EXPECT_EQ(m.params[i].spec.expert, b.expert) << m.params[i].spec.name;
}

// The load-balancing loss enters at the router's probabilities: what lies after the
// router (the experts, the shared expert, the final norm and the output layer) gets the
// same gradient with and without it, the router another one.
TEST(MoeGradients, TheAuxLossEntersAtTheRouter) {
  TinyGpt plain(Recompute::none, moe_dims(0.0f)), balanced(Recompute::none, moe_dims(0.5f));
  const auto g0 = plain.gradients(), g1 = balanced.gradients();
  ASSERT_EQ(g0.size(), g1.size());
  int downstream = 0;
  for (const auto& p : plain.params.all()) {
    double most = 0;
    for (std::int64_t i = 0; i < p.local_shape.numel(); ++i) {
      const auto at = static_cast<std::size_t>(p.grad_offset + i);
      most = std::max(most, static_cast<double>(std::abs(g0[at] - g1[at])));
    }
    const std::string& n = p.spec.name;
    if (n == "layers.1.mlp.router.weight") {
      EXPECT_GT(most, 1e-6) << n;
    } else if (p.spec.expert || n.find("shared_experts") != std::string::npos ||
               n.rfind("final_layernorm", 0) == 0 || n == "output_layer.weight") {
      EXPECT_EQ(most, 0.0) << n;
      ++downstream;
    }
  }
  EXPECT_EQ(downstream, 8 + 2 + 1 + 1);
}

TEST(MoeGradients, RecomputationGivesTheSameGradients) {
  TinyGpt none(Recompute::none, moe_dims(0.1f)), full(Recompute::full, moe_dims(0.1f));
  const auto g0 = none.gradients(), g2 = full.gradients();
  ASSERT_EQ(g0.size(), g2.size());
  for (std::size_t i = 0; i < g0.size(); ++i) ASSERT_EQ(g0[i], g2[i]) << i;
}

TEST(GptGradients, MatchFiniteDifferences) {
  TinyGpt m(Recompute::none);
  expect_finite_difference_gradients(m);
}

TEST(LlamaGradients, MatchFiniteDifferences) {
  TinyGpt m(Recompute::none, kLlamaDims);
  expect_finite_difference_gradients(m);
  // No biases, no position embedding, RMSNorm without β, an output layer of its own.
  for (const auto& p : m.params.all()) {
    EXPECT_EQ(p.spec.name.find("bias"), std::string::npos) << p.spec.name;
    EXPECT_EQ(p.spec.name.find("position"), std::string::npos) << p.spec.name;
  }
  // qkv rows: 2 groups · (2 queries + key + value) · head_dim 4; fc1: gate and up.
  bool saw_qkv = false, saw_output = false;
  for (const auto& p : m.params.all()) {
    if (p.spec.name == "layers.0.attention.qkv.weight") {
      saw_qkv = true;
      EXPECT_EQ(p.local_shape, (Shape{32, 16}));
    }
    if (p.spec.name == "layers.0.mlp.fc1.weight") {
      EXPECT_EQ(p.local_shape, (Shape{48, 16}));
    }
    saw_output = saw_output || p.spec.name == "output_layer.weight";
  }
  EXPECT_TRUE(saw_qkv);
  EXPECT_TRUE(saw_output);
}

TEST(LlamaGradients, RecomputationGivesTheSameGradients) {
  TinyGpt none(Recompute::none, kLlamaDims), selective(Recompute::selective, kLlamaDims),
      full(Recompute::full, kLlamaDims);
  const auto g0 = none.gradients(), g1 = selective.gradients(), g2 = full.gradients();
  ASSERT_EQ(g0.size(), g1.size());
  for (std::size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(g0[i], g1[i]) << i;
    ASSERT_EQ(g0[i], g2[i]) << i;
  }
}

// Qwen3-style attention on the Llama frame: heads of kv_channels 8 on hidden 16 with 4
// heads (twice hidden / heads) and QK RMSNorm before RoPE; and the unfused multi-head
// attention with LayerNorm (γ and β on each head) and heads of 4 on hidden 16 with 2 heads
// (half of hidden / heads).
GptDims qwen_dims() {
  GptDims d = kLlamaDims;
  d.options.kv_channels = 8;
  d.options.qk_layernorm = true;
  return d;
}

GptDims narrow_heads_dims() {
  GptDims d = kDims;
  d.options.kv_channels = 4;
  d.options.qk_layernorm = true;
  return d;
}

const Parameter& named(const TinyGpt& m, const std::string& name) {
  for (const auto& p : m.params.all())
    if (p.spec.name == name) return p;
  throw std::out_of_range(name);
}

TEST(QkLayerNormGradients, MatchFiniteDifferences) {
  for (const GptDims& dims : {qwen_dims(), narrow_heads_dims()}) {
    TinyGpt m(Recompute::none, dims);
    expect_finite_difference_gradients(m);
    const bool grouped = dims.options.flash_attn;
    const std::int64_t kv = dims.options.kv_channels, heads = dims.heads;
    // QKV: queries of every head and a key and a value per group, kv_channels each; the
    // projection takes heads · kv_channels back to the hidden size.
    const std::int64_t qkv_rows = grouped ? (heads + 2 * 2) * kv : 3 * heads * kv;
    EXPECT_EQ(named(m, "layers.0.attention.qkv.weight").local_shape, (Shape{qkv_rows, 16}));
    EXPECT_EQ(named(m, "layers.1.attention.dense.weight").local_shape, (Shape{16, heads * kv}));
    EXPECT_EQ(named(m, "layers.1.attention.q_layernorm.weight").local_shape, (Shape{kv}));
    EXPECT_EQ(named(m, "layers.1.attention.k_layernorm.weight").local_shape, (Shape{kv}));
    // No weight decay on them (Megatron's default, without --apply-wd-to-qk-layernorm);
    // LayerNorm's β beside γ.
    EXPECT_FALSE(named(m, "layers.0.attention.k_layernorm.weight").spec.weight_decay);
    const bool layer_norm = dims.options.normalization == Normalization::layer_norm;
    bool has_beta = false;
    for (const auto& p : m.params.all())
      has_beta = has_beta || p.spec.name == "layers.0.attention.q_layernorm.bias";
    EXPECT_EQ(has_beta, layer_norm);
    // The norms' weights do receive gradient.
    const auto grads = m.gradients();
    for (const char* n :
         {"layers.0.attention.q_layernorm.weight", "layers.1.attention.k_layernorm.weight"}) {
      const Parameter& p = named(m, n);
      double sum = 0;
      for (std::int64_t i = 0; i < p.local_shape.numel(); ++i)
        sum += std::abs(grads[static_cast<std::size_t>(p.grad_offset + i)]);
      EXPECT_GT(sum, 1e-4) << n;
    }
  }
}

// The norms run: the loss differs from the same model's without them.
TEST(QkLayerNormGradients, TheNormsChangeTheLoss) {
  GptDims without = qwen_dims();
  without.options.qk_layernorm = false;
  TinyGpt a(Recompute::none, qwen_dims()), b(Recompute::none, without);
  EXPECT_NE(a.loss(), b.loss());
  EXPECT_NEAR(a.loss(), std::log(128.0), 0.2);
}

TEST(QkLayerNormGradients, RecomputationGivesTheSameGradients) {
  for (const GptDims& dims : {qwen_dims(), narrow_heads_dims()}) {
    TinyGpt none(Recompute::none, dims), selective(Recompute::selective, dims),
        full(Recompute::full, dims);
    const auto g0 = none.gradients(), g1 = selective.gradients(), g2 = full.gradients();
    ASSERT_EQ(g0.size(), g1.size());
    for (std::size_t i = 0; i < g0.size(); ++i) {
      ASSERT_EQ(g0[i], g1[i]) << i;
      ASSERT_EQ(g0[i], g2[i]) << i;
    }
  }
}

TEST(LlamaGradients, LossStartsNearUniform) {
  TinyGpt m(Recompute::none, kLlamaDims);
  EXPECT_NEAR(m.loss(), std::log(128.0), 0.2);
}

TEST(GptGradients, LossStartsNearUniform) {
  TinyGpt m(Recompute::none);
  // Small init: the logits are nearly flat, so the loss is close to ln(vocab).
  EXPECT_NEAR(m.loss(), std::log(128.0), 0.2);
}

TEST(GptGradients, RecomputationGivesTheSameGradients) {
  TinyGpt none(Recompute::none), selective(Recompute::selective), full(Recompute::full);
  const auto g0 = none.gradients(), g1 = selective.gradients(), g2 = full.gradients();
  ASSERT_EQ(g0.size(), g1.size());
  for (std::size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(g0[i], g1[i]) << i;
    ASSERT_EQ(g0[i], g2[i]) << i;
  }
}

// Attention dropout: the mask follows (seed, microbatch, layer), so central differences
// see the same mask as backward, and recomputation redraws the forward's.
TinyGpt& with_dropout(TinyGpt& m) {
  m.env.attention_dropout = 0.3f;
  m.env.dropout_seed = 17;
  m.env.dropout_microbatch = 2;
  return m;
}

TEST(GptGradients, WithAttentionDropoutMatchFiniteDifferences) {
  TinyGpt m(Recompute::none);
  const double plain = m.loss();
  with_dropout(m);
  EXPECT_NE(m.loss(), plain);  // the dropout did something
  expect_finite_difference_gradients(m);
}

// Hidden dropout (after the embedding and on each layer's attention and MLP output), alone
// and with attention dropout: central differences see the backward's masks, recomputation
// redraws the forward's, and another microbatch draws others.
TEST(GptGradients, WithHiddenDropoutMatchFiniteDifferencesAndRecomputation) {
  TinyGpt m(Recompute::none);
  const double plain = m.loss();
  m.env.hidden_dropout = 0.2f;
  m.env.dropout_seed = 17;
  m.env.dropout_microbatch = 2;
  EXPECT_NE(m.loss(), plain);
  expect_finite_difference_gradients(m);
  TinyGpt none(Recompute::none), selective(Recompute::selective), full(Recompute::full);
  for (TinyGpt* t : {&none, &selective, &full}) {
    with_dropout(*t);
    t->env.hidden_dropout = 0.2f;
  }
  const auto g0 = none.gradients(), g1 = selective.gradients(), g2 = full.gradients();
  ASSERT_EQ(g0.size(), g1.size());
  for (std::size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(g0[i], g1[i]) << i;
    ASSERT_EQ(g0[i], g2[i]) << i;
  }
  none.env.dropout_microbatch = 3;
  EXPECT_NE(none.gradients(), g0);
}

TEST(GptGradients, WithAttentionDropoutRecomputationGivesTheSameGradients) {
  TinyGpt none(Recompute::none), selective(Recompute::selective), full(Recompute::full);
  const auto g0 = with_dropout(none).gradients(), g1 = with_dropout(selective).gradients(),
             g2 = with_dropout(full).gradients();
  ASSERT_EQ(g0.size(), g1.size());
  for (std::size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(g0[i], g1[i]) << i;
    ASSERT_EQ(g0[i], g2[i]) << i;
  }
  // Another microbatch draws another mask.
  TinyGpt other(Recompute::none);
  with_dropout(other).env.dropout_microbatch = 3;
  EXPECT_NE(other.gradients(), g0);
}

// Gradients summed over two microbatches (the same tokens, so the sum is twice one
// microbatch's): the fused GEMM accumulates; without gradient_accumulation_fusion the first
// backward writes the buffer and the second adds a fresh gradient to it.
std::vector<float> two_microbatch_gradients(TinyGpt& m, bool fusion) {
  m.env.gradient_accumulation_fusion = fusion;
  m.device.fill(m.device.default_stream(), m.params.grads(), 0.0f);
  for (int microbatch = 0; microbatch < 2; ++microbatch) {
    m.env.first_backward = microbatch == 0;
    m.chunk.forward(m.env, microbatch, Tensor{}, m.mb);
    m.chunk.backward(m.env, microbatch, Tensor{}, 1.0f);
  }
  const float* g = m.params.grads().data<float>();
  return {g, g + m.params.numel()};
}

TEST(GptGradients, UnfusedAccumulationSumsTheMicrobatchesAsTheFusedGemmDoes) {
  for (const GptDims& dims : {kDims, moe_dims(0.0f)}) {
    TinyGpt m(Recompute::none, dims);
    const auto one = m.gradients();
    const auto fused = two_microbatch_gradients(m, true);
    const auto unfused = two_microbatch_gradients(m, false);
    ASSERT_EQ(fused.size(), one.size());
    ASSERT_EQ(unfused.size(), one.size());
    int nonzero = 0;
    for (std::size_t i = 0; i < one.size(); ++i) {
      const float tol = 1e-6f + 1e-5f * std::abs(one[i]);
      ASSERT_NEAR(fused[i], 2.0f * one[i], tol) << i;
      ASSERT_NEAR(unfused[i], 2.0f * one[i], tol) << i;
      nonzero += one[i] != 0.0f;
    }
    EXPECT_GT(nonzero, static_cast<int>(one.size() / 2));
  }
}

// Megatron's bias fusions (bias-GeLU, bias-add into the residual) compute what the unfused
// kernels compute, rounded alike: the same loss and gradients to the bit, with biases away
// from their zero init so that a bias added twice or not at all would show. The fused path
// is the default, which MatchFiniteDifferences checks against central differences.
TEST(GptGradients, BiasFusionsGiveTheUnfusedLossAndGradients) {
  auto run = [](bool gelu_fusion, bool dropout_fusion, float hidden_dropout = 0) {
    TinyGpt m(Recompute::full);
    m.env.hidden_dropout = hidden_dropout;
    m.env.dropout_seed = 23;
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    int biases = 0;
    for (auto& p : m.params.all()) {
      if (p.spec.name.find("bias") == std::string::npos) continue;
      for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = u(gen);
      ++biases;
    }
    EXPECT_GE(biases, 8);  // qkv, projection, fc1, fc2 (and the norms') in each layer
    m.env.bias_gelu_fusion = gelu_fusion;
    m.env.bias_dropout_fusion = dropout_fusion;
    std::vector<float> out = m.gradients();
    out.push_back(static_cast<float>(m.loss()));
    return out;
  };
  const auto fused = run(true, true);
  EXPECT_EQ(fused, run(false, false));
  EXPECT_EQ(fused, run(true, false));
  EXPECT_EQ(fused, run(false, true));
  // With hidden dropout: bias_dropout_add against bias_add, dropout and add.
  const auto fused_dropout = run(true, true, 0.2f);
  EXPECT_NE(fused_dropout, fused);
  EXPECT_EQ(fused_dropout, run(false, false, 0.2f));
  // The biases matter: the same model with them at zero gives another loss.
  TinyGpt zero(Recompute::full);
  EXPECT_NE(static_cast<float>(zero.loss()), fused.back());
}

TEST(GptGradients, ActivationsAreFreedAfterBackward) {
  TinyGpt m(Recompute::none);
  m.device.fill(m.device.default_stream(), m.params.grads(), 0.0f);
  const Bytes before = m.device.memory().live();
  m.chunk.forward(m.env, 0, Tensor{}, m.mb);
  const Bytes during = m.device.memory().live();
  m.chunk.backward(m.env, 0, Tensor{}, 1.0f);
  EXPECT_GT(during, before);
  EXPECT_EQ(m.device.memory().live(), before);
}

TEST(GptGradients, FullRecomputationKeepsLessInFlight) {
  TinyGpt none(Recompute::none), full(Recompute::full);
  const Bytes b0 = none.device.memory().live(), b1 = full.device.memory().live();
  none.chunk.forward(none.env, 0, Tensor{}, none.mb);
  full.chunk.forward(full.env, 0, Tensor{}, full.mb);
  EXPECT_LT(full.device.memory().live() - b1, none.device.memory().live() - b0);
}

}  // namespace
}  // namespace tandem
