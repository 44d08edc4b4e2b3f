// Multi-token prediction (model/multi_token_prediction.hpp) on the real cpu binding: the
// training objective of a chunk with two MTP depths — the main loss plus
// mtp_loss_scaling_factor / D × each depth's mean over its unmasked tokens — against a
// forward written here in double from Megatron's definitions (the rolls, [enorm(e) |
// hnorm(h)], eh_proj, the layer, the depth's final norm, the shared output layer, the
// masked tail); its gradients against central finite differences of that objective; the
// recomputation modes, the split backward and unfused gradient accumulation giving the
// same gradients; and the parameters Megatron's checkpoints name.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "model/gpt_chunk.hpp"

namespace tandem {
namespace {

constexpr int kDepths = 2;
constexpr float kFactor = 0.6f;  // mtp_loss_scaling_factor, large so the depths weigh in

// GPT-style layers (LayerNorm, biases, GeLU, unfused multi-head attention, tied output
// layer) without position embeddings (Megatron's position_embedding_type none).
GptDims gpt_dims() {
  GptDims d{.num_layers = 2,
            .hidden = 16,
            .heads = 2,
            .ffn = 32,
            .seq = 6,
            .micro_batch = 2,
            .padded_vocab = 64,
            .max_positions = 6};
  d.options.learned_position_embedding = false;
  d.mtp_num_layers = kDepths;
  d.mtp_loss_scaling_factor = kFactor;
  return d;
}

// Llama-style: RMSNorm, RoPE, SwiGLU, grouped-query fused attention, untied output layer.
GptDims llama_dims() {
  GptDims d{.num_layers = 2,
            .hidden = 16,
            .heads = 4,
            .ffn = 24,
            .seq = 6,
            .micro_batch = 2,
            .padded_vocab = 64,
            .max_positions = 6,
            .options = {.num_query_groups = 2,
                        .swiglu = true,
                        .normalization = Normalization::rms_norm,
                        .norm_epsilon = 1e-6f,
                        .rope = true,
                        .rotary_base = 100.0f,
                        .add_bias_linear = false,
                        .flash_attn = true,
                        .untie_embeddings_and_output_weights = true,
                        .learned_position_embedding = false}};
  d.mtp_num_layers = kDepths;
  d.mtp_loss_scaling_factor = kFactor;
  return d;
}

struct TinyMtp {
  CpuDevice device;
  SelfCommunicator tp{device, "tp"};
  SelfCommunicator ep{device, "ep"};
  ModelEnv env{device,  device.default_stream(), tp, false, DType::fp32,
               nullptr, CpCommType::p2p,         &ep};
  GptDims dims;
  ParameterSet params{1, 0};
  GptChunk chunk;
  std::vector<int> tokens, labels;  // (T·B), row t·B + b
  MicrobatchTensors mb;

  TinyMtp(Recompute r, const GptDims& d)
      : dims(d), chunk(params, d, ChunkPlan{0, d.num_layers, true, true, d.mtp_num_layers}, r) {
    params.allocate(device);
    params.initialize(device, device.default_stream(), 7);
    // Louder than Megatron's init so that every part moves the loss well above the noise.
    for (auto& p : params.all())
      if (p.spec.init_std > 0)
        for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 10.0f;
    const std::int64_t seq_len = d.seq, batch = d.micro_batch, rows = seq_len * batch;
    std::mt19937 gen(3);
    std::uniform_int_distribution<int> tok(1, d.padded_vocab - 1);
    for (std::int64_t i = 0; i < rows; ++i) {
      tokens.push_back(tok(gen));
      labels.push_back(tok(gen));
    }
    auto upload = [&](const std::vector<int>& v) {
      Tensor t = device.allocate(Shape{rows}, DType::int32);
      for (std::int64_t i = 0; i < rows; ++i) t.data<std::int32_t>()[i] = v[i];
      return t;
    };
    mb.tokens = upload(tokens);
    mb.labels = upload(labels);
    std::vector<int> pos;
    for (std::int64_t i = 0; i < rows; ++i) pos.push_back(static_cast<int>(i / batch));
    mb.positions = upload(pos);
    for (int k = 1; k <= d.mtp_num_layers; ++k) {
      mb.mtp_tokens.push_back(upload(rolled(tokens, k)));
      mb.mtp_labels.push_back(upload(rolled(labels, k)));
    }
  }

