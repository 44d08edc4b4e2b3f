// Multi-latent attention (model/mla_attention.hpp) on the real cpu binding: its forward
// against Megatron-Core's MLASelfAttention written out in double from the same parameters
// (down projections, latent RMSNorms, up projections, the per-head split, RoPE the way
// Megatron applies it — de-interleave, rotate the halves — and causal softmax attention
// scaled by 1/sqrt(qk + pe)), with and without the query latent; the whole model's
// gradients against central differences; recomputation giving the same gradients bit for
// bit; and every activation freed after backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/model/random_microbatch.hpp"

namespace tandem {
namespace {

using Doubles = std::vector<double>;

constexpr int kHidden = 16, kHeads = 2, kSeq = 5, kBatch = 2;

MlaOptions mla_options(int q_lora_rank, int rotary_dim) {
  return {.enabled = true,
          .q_lora_rank = q_lora_rank,
          .kv_lora_rank = 10,
          .qk_head_dim = 6,
          .qk_pos_emb_head_dim = 4,
          .v_head_dim = 5,
          .rotary_dim = rotary_dim};
}

// The rows × cols values of parameter `name` (fp32 under fp32 compute), in double.
Doubles values(const ParameterSet& params, const std::string& name) {
  for (const auto& p : params.all())
    if (p.spec.name == name) {
      const float* v = p.value.data<float>();
      return Doubles(v, v + p.value.numel());
    }
  throw std::out_of_range(name);
}

// y (rows, out) = x (rows, in) · w (out, in)ᵀ
Doubles linear(const Doubles& x, const Doubles& w, std::size_t rows, std::size_t in,
               std::size_t out) {
  Doubles y(rows * out, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
  return y;
}

Doubles rms_norm(const Doubles& x, const Doubles& gamma, std::size_t rows, std::size_t width,
                 double eps) {
  Doubles y(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t c = 0; c < width; ++c) ss += x[r * width + c] * x[r * width + c];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(width) + eps);
    for (std::size_t c = 0; c < width; ++c) y[r * width + c] = x[r * width + c] * rstd * gamma[c];
  }
  return y;
}

// Megatron's _apply_rotary_pos_emb_bshd with mla_rotary_interleaved on one head's
// positional features: the first `rotated` de-interleaved into halves and rotated by
// θ_i = position · base^(−2i/rotated), the rest passed.
Doubles megatron_rope(const Doubles& x, std::size_t rotated, std::int64_t position, double base) {
  Doubles t = x;
  const std::size_t half = rotated / 2;
  for (std::size_t i = 0; i < half; ++i) {
    t[i] = x[2 * i];
    t[i + half] = x[2 * i + 1];
  }
  Doubles y = t;
  for (std::size_t i = 0; i < half; ++i) {
    const double theta =
        static_cast<double>(position) *
        std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rotated));
    y[i] = t[i] * std::cos(theta) - t[i + half] * std::sin(theta);
    y[i + half] = t[i + half] * std::cos(theta) + t[i] * std::sin(theta);
  }
  return y;
}

