// Megatron's FLOPs per iteration and the parameter count (model/flops.hpp) against hand
// derivations and published model sizes.
#include <gtest/gtest.h>

#include <cmath>

#include "core/megatron_args.hpp"
#include "core/scenario.hpp"
#include "model/flops.hpp"

namespace tandem {
namespace {

// Llama-2 7B (Touvron et al. 2023; the Hugging Face config): 32 layers, h 4096, 32 heads,
// SwiGLU ffn 11008, RMSNorm, RoPE, no biases, untied output, vocab 32000.
Scenario llama2_7b() {
  Scenario s;
  s.model.num_layers = 32;
  s.model.hidden_size = 4096;
  s.model.num_attention_heads = 32;
  s.model.ffn_hidden_size = 11008;
  s.model.swiglu = true;
  s.model.normalization = "RMSNorm";
  s.model.position_embedding_type = "rope";
  s.model.disable_bias_linear = true;
  s.model.untie_embeddings_and_output_weights = true;
  s.model.vocab_size = 32000;
  s.model.seq_length = 4096;
  return s;
}

// Llama-3 8B: as above with 8 key/value heads, ffn 14336 and vocab 128256.
Scenario llama3_8b() {
  Scenario s = llama2_7b();
  s.model.group_query_attention = true;
  s.model.num_query_groups = 8;
  s.model.ffn_hidden_size = 14336;
  s.model.vocab_size = 128256;
  s.model.seq_length = 8192;
  return s;
}

// Mixtral 8x7B (Jiang et al. 2024, Table 1): Llama-like with 8 key/value heads of 128,
// vocab 32000, untied, and in every layer 8 SwiGLU experts of width 14336, top 2.
Scenario mixtral_8x7b() {
  Scenario s = llama2_7b();
  s.model.group_query_attention = true;
  s.model.num_query_groups = 8;
  s.model.ffn_hidden_size = 14336;
  s.model.num_experts = 8;
  s.model.moe_router_topk = 2;
  return s;
}

TEST(ParameterCount, Mixtral8x7bIsThePublished46_7BWith12_9BActive) {
  const ParameterCount c = parameter_count(dense_shape(mixtral_8x7b()));
  // By hand: attention q and o 4096², k and v 4096·1024 each; an expert 3 · 4096 · 14336;
  // the router 4096 · 8; two RMSNorm weights; embedding and output 32000 · 4096; final norm.
  const double attention = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024;
  const double expert = 3.0 * 4096 * 14336, router = 4096.0 * 8, norms = 2.0 * 4096;
  const double around = 2.0 * 32000 * 4096 + 4096;
  EXPECT_DOUBLE_EQ(c.total, 32 * (attention + 8 * expert + router + norms) + around);
  EXPECT_DOUBLE_EQ(c.active, 32 * (attention + 2 * expert + router + norms) + around);
  // Mistral AI: "46.7B total parameters but only uses 12.9B parameters per token".
  EXPECT_NEAR(c.total / 1e9, 46.7, 0.05);
  EXPECT_NEAR(c.active / 1e9, 12.9, 0.05);
}

TEST(ParameterCount, MoeLayerFrequencyAndSharedExpert) {
  // Every second layer of 4 (layers 0 and 2) is MoE: 4 experts of width 64, top 1, and a
  // shared expert of width 32; GeLU MLPs with biases.
  Scenario s;
  s.model.num_layers = 4;
  s.model.hidden_size = 16;
  s.model.num_attention_heads = 2;
  s.model.ffn_hidden_size = 48;
  s.model.num_experts = 4;
  s.model.moe_router_topk = 1;
  s.model.moe_ffn_hidden_size = 64;
  s.model.moe_shared_expert_intermediate_size = 32;
  s.model.moe_layer_freq = 2;
  EXPECT_EQ(num_moe_layers(s), 2);
  const ParameterCount c = parameter_count(dense_shape(s));
  auto mlp = [](double ffn) { return 16 * ffn + ffn * 16 + ffn + 16; };  // fc1, fc2, biases
  const double attention = 16.0 * 48 + 48 + 16.0 * 16 + 16, norms = 2 * 2 * 16.0;
  EXPECT_DOUBLE_EQ(c.per_layer, attention + mlp(48) + norms);
  EXPECT_DOUBLE_EQ(c.per_moe_layer, attention + 16 * 4 + 4 * mlp(64) + mlp(32) + norms);
  EXPECT_DOUBLE_EQ(c.active_moe_layer, attention + 16 * 4 + 1 * mlp(64) + mlp(32) + norms);
  EXPECT_DOUBLE_EQ(c.total - c.active, 2 * 3 * mlp(64));
}

TEST(ParameterCount, Llama2_7bIsThePublished6_74B) {
  const double n = parameter_count(dense_shape(llama2_7b())).total;
  EXPECT_NEAR(n, 6.74e9, 0.005 * 6.74e9);
  // By hand: 32 · (4·4096² + 3·4096·11008 + 2·4096) + 2·32000·4096 + 4096.
  EXPECT_DOUBLE_EQ(n, 6738415616.0);
}

TEST(ParameterCount, Llama3_8bIsThePublished8_03B) {
  const double n = parameter_count(dense_shape(llama3_8b())).total;
  EXPECT_NEAR(n, 8.03e9, 0.005 * 8.03e9);
  // 32 · (4096·(4096 + 2·1024) + 4096² + 3·4096·14336 + 2·4096) + 2·128256·4096 + 4096.
  EXPECT_DOUBLE_EQ(n, 8030261248.0);
}

TEST(ParameterCount, Gpt2SmallWithBiasesLayerNormAndTiedEmbeddings) {
  // GPT-2 small (124M): 12 layers, h 768, vocab 50257, 1024 positions. Per layer
  // 12h² + 13h (weights, biases and two LayerNorms); embeddings (V + 1024)·h; final norm 2h.
  Scenario s;
  s.model.num_layers = 12;
  s.model.hidden_size = 768;
  s.model.num_attention_heads = 12;
  s.model.seq_length = 1024;
  s.model.vocab_size = 50257;
  s.model.make_vocab_size_divisible_by = 1;  // GPT-2's own, unpadded vocabulary
  const double h = 768;
  const double expected = 12 * (12 * h * h + 13 * h) + (50257 + 1024) * h + 2 * h;
  EXPECT_DOUBLE_EQ(parameter_count(dense_shape(s)).total, expected);
  EXPECT_NEAR(expected, 124.44e6, 0.01e6);  // the published 124M
}

TEST(ParametersPerRank, SplitOverTensorAndPipeline) {
  Scenario s = llama2_7b();  // 32 layers, untied, no biases, RMSNorm
  const DenseShape d = dense_shape(s);
  const double h = 4096, layer = 4 * h * h + 3 * h * 11008, norms = 2 * h;
  const double word = 32000 * h;
  // tp 4, pp 2: each stage 16 layers; the first adds the embedding, the last the norm and
  // output layer — the same size here, since both are V·h / tp.
  const double stage = 16 * (layer / 4 + norms);
  EXPECT_DOUBLE_EQ(parameters_per_rank(d, 4, 2), std::max(stage + word / 4, stage + h + word / 4));
  // pp 1: everything on each rank, split by tp.
  EXPECT_DOUBLE_EQ(parameters_per_rank(d, 1, 1), parameter_count(d).total);
}

TEST(MegatronFlops, DenseGptMatchesTheLogFormula) {
  // Without GQA/SwiGLU, with kv_channels = h / heads and ffn = 4h, Megatron's general
  // function reduces to 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)).
  Scenario s;
  s.model.num_layers = 96;
  s.model.hidden_size = 12288;
  s.model.num_attention_heads = 96;
  s.model.seq_length = 2048;
  s.model.vocab_size = 51200;
  const DenseShape d = dense_shape(s);
  const double expected =
      megatron_log_flops({1536, 2048, 96, 12288, static_cast<double>(padded_vocab_size(s))});
  EXPECT_NEAR(num_floating_point_operations(d, 1536), expected, 1e-9 * expected);
}

TEST(MegatronFlops, MixtralCountsTheTwoRoutedExperts) {
  // Megatron's formula (training.py, transformer_flops): 12 · B · s · L · h · (routed
  // experts moe_ffn · k · 3/2) for the MLP, the attention term as for a dense model, and
  // 6 · B · s · h · V for the logits. So Mixtral costs the dense Llama shape with ffn
  // 2 · 14336 per layer.
  const Scenario moe = mixtral_8x7b();
  Scenario dense = moe;
  dense.model.num_experts.reset();
  dense.model.ffn_hidden_size = 2 * 14336;
  EXPECT_DOUBLE_EQ(num_floating_point_operations(dense_shape(moe), 256),
                   num_floating_point_operations(dense_shape(dense), 256));
  const double mlp = 12.0 * 256 * 4096 * 32 * 4096 * (14336.0 * 2 * 1.5);
  dense.model.ffn_hidden_size = 14336;
  const double one_expert_mlp = 12.0 * 256 * 4096 * 32 * 4096 * (14336.0 * 1.5);
  EXPECT_DOUBLE_EQ(num_floating_point_operations(dense_shape(moe), 256) -
                       num_floating_point_operations(dense_shape(dense), 256),
                   mlp - one_expert_mlp);
}

TEST(MegatronFlops, Llama3_8bByHand) {
  // Per token: 6·L·h·(3·ffn + 2q + 2kv) + 6·h·V with q = 4096, kv = 1024, plus the attention
  // scores 6·s·L·q per token.
  const double L = 32, h = 4096, ffn = 14336, q = 4096, kv = 1024, V = 128256, s = 8192;
  const double per_token = 6 * L * h * (3 * ffn + 2 * q + 2 * kv) + 6 * h * V + 6 * s * L * q;
  EXPECT_DOUBLE_EQ(num_floating_point_operations(dense_shape(llama3_8b()), 128),
                   128 * s * per_token);
  // Close to 6·N per token (N = 8.03e9, of which the input embedding costs no FLOPs) plus
  // attention at s = 8192: a sanity bound, 1.0–1.2 × 6N.
  const double six_n = 6 * 8.03e9;
  EXPECT_GT(per_token, 1.0 * six_n);
  EXPECT_LT(per_token, 1.2 * six_n);
}

// DeepSeek-V3 (DeepSeek-AI 2024, its config.json) from Megatron's flags: 61 layers of
// hidden 7168, 128 heads of multi-latent attention (q latent 1536, kv latent 512, heads of
// 128 + 64 positional and values of 128, latent RMSNorms), the first 3 layers dense with
// SwiGLU ffn 18432, the other 58 with 256 routed experts of 2048 (top 8, sigmoid) and one
// shared expert of 2048, RMSNorm, no biases, untied, vocab 129280. The main model, without
// the MTP module, as DeepSeek counts its 671B total and 37B activated.
Scenario deepseek_v3() {
  const auto cl = parse_megatron_args({"--num-layers",
                                       "61",
                                       "--hidden-size",
                                       "7168",
                                       "--ffn-hidden-size",
                                       "18432",
                                       "--num-attention-heads",
                                       "128",
                                       "--multi-latent-attention",
                                       "--q-lora-rank",
                                       "1536",
                                       "--kv-lora-rank",
                                       "512",
                                       "--qk-head-dim",
                                       "128",
                                       "--qk-pos-emb-head-dim",
                                       "64",
                                       "--v-head-dim",
                                       "128",
                                       "--qk-layernorm",
                                       "--normalization",
                                       "RMSNorm",
                                       "--swiglu",
                                       "--disable-bias-linear",
                                       "--untie-embeddings-and-output-weights",
                                       "--position-embedding-type",
                                       "rope",
                                       "--vocab-size",
                                       "129280",
                                       "--num-experts",
                                       "256",
                                       "--moe-ffn-hidden-size",
                                       "2048",
                                       "--moe-shared-expert-intermediate-size",
                                       "2048",
                                       "--moe-router-topk",
                                       "8",
                                       "--moe-router-score-function",
                                       "sigmoid",
                                       "--moe-layer-freq",
                                       "([0]*3+[1]*58)",
                                       "--seq-length",
                                       "4096"});
  Scenario s;
  apply_overrides(s, cl.overrides);
  return s;
}

TEST(ParameterCount, DeepSeekV3IsThePublished671BWith37BActive) {
  const Scenario s = deepseek_v3();
  ASSERT_EQ(num_moe_layers(s), 58);
  ASSERT_EQ(padded_vocab_size(s), 129280);
  const ParameterCount c = parameter_count(dense_shape(s));
  // By hand, one layer's attention: q_down 7168·1536, q_layernorm 1536, q_up 1536·128·192,
  // kv_down 7168·(512 + 64), kv_layernorm 512, kv_up 512·128·(128 + 128), o 128·128·7168.
  const double attention = 7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512 +
                           512.0 * 128 * 256 + 128.0 * 128 * 7168;
  EXPECT_DOUBLE_EQ(attention, 187107328.0);
  const double norms = 2.0 * 7168, expert = 3.0 * 7168 * 2048, router = 7168.0 * 256;
  const double dense = attention + 3.0 * 7168 * 18432 + norms;
  const double moe = attention + router + 256 * expert + expert + norms;
  const double moe_active = attention + router + 8 * expert + expert + norms;
  const double around = 2.0 * 129280 * 7168 + 7168;
  EXPECT_DOUBLE_EQ(c.total, 3 * dense + 58 * moe + around);
  EXPECT_DOUBLE_EQ(c.active, 3 * dense + 58 * moe_active + around);
  // The published rounding: 671B total, 37B activated.
  EXPECT_EQ(std::llround(c.total / 1e9), 671);
  EXPECT_EQ(static_cast<long long>(c.active / 1e9), 37);
}

TEST(MegatronFlops, MultiLatentAttentionByHand) {
  // Megatron's MLA branch of num_floating_point_operations, per token and layer before its
  // 3·2: queries 1536·(7168 + 128·192 + 1), keys and values 512·(7168 + 128·256 + 1) +
  // 7168·64, output 128·128·7168; the core 3·2·(128·192/2 + 128·128/2) per token and key.
  Scenario s = deepseek_v3();
  s.model.num_experts.reset();
  s.model.moe_layer_pattern.clear();
  const double projections = 1536.0 * (7168 + 128 * 192 + 1) + 512.0 * (7168 + 128 * 256 + 1) +
                             7168.0 * 64 + 128.0 * 128 * 7168;
  const double L = 61, h = 7168, seq = 4096, V = 129280, B = 16;
  const double per_token = 6 * L * projections + 6 * h * 3 * 18432 * L + 6 * h * V;
  const double core = 6 * (128.0 * 192 / 2 + 128.0 * 128 / 2) * seq * seq * L * B;
  const DenseShape d = dense_shape(s);
  EXPECT_DOUBLE_EQ(num_floating_point_operations(d, B), B * seq * per_token + core);
  EXPECT_DOUBLE_EQ(attention_core_flops(d, B), core);
  // Without the query latent the queries cost 7168·128·192.
  s.model.mla.q_lora_rank.reset();
  const double plain = 7168.0 * 128 * 192 - 1536.0 * (7168 + 128 * 192 + 1);
  EXPECT_DOUBLE_EQ(num_floating_point_operations(dense_shape(s), B),
                   B * seq * (per_token + 6 * L * plain) + core);
}

// Megatron's transformer_flops with mtp_num_layers D: the attention terms count L + D
// layers, the MLP D more layers of the last layer's kind, each depth its norms and eh_proj
// 6·(3h + 2h²) per token, and the logits 6·h·V·(D + 1). Llama-3 8B with D = 1, by hand:
// per token 6·(L + 1)·h·(3·ffn + 2q + 2kv) + 6·(3h + 2h²) + 6·h·V·2 + 6·s·(L + 1)·q.
TEST(MegatronFlops, MultiTokenPredictionByHand) {
  Scenario mtp = llama3_8b();
  mtp.model.mtp_num_layers = 1;
  const double L = 32, h = 4096, ffn = 14336, q = 4096, kv = 1024, V = 128256, s = 8192;
  const double per_token = 6 * (L + 1) * h * (3 * ffn + 2 * q + 2 * kv) + 6 * (3 * h + 2 * h * h) +
                           6 * h * V * 2 + 6 * s * (L + 1) * q;
  EXPECT_DOUBLE_EQ(num_floating_point_operations(dense_shape(mtp), 128), 128 * s * per_token);
  // Mixtral's last layer is an MoE layer: two depths add two MoE MLPs (top 2 of width
  // 14336), 12 · B · s · h · (14336 · 2 · 1.5) each, over the same model's without MTP,
  // besides their attention, norms, eh_proj and logits.
  Scenario moe = mixtral_8x7b();
  const double without = num_floating_point_operations(dense_shape(moe), 256);
  moe.model.mtp_num_layers = 2;
  const double with = num_floating_point_operations(dense_shape(moe), 256);
  const double attention = 6 * h * (2 * q + 2 * kv) + 6 * 4096.0 * q;  // per token, per layer
  const double depth =
      12.0 * h * (14336.0 * 2 * 1.5) + attention + 6 * (3 * h + 2 * h * h) + 6 * h * 32000;
  EXPECT_NEAR(with - without, 2 * 256 * 4096.0 * depth, 1e-12 * with);
}

// The MTP module beside the main model: per depth three norms, eh_proj 2h² and a layer of
// the last layer's kind; neither in the total nor in the active count.
TEST(ParameterCount, MultiTokenPredictionApart) {
  Scenario s = mixtral_8x7b();
  const ParameterCount without = parameter_count(dense_shape(s));
  s.model.mtp_num_layers = 1;
  const ParameterCount c = parameter_count(dense_shape(s));
  EXPECT_EQ(c.total, without.total);
  EXPECT_EQ(c.active, without.active);
  const double h = 4096, norms = 3 * h;  // RMSNorm: a weight each
  EXPECT_DOUBLE_EQ(c.mtp, norms + 2 * h * h + c.per_moe_layer);
  EXPECT_DOUBLE_EQ(c.active_mtp, norms + 2 * h * h + c.active_moe_layer);
}

}  // namespace
}  // namespace tandem