  // Megatron's roll_tensor k times: row t·B + b takes row (t + k)·B + b, the last k·B rows 0.
  std::vector<int> rolled(const std::vector<int>& v, int k) const {
    const std::int64_t seq_len = dims.seq, batch = dims.micro_batch;
    std::vector<int> out(v.size(), 0);
    for (std::int64_t t = 0; t + k < seq_len; ++t)
      for (std::int64_t b = 0; b < batch; ++b) out[t * batch + b] = v[(t + k) * batch + b];
    return out;
  }

  // The objective the backward differentiates: the main mean loss plus factor / D × each
  // depth's mean over its (T − k)·B unmasked rows.
  double objective() {
    chunk.forward(env, 0, Tensor{}, mb);
    auto mean = [](const Tensor& l, std::int64_t n) {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) s += l.data<float>()[i];
      return s / static_cast<double>(n);
    };
    const std::int64_t rows = std::int64_t{dims.seq} * dims.micro_batch;
    double total = mean(chunk.row_losses(0), rows);
    for (int k = 1; k <= dims.mtp_num_layers; ++k)
      total += static_cast<double>(dims.mtp_loss_scaling_factor) / dims.mtp_num_layers *
               mean(chunk.mtp_row_losses(0, k - 1), rows - k * dims.micro_batch);
    chunk.discard(0);
    return total;
  }

  std::vector<float> gradients() {
    device.fill(device.default_stream(), params.grads(), 0.0f);
    chunk.forward(env, 0, Tensor{}, mb);
    chunk.backward(env, 0, Tensor{}, 1.0f);
    const float* g = params.grads().data<float>();
    return {g, g + params.numel()};
  }

  const Parameter& named(const std::string& name) const {
    for (const auto& p : params.all())
      if (p.spec.name == name) return p;
    throw std::out_of_range(name);
  }
  std::vector<double> values(const std::string& name) const {
    const Parameter& p = named(name);
    return {p.value.data<float>(), p.value.data<float>() + p.value.numel()};
  }
};

// ------------------------------------------------------------------------------------
// The reference: the GPT-style model's objective in double, from Megatron's definitions.

using Matrix = std::vector<std::vector<double>>;  // rows of (T·B), each a vector

Matrix layer_norm(const Matrix& x, const std::vector<double>& w, const std::vector<double>& b) {
  Matrix out = x;
  for (auto& row : out) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= static_cast<double>(row.size());
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (std::size_t c = 0; c < row.size(); ++c) row[c] = (row[c] - mean) * rstd * w[c] + b[c];
  }
  return out;
}

// y = x · Wᵀ + b, W (out, in) row-major.
Matrix linear(const Matrix& x, const std::vector<double>& w, const std::vector<double>* b,
              std::size_t out) {
  Matrix y(x.size(), std::vector<double>(out, 0.0));
  for (std::size_t r = 0; r < x.size(); ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (std::size_t i = 0; i < x[r].size(); ++i) s += x[r][i] * w[o * x[r].size() + i];
      y[r][o] = s;
    }
  return y;
}

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

Matrix add(Matrix a, const Matrix& b) {
  for (std::size_t r = 0; r < a.size(); ++r)
    for (std::size_t c = 0; c < a[r].size(); ++c) a[r][c] += b[r][c];
  return a;
}