// MLASelfAttention's forward in double: (T·B, heads·v), rows t·B + b.
Doubles reference_mla(const ParameterSet& params, const MlaOptions& o, bool qk_layernorm,
                      const Doubles& x, double base, double eps) {
  const std::size_t rows = kSeq * kBatch, C = kHidden, H = kHeads;
  const std::size_t qk = o.qk_head_dim, pe = o.qk_pos_emb_head_dim, v = o.v_head_dim;
  const std::size_t dq = qk + pe, r = o.kv_lora_rank;
  const std::string p = "layers.0.attention.";
  Doubles q;
  if (o.q_lora_rank > 0) {
    const auto ql = static_cast<std::size_t>(o.q_lora_rank);
    Doubles latent = linear(x, values(params, p + "linear_q_down_proj.weight"), rows, C, ql);
    if (qk_layernorm)
      latent = rms_norm(latent, values(params, p + "q_layernorm.weight"), rows, ql, eps);
    q = linear(latent, values(params, p + "linear_q_up_proj.weight"), rows, ql, H * dq);
  } else {
    q = linear(x, values(params, p + "linear_q_proj.weight"), rows, C, H * dq);
  }
  const Doubles combined =
      linear(x, values(params, p + "linear_kv_down_proj.weight"), rows, C, r + pe);
  Doubles latent(rows * r), k_pe(rows * pe);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t c = 0; c < r; ++c) latent[i * r + c] = combined[i * (r + pe) + c];
    for (std::size_t c = 0; c < pe; ++c) k_pe[i * pe + c] = combined[i * (r + pe) + r + c];
  }
  if (qk_layernorm)
    latent = rms_norm(latent, values(params, p + "kv_layernorm.weight"), rows, r, eps);
  const Doubles kv =
      linear(latent, values(params, p + "linear_kv_up_proj.weight"), rows, r, H * (qk + v));
  // query [q_nope | rope(q_pe)], key [k_nope | rope(k_pe)], value, per (row, head).
  std::vector<Doubles> query(rows * H), key(rows * H), value(rows * H);
  for (std::size_t i = 0; i < rows; ++i) {
    const auto position = static_cast<std::int64_t>(i / kBatch);
    const Doubles kp(k_pe.begin() + static_cast<std::ptrdiff_t>(i * pe),
                     k_pe.begin() + static_cast<std::ptrdiff_t>((i + 1) * pe));
    const Doubles k_rot = megatron_rope(kp, static_cast<std::size_t>(o.rotary_dim), position, base);
    for (std::size_t h = 0; h < H; ++h) {
      const auto at = q.begin() + static_cast<std::ptrdiff_t>(i * H * dq + h * dq);
      Doubles qh(at, at + static_cast<std::ptrdiff_t>(dq));
      const Doubles q_rot =
          megatron_rope(Doubles(qh.begin() + static_cast<std::ptrdiff_t>(qk), qh.end()),
                        static_cast<std::size_t>(o.rotary_dim), position, base);
      std::copy(q_rot.begin(), q_rot.end(), qh.begin() + static_cast<std::ptrdiff_t>(qk));
      query[i * H + h] = qh;
      const auto kv_at = kv.begin() + static_cast<std::ptrdiff_t>(i * H * (qk + v) + h * (qk + v));
      Doubles kh(kv_at, kv_at + static_cast<std::ptrdiff_t>(qk));
      kh.insert(kh.end(), k_rot.begin(), k_rot.end());
      key[i * H + h] = kh;
      value[i * H + h] = Doubles(kv_at + static_cast<std::ptrdiff_t>(qk),
                                 kv_at + static_cast<std::ptrdiff_t>(qk + v));
    }
  }
  Doubles out(rows * H * v, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dq));
  for (std::size_t b = 0; b < kBatch; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < kSeq; ++t) {
        const std::size_t qi = (t * kBatch + b) * H + h;
        Doubles score(t + 1);
        double m = -1e300, sum = 0;
        for (std::size_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < dq; ++d)
            dot += query[qi][d] * key[(j * kBatch + b) * H + h][d];
          score[j] = dot * scale;
          m = std::max(m, score[j]);
        }
        for (std::size_t j = 0; j <= t; ++j) sum += std::exp(score[j] - m);
        for (std::size_t j = 0; j <= t; ++j) {
          const double prob = std::exp(score[j] - m) / sum;
          for (std::size_t d = 0; d < v; ++d)
            out[(t * kBatch + b) * H * v + h * v + d] += prob * value[(j * kBatch + b) * H + h][d];
        }
      }
  return out;
}

void expect_forward_matches_megatron(int q_lora_rank, bool qk_layernorm, int rotary_dim) {
  CpuDevice device;
  SelfCommunicator tp{device, "tp"};
  ModelEnv env{device, device.default_stream(), tp};
  ParameterSet params(1, 0);
  const MlaOptions o = mla_options(q_lora_rank, rotary_dim);
  const float base = 100.0f, eps = 1e-6f;
  MlaAttention mla(params, "layers.0.attention.", o,
                   {.rms = true, .epsilon = eps, .qk_layernorm = qk_layernorm}, kHidden, kHeads,
                   kSeq, kBatch, false, base);
  params.allocate(device);
  params.initialize(device, device.default_stream(), 5);
  // Weights 10 times their init, so the scores are far from uniform and RoPE shows.
  for (auto& p : params.all())
    if (p.spec.init_std > 0)
      for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 10.0f;
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x = device.allocate(Shape{kSeq * kBatch, kHidden}, DType::fp32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(gen);
  MlaActivations saved;
  const Tensor out = mla.forward(env, x, saved, true);
  const Doubles ref = reference_mla(
      params, o, qk_layernorm, Doubles(x.data<float>(), x.data<float>() + x.numel()), base, eps);
  ASSERT_EQ(out.numel(), static_cast<std::int64_t>(ref.size()));
  double scale = 0, worst = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (std::size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(out.data<float>()[i]) - ref[i]));
  EXPECT_LT(worst, 1e-5 * scale) << "largest |error| " << worst << " of outputs up to " << scale;
  std::printf("[ max error ] mla q_lora %d norms %d rotary %d: %.3g of %.3g\n", q_lora_rank,
              qk_layernorm, rotary_dim, worst, scale);
}

TEST(MlaAttention, ForwardIsMegatronsMlaSelfAttention) {
  expect_forward_matches_megatron(12, true, 4);   // q latent with its norm, all pe rotated
  expect_forward_matches_megatron(0, false, 2);   // linear_q_proj, half the pe rotated
  expect_forward_matches_megatron(12, false, 4);  // latents without norms
}