// One pre-LN layer: causal multi-head attention on the [q | k | v] projection, GeLU MLP.
Matrix reference_layer(const TinyMtp& m, const std::string& p, const Matrix& x) {
  const std::size_t width = static_cast<std::size_t>(m.dims.hidden),
                    heads = static_cast<std::size_t>(m.dims.heads);
  const std::size_t hd = width / heads, ffn_width = static_cast<std::size_t>(m.dims.ffn);
  const std::size_t seq_len = static_cast<std::size_t>(m.dims.seq),
                    batch = static_cast<std::size_t>(m.dims.micro_batch);
  auto v = [&](const std::string& n) { return m.values(p + n); };
  const auto qkv_b = v("attention.qkv.bias");
  const Matrix qkv = linear(layer_norm(x, v("input_layernorm.weight"), v("input_layernorm.bias")),
                            v("attention.qkv.weight"), &qkv_b, 3 * width);
  Matrix attn(x.size(), std::vector<double>(width, 0.0));
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < seq_len; ++i) {
        std::vector<double> s(i + 1);
        double most = -1e300;
        for (std::size_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < hd; ++d)
            dot += qkv[i * batch + b][h * hd + d] * qkv[j * batch + b][width + h * hd + d];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          most = std::max(most, s[j]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - most));
        for (std::size_t d = 0; d < hd; ++d) {
          double o = 0;
          for (std::size_t j = 0; j <= i; ++j)
            o += s[j] / sum * qkv[j * batch + b][2 * width + h * hd + d];
          attn[i * batch + b][h * hd + d] = o;
        }
      }
  const auto proj_b = v("attention.dense.bias");
  const Matrix residual = add(x, linear(attn, v("attention.dense.weight"), &proj_b, width));
  const auto fc1_b = v("mlp.fc1.bias");
  Matrix h = linear(layer_norm(residual, v("post_attention_layernorm.weight"),
                               v("post_attention_layernorm.bias")),
                    v("mlp.fc1.weight"), &fc1_b, ffn_width);
  for (auto& row : h)
    for (auto& e : row) e = gelu(e);
  const auto fc2_b = v("mlp.fc2.bias");
  return add(residual, linear(h, v("mlp.fc2.weight"), &fc2_b, width));
}

Matrix embed(const TinyMtp& m, const std::vector<int>& tokens) {
  const auto word = m.values("embedding.word_embeddings.weight");
  const std::size_t width = static_cast<std::size_t>(m.dims.hidden);
  Matrix e;
  for (int t : tokens)
    e.emplace_back(word.begin() + static_cast<std::ptrdiff_t>(t * width),
                   word.begin() + static_cast<std::ptrdiff_t>((t + 1) * width));
  return e;
}

// The mean cross entropy of the tied output layer on h over its first `rows` rows.
double mean_loss(const TinyMtp& m, const Matrix& h, const std::vector<int>& labels,
                 std::size_t rows) {
  const Matrix logits = linear(h, m.values("embedding.word_embeddings.weight"), nullptr,
                               static_cast<std::size_t>(m.dims.padded_vocab));
  double sum = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    double most = -1e300, z = 0;
    for (double l : logits[r]) most = std::max(most, l);
    for (double l : logits[r]) z += std::exp(l - most);
    sum += most + std::log(z) - logits[r][static_cast<std::size_t>(labels[r])];
  }
  return sum / static_cast<double>(rows);
}

double reference_objective(const TinyMtp& m) {
  const std::size_t width = static_cast<std::size_t>(m.dims.hidden),
                    batch = static_cast<std::size_t>(m.dims.micro_batch);
  const std::size_t rows = m.tokens.size();
  Matrix h = embed(m, m.tokens);
  for (int l = 0; l < m.dims.num_layers; ++l)
    h = reference_layer(m, "layers." + std::to_string(l) + ".", h);
  h = layer_norm(h, m.values("final_layernorm.weight"), m.values("final_layernorm.bias"));
  double total = mean_loss(m, h, m.labels, rows);
  for (int k = 1; k <= kDepths; ++k) {
    const std::string p = "mtp.layers." + std::to_string(k - 1) + ".";
    auto v = [&](const std::string& n) { return m.values(p + n); };
    const Matrix e =
        layer_norm(embed(m, m.rolled(m.tokens, k)), v("enorm.weight"), v("enorm.bias"));
    const Matrix hn = layer_norm(h, v("hnorm.weight"), v("hnorm.bias"));
    Matrix cat(rows);
    for (std::size_t r = 0; r < rows; ++r) {  // the embedding first
      cat[r] = e[r];
      cat[r].insert(cat[r].end(), hn[r].begin(), hn[r].end());
    }
    h = reference_layer(m, p + "transformer_layer.",
                        linear(cat, v("eh_proj.weight"), nullptr, width));
    h = layer_norm(h, v("final_layernorm.weight"), v("final_layernorm.bias"));
    total += kFactor / kDepths * mean_loss(m, h, m.rolled(m.labels, k), rows - k * batch);
  }
  return total;
}

TEST(MultiTokenPrediction, ObjectiveMatchesAHandBuiltForward) {
  TinyMtp m(Recompute::none, gpt_dims());
  const double got = m.objective(), want = reference_objective(m);
  EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << got << " vs " << want;
  // Not a coincidence of the main loss: the depths add something well above the tolerance.
  TinyMtp main_only(Recompute::none, gpt_dims());
  main_only.chunk.forward(main_only.env, 0, Tensor{}, main_only.mb);
  double main = 0;
  for (std::int64_t i = 0; i < 12; ++i) main += main_only.chunk.row_losses(0).data<float>()[i];
  EXPECT_GT(std::abs(want - main / 12.0), 0.1);
}

// ------------------------------------------------------------------------------------

void expect_finite_difference_gradients(TinyMtp& m) {
  const auto grads = m.gradients();
  std::mt19937 gen(11);
  int checked = 0, mtp = 0;
  for (auto& p : m.params.all()) {
    std::uniform_int_distribution<std::int64_t> pick(0, p.value.numel() - 1);
    for (int k = 0; k < 3; ++k) {
      const std::int64_t i = pick(gen);
      float& w = p.value.data<float>()[i];
      const float saved = w, eps = 1e-2f;
      w = saved + eps;
      const double up = m.objective();
      w = saved - eps;
      const double down = m.objective();
      w = saved;
      const double numeric = (up - down) / (2.0 * eps);
      const double analytic = grads[static_cast<std::size_t>(p.grad_offset + i)];
      EXPECT_NEAR(analytic, numeric, 2e-3 + 3e-2 * std::abs(numeric))
          << p.spec.name << "[" << i << "]";
      ++checked;
      mtp += p.spec.name.rfind("mtp.", 0) == 0;
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_GT(mtp, 30);
}

TEST(MultiTokenPrediction, GradientsMatchFiniteDifferences) {
  TinyMtp m(Recompute::none, gpt_dims());
  expect_finite_difference_gradients(m);
}

TEST(MultiTokenPrediction, LlamaGradientsMatchFiniteDifferences) {
  TinyMtp m(Recompute::none, llama_dims());
  expect_finite_difference_gradients(m);
}

// The shared word embedding takes gradient from the depths' embeddings: with the main
// path's gradient alone (factor 0) it differs.
TEST(MultiTokenPrediction, TheDepthsReachTheSharedEmbedding) {
  GptDims zero = llama_dims();
  zero.mtp_loss_scaling_factor = 0.0f;
  TinyMtp a(Recompute::none, llama_dims()), b(Recompute::none, zero);
  const auto ga = a.gradients(), gb = b.gradients();
  for (const char* name :
       {"embedding.word_embeddings.weight", "output_layer.weight", "layers.1.mlp.fc2.weight"}) {
    const Parameter& p = a.named(name);
    double diff = 0;
    for (std::int64_t i = 0; i < p.local_shape.numel(); ++i) {
      const auto at = static_cast<std::size_t>(p.grad_offset + i);
      diff = std::max(diff, static_cast<double>(std::abs(ga[at] - gb[at])));
    }
    EXPECT_GT(diff, 1e-5) << name;
  }
  // With factor 0 the depths' own parameters get no gradient.
  const Parameter& eh = b.named("mtp.layers.1.eh_proj.weight");
  for (std::int64_t i = 0; i < eh.local_shape.numel(); ++i)
    ASSERT_EQ(gb[static_cast<std::size_t>(eh.grad_offset + i)], 0.0f);
}

TEST(MultiTokenPrediction, RecomputationGivesTheSameGradients) {
  for (const GptDims& d : {gpt_dims(), llama_dims()}) {
    TinyMtp none(Recompute::none, d), selective(Recompute::selective, d), full(Recompute::full, d);
    const auto g0 = none.gradients(), g1 = selective.gradients(), g2 = full.gradients();
    ASSERT_EQ(g0.size(), g2.size());
    for (std::size_t i = 0; i < g0.size(); ++i) {
      ASSERT_EQ(g0[i], g1[i]) << i;
      ASSERT_EQ(g0[i], g2[i]) << i;
    }
  }
}

// ZB-H1's B then W, and gradients added by a separate kernel (no gradient-accumulation
// fusion: the shared output layer, which every depth's head multiplies again, must add to
// what the main head's GEMM wrote).
TEST(MultiTokenPrediction, SplitAndUnfusedBackwardsGiveTheSameGradients) {
  TinyMtp whole(Recompute::none, llama_dims());
  const auto g0 = whole.gradients();
  for (bool split : {false, true}) {
    TinyMtp m(Recompute::none, llama_dims());
    m.env.gradient_accumulation_fusion = split;
    m.device.fill(m.device.default_stream(), m.params.grads(), 0.0f);
    m.chunk.forward(m.env, 0, Tensor{}, m.mb);
    if (split) {
      m.chunk.backward_input(m.env, 0, Tensor{}, 1.0f);
      m.chunk.backward_weights(m.env, 0);
    } else {
      m.chunk.backward(m.env, 0, Tensor{}, 1.0f);
    }
    const float* g = m.params.grads().data<float>();
    for (std::size_t i = 0; i < g0.size(); ++i)
      ASSERT_NEAR(g[i], g0[i], 1e-6 + 1e-5 * std::abs(g0[i]))
          << i << (split ? " split" : " unfused");
  }
}

// Megatron's checkpoint names and shapes; the depth's layer is the decoder's last layer's
// kind (an MoE layer when that one is).
TEST(MultiTokenPrediction, ParametersAsMegatronNamesThem) {
  TinyMtp m(Recompute::none, llama_dims());
  EXPECT_EQ(m.named("mtp.layers.0.eh_proj.weight").local_shape, (Shape{16, 32}));
  EXPECT_EQ(m.named("mtp.layers.1.enorm.weight").local_shape, (Shape{16}));
  EXPECT_EQ(m.named("mtp.layers.1.hnorm.weight").local_shape, (Shape{16}));
  EXPECT_EQ(m.named("mtp.layers.1.final_layernorm.weight").local_shape, (Shape{16}));
  EXPECT_EQ(m.named("mtp.layers.1.transformer_layer.mlp.fc1.weight").local_shape, (Shape{48, 16}));
  EXPECT_FALSE(m.named("mtp.layers.0.eh_proj.weight").spec.shared_copy);
  GptDims moe = llama_dims();
  moe.moe_layers = {false, true};
  moe.moe = {.num_experts = 4, .top_k = 2, .ffn = 12};
  TinyMtp e(Recompute::none, moe);
  EXPECT_EQ(e.named("mtp.layers.1.transformer_layer.mlp.router.weight").local_shape,
            (Shape{4, 16}));
  EXPECT_TRUE(e.named("mtp.layers.0.transformer_layer.mlp.experts.3.fc2.weight").spec.expert);
  EXPECT_EQ(e.chunk.moe_layers().size(), 3u);  // layer 1 and both depths
  GptDims dense_last = moe;
  dense_last.moe_layers = {true, false};
  TinyMtp f(Recompute::none, dense_last);
  EXPECT_EQ(f.chunk.moe_layers().size(), 1u);
}

// Megatron's rolled loss mask under context parallelism, by hand: a sequence of 16 on cp 2
// (chunks of 4: rank 0 holds 0–3 and 12–15, rank 1 4–7 and 8–11), micro batch 2. Depth k
// masks the positions 16 − k … 15: rank 0's last k local positions while k ≤ 4, then
// rank 1's too; without cp the last k·B rows.
struct CpRank : SelfCommunicator {
  CpRank(Device& d, int r) : SelfCommunicator(d, "cp"), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return 2; }
  int r_;
};

TEST(MultiTokenPrediction, MaskedRowsUnderContextParallelism) {
  CpuDevice device;
  SelfCommunicator tp{device, "tp"};
  CpRank rank0{device, 0}, rank1{device, 1};
  ModelEnv env{device, device.default_stream(), tp};
  EXPECT_EQ(mtp_masked_rows(env, 16, 2, 3), 6);
  env.cp = &rank0;
  EXPECT_EQ(mtp_masked_rows(env, 8, 2, 1), 2);
  EXPECT_EQ(mtp_masked_rows(env, 8, 2, 3), 6);
  EXPECT_EQ(mtp_masked_rows(env, 8, 2, 5), 8);
  env.cp = &rank1;
  EXPECT_EQ(mtp_masked_rows(env, 8, 2, 1), 0);
  EXPECT_EQ(mtp_masked_rows(env, 8, 2, 5), 2);
}

}  // namespace
}  // namespace tandem