// The whole model with MLA layers (Llama frame, 4 heads, q latent 12 with q_layernorm and
// kv_layernorm, kv latent 10, heads of 6 + 4 positional features and values of 5).
GptDims mla_dims(int q_lora_rank) {
  return {.num_layers = 2,
          .hidden = 16,
          .heads = 4,
          .ffn = 24,
          .seq = 8,
          .micro_batch = 2,
          .padded_vocab = 128,
          .max_positions = 8,
          .options = {.swiglu = true,
                      .normalization = Normalization::rms_norm,
                      .norm_epsilon = 1e-6f,
                      .rope = true,
                      .rotary_base = 100.0f,
                      .add_bias_linear = false,
                      .flash_attn = true,
                      .qk_layernorm = true,
                      .untie_embeddings_and_output_weights = true,
                      .learned_position_embedding = false,
                      .mla = {.enabled = true,
                              .q_lora_rank = q_lora_rank,
                              .kv_lora_rank = 10,
                              .qk_head_dim = 6,
                              .qk_pos_emb_head_dim = 4,
                              .v_head_dim = 5,
                              .rotary_dim = 4}}};
}

struct TinyMlaGpt {
  CpuDevice device;
  SelfCommunicator tp{device, "tp"};
  ModelEnv env{device, device.default_stream(), tp};
  ParameterSet params{1, 0};
  GptChunk chunk;
  MicrobatchTensors mb;

  TinyMlaGpt(Recompute r, const GptDims& dims)
      : chunk(params, dims, ChunkPlan{0, 2, true, true}, r) {
    params.allocate(device);
    params.initialize(device, device.default_stream(), 7);
    mb = testing::random_microbatch(device, dims);
  }
  double loss() {
    chunk.forward(env, 0, Tensor{}, mb);
    const Tensor& l = chunk.row_losses(0);
    double s = 0;
    for (std::int64_t i = 0; i < l.numel(); ++i) s += l.data<float>()[i];
    const double mean = s / static_cast<double>(l.numel());
    chunk.discard(0);
    return mean;
  }
  std::vector<float> gradients() {
    device.fill(device.default_stream(), params.grads(), 0.0f);
    chunk.forward(env, 0, Tensor{}, mb);
    chunk.backward(env, 0, Tensor{}, 1.0f);
    const float* g = params.grads().data<float>();
    return {g, g + params.numel()};
  }
};

TEST(MlaAttention, ModelGradientsMatchFiniteDifferences) {
  for (int q_lora_rank : {12, 0}) {
    TinyMlaGpt m(Recompute::none, mla_dims(q_lora_rank));
    // Projections 4 times their init, so attention is far from uniform.
    for (auto& p : m.params.all())
      if (p.spec.name.find(".attention.linear_") != std::string::npos)
        for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 4.0f;
    const auto grads = m.gradients();
    std::mt19937 gen(11);
    int checked = 0, mla = 0;
    for (auto& p : m.params.all()) {
      std::uniform_int_distribution<std::int64_t> pick(0, p.value.numel() - 1);
      const bool in_mla = p.spec.name.find(".attention.") != std::string::npos;
      for (int k = 0; k < (in_mla ? 6 : 2); ++k) {
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
            << p.spec.name << "[" << i << "] q_lora " << q_lora_rank;
        ++checked;
        mla += in_mla;
      }
    }
    EXPECT_GT(mla, 30) << q_lora_rank;
    EXPECT_GT(checked, 50);
  }
}

TEST(MlaAttention, RecomputationGivesTheSameGradientsAndFreesEverything) {
  TinyMlaGpt none(Recompute::none, mla_dims(12)), selective(Recompute::selective, mla_dims(12)),
      full(Recompute::full, mla_dims(12));
  const auto g0 = none.gradients(), g1 = selective.gradients(), g2 = full.gradients();
  ASSERT_EQ(g0.size(), g1.size());
  for (std::size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(g0[i], g1[i]) << i;
    ASSERT_EQ(g0[i], g2[i]) << i;
  }
  const Bytes before = none.device.memory().live();
  none.chunk.forward(none.env, 0, Tensor{}, none.mb);
  EXPECT_GT(none.device.memory().live(), before);
  none.chunk.backward(none.env, 0, Tensor{}, 1.0f);
  EXPECT_EQ(none.device.memory().live(), before);
}

// The layer's parameters as Megatron-Core's MLASelfAttention holds them.
TEST(MlaAttention, ParametersHaveMegatronsShapes) {
  TinyMlaGpt m(Recompute::none, mla_dims(12));
  std::map<std::string, Shape> got;
  for (const auto& p : m.params.all())
    if (p.spec.name.rfind("layers.0.attention.", 0) == 0) got[p.spec.name] = p.local_shape;
  const std::map<std::string, Shape> want{
      {"layers.0.attention.linear_q_down_proj.weight", Shape{12, 16}},
      {"layers.0.attention.q_layernorm.weight", Shape{12}},
      {"layers.0.attention.linear_q_up_proj.weight", Shape{4 * 10, 12}},
      {"layers.0.attention.linear_kv_down_proj.weight", Shape{10 + 4, 16}},
      {"layers.0.attention.kv_layernorm.weight", Shape{10}},
      {"layers.0.attention.linear_kv_up_proj.weight", Shape{4 * 11, 10}},
      {"layers.0.attention.dense.weight", Shape{16, 4 * 5}}};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tandem
