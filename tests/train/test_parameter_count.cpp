// The parameters the training step registers against the count `tandem scenario` prints
// and the FLOP and memory formulas use (model/flops.hpp), two independent derivations of
// one number: for every scenario in scenarios/ and for small models whose heads are not
// hidden / heads wide (kv_channels), with and without qk_layernorm, the elements the
// layers register equal parameter_count() exactly, and one rank's shards on the busiest
// pipeline stage equal parameters_per_rank() (every scenario in its own layout; the small
// models at tp 2). Qwen3-235B-A22B's counts against its published size.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "model/flops.hpp"
#include "model/gpt_chunk.hpp"
#include "schedules/layout.hpp"
#include "train/trainer.hpp"

namespace tandem {
namespace {

// The whole model as one chunk (every layer, the embedding, the loss and the MTP block) on
// tp rank 0 of `tp`, every expert on this rank (ep 1): the elements it registers.
double registered_parameters(const Scenario& s, int tp) {
  const Layout layout = make_layout({.world_size = tp, .tp = tp});
  const GptDims dims = gpt_dims(s, make_parallel_context(layout, 0));
  ParameterSet params(tp, 0);
  const GptChunk chunk(params, dims,
                       ChunkPlan{0, s.model.num_layers, true, true, mtp_depths(s.model)},
                       Recompute::none);
  double n = 0;
  for (const auto& p : params.all()) n += static_cast<double>(p.local_shape.numel());
  return n;
}

// A Llama-style model (grouped-query fused attention, SwiGLU, RMSNorm, RoPE, untied) with
// heads of kv_channels on a hidden size of 64.
Scenario small_model(int kv_channels, bool qk_layernorm, const std::string& normalization) {
  Scenario s;
  s.model.num_layers = 2;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.kv_channels = kv_channels;
  s.model.group_query_attention = true;
  s.model.num_query_groups = 2;
  s.model.qk_layernorm = qk_layernorm;
  s.model.normalization = normalization;
  s.model.swiglu = true;
  s.model.disable_bias_linear = true;
  s.model.position_embedding_type = "rope";
  s.model.untie_embeddings_and_output_weights = true;
  s.model.use_flash_attn = true;
  s.model.seq_length = 32;
  s.model.vocab_size = 512;
  s.parallelism.tensor_model_parallel_size = 2;
  s.cluster.world_size = 2;
  validate(s);
  return s;
}

TEST(ParameterCount, EveryScenarioRegistersWhatItCounts) {
  int checked = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(TANDEM_SOURCE_DIR "/scenarios")) {
    if (entry.path().extension() != ".json") continue;
    const Scenario s = load_scenario(entry.path());
    const ParameterCount c = parameter_count(dense_shape(s));
    EXPECT_EQ(registered_parameters(s, 1), c.total + c.mtp) << entry.path();
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

// What one rank holds on the busiest pipeline stage (tp rank 0, ep rank 0 of the scenario's
// layout): every chunk the partition gives each pp rank, registered as the trainer does.
double busiest_stage_parameters(const Scenario& s) {
  const int tp = s.parallelism.tensor_model_parallel_size;
  const int pp = s.parallelism.pipeline_model_parallel_size;
  GptDims dims = gpt_dims(s, make_parallel_context(make_layout({.world_size = 1}), 0));
  dims.ep_size = s.parallelism.expert_model_parallel_size;
  dims.ep_rank = 0;
  double busiest = 0;
  for (int r = 0; r < pp; ++r) {
    ParameterSet params(tp, 0);
    for (int c = 0; c < virtual_pipeline_size(s); ++c) {
      params.begin_chunk(c);
      const GptChunk chunk(params, dims, plan_chunk(s, r, c), Recompute::none);
    }
    double n = 0;
    for (const auto& p : params.all()) n += static_cast<double>(p.local_shape.numel());
    busiest = std::max(busiest, n);
  }
  return busiest;
}

// `tandem scenario`'s parameters_per_rank, for every scenario in its own layout.
TEST(ParameterCount, EveryScenarioRegistersWhatItCountsPerRank) {
  int checked = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(TANDEM_SOURCE_DIR "/scenarios")) {
    if (entry.path().extension() != ".json") continue;
    const Scenario s = load_scenario(entry.path());
    std::vector<bool> moe_layer;
    for (int i = 0; i < s.model.num_layers; ++i) moe_layer.push_back(is_moe_layer(s, i));
    const auto& p = s.parallelism;
    EXPECT_EQ(busiest_stage_parameters(s),
              parameters_per_rank(dense_shape(s), p.tensor_model_parallel_size,
                                  p.pipeline_model_parallel_size, p.expert_model_parallel_size,
                                  moe_layer, pipeline_partition(s)))
        << entry.path();
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

TEST(ParameterCount, HeadsOfKvChannelsRegisterWhatTheyCount) {
  for (int kv : {8, 16, 32})  // narrower than, as wide as, wider than hidden / heads = 16
    for (bool qk : {false, true})
      for (const char* norm : {"RMSNorm", "LayerNorm"}) {
        const Scenario s = small_model(kv, qk, norm);
        const DenseShape d = dense_shape(s);
        EXPECT_EQ(registered_parameters(s, 1), parameter_count(d).total)
            << "kv_channels " << kv << " qk_layernorm " << qk << " " << norm;
        EXPECT_EQ(registered_parameters(s, 2), parameters_per_rank(d, 2, 1))
            << "kv_channels " << kv << " qk_layernorm " << qk << " " << norm;
      }
}

// Multi-latent attention on the small frame (4 heads, no grouped-query attention): with
// and without the query latent, the latent norms (RMSNorm and LayerNorm) and biases (only
// the output projection has one); the whole model at tp 1 and one rank's shards at tp 2
// (the down projections and latent norms whole on every rank).
TEST(ParameterCount, MultiLatentAttentionRegistersWhatItCounts) {
  for (int q_lora : {0, 24})
    for (bool qk : {false, true})
      for (const char* norm : {"RMSNorm", "LayerNorm"})
        for (bool bias : {false, true}) {
          Scenario s = small_model(16, qk, norm);
          s.model.group_query_attention = false;
          s.model.kv_channels.reset();
          s.model.disable_bias_linear = !bias;
          s.model.mla.multi_latent_attention = true;
          if (q_lora > 0) s.model.mla.q_lora_rank = q_lora;
          s.model.mla.kv_lora_rank = 20;
          s.model.mla.qk_head_dim = 12;
          s.model.mla.qk_pos_emb_head_dim = 6;
          s.model.mla.v_head_dim = 10;
          validate(s);
          const DenseShape d = dense_shape(s);
          const std::string what = "q_lora " + std::to_string(q_lora) + " qk_layernorm " +
                                   std::to_string(qk) + " " + norm + " bias " +
                                   std::to_string(bias);
          EXPECT_EQ(registered_parameters(s, 1), parameter_count(d).total) << what;
          EXPECT_EQ(registered_parameters(s, 2), parameters_per_rank(d, 2, 1)) << what;
        }
}

// By hand, the first of those with the query latent and RMSNorm latent norms, no biases:
// a layer's attention holds q_down 64 · 24, q_layernorm 24, q_up 24 · 4 · 18, kv_down
// 64 · (20 + 6), kv_layernorm 20, kv_up 20 · 4 · 22 and the output 64 · 4 · 10: 9292; with
// fc1 2 · 128 · 64, fc2 64 · 128 and two norms of 64 a layer is 33996; two layers, the word
// embedding and the output layer 512 · 64 each and the final norm: 133592.
TEST(ParameterCount, ASmallMultiLatentAttentionModelByHand) {
  Scenario s = small_model(16, true, "RMSNorm");
  s.model.group_query_attention = false;
  s.model.kv_channels.reset();
  s.model.mla = {.multi_latent_attention = true,
                 .q_lora_rank = 24,
                 .kv_lora_rank = 20,
                 .qk_head_dim = 12,
                 .qk_pos_emb_head_dim = 6,
                 .v_head_dim = 10};
  validate(s);
  EXPECT_EQ(registered_parameters(s, 1), 133592.0);
}

// By hand, kv_channels 32, qk_layernorm, RMSNorm, no biases, hidden 64, 4 heads in 2
// groups, ffn 2/3 · 4 · 64 rounded down to a multiple of 64 = 128 (SwiGLU), vocabulary 512
// (a multiple of 128 · tp 2): a layer holds QKV (4 + 2 + 2) · 32 · 64 = 16384, the
// projection 64 · 4 · 32 = 8192, q and k norms 2 · 32, fc1 2 · 128 · 64 = 16384, fc2
// 64 · 128 = 8192 and two norms of 64: 49344. Two layers, the word embedding and the
// output layer 512 · 64 each, the final norm 64: 98688 + 65536 + 64 = 164288.
TEST(ParameterCount, ASmallKvChannelsModelByHand) {
  EXPECT_EQ(registered_parameters(small_model(32, true, "RMSNorm"), 1), 164288.0);
}

// Qwen3-235B-A22B: 235B parameters in all, 22B activated per token (Qwen3 technical report,
// Table 2; the model card's 235B / 22B). Within 1 % of 235.1B and of 22.2B, the two
// rounded to the published precision (the model card gives 234B without the embeddings).
TEST(ParameterCount, Qwen3At235BTotalAnd22BActive) {
  const Scenario s = load_scenario(TANDEM_SOURCE_DIR "/scenarios/qwen3-235b-a22b-256gpu.json");
  const ParameterCount c = parameter_count(dense_shape(s));
  EXPECT_NEAR(c.total, 235.1e9, 0.01 * 235.1e9);
  EXPECT_NEAR(c.active, 22.0e9, 0.5e9);
  const double embeddings = 2.0 * padded_vocab_size(s) * s.model.hidden_size;
  EXPECT_NEAR(c.total - embeddings, 234.0e9, 0.5e9);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A GPT with 2 multi-token prediction depths: LayerNorm, biases, a 4h MLP, hidden 64 with 4
// heads, vocabulary 512 (a multiple of 128), tied, no position embedding (MTP needs RoPE
// or none). Optionally pp 2 with the depths beside the loss.
Scenario mtp_model(int tp, int pp, bool untied, bool moe_last) {
  Scenario s;
  s.model.num_layers = 2;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.seq_length = 32;
  s.model.vocab_size = 512;
  s.model.position_embedding_type = "none";
  s.model.untie_embeddings_and_output_weights = untied;
  s.model.mtp_num_layers = 2;
  if (moe_last) {
    s.model.num_experts = 4;
    s.model.moe_layer_pattern = {0, 1};
    s.model.disable_bias_linear = true;
  }
  s.parallelism.tensor_model_parallel_size = tp;
  s.parallelism.sequence_parallel = tp > 1;  // Megatron's rule for MoE at tp > 1
  s.parallelism.pipeline_model_parallel_size = pp;
  if (pp == 2) s.parallelism.pipeline_model_parallel_layout = "Et|tmmL";
  s.cluster.world_size = tp * pp;
  validate(s);
  return s;
}

// The elements pp rank r registers on tp rank 0, its chunks as the trainer builds them.
double registered_on_stage(const Scenario& s, int r) {
  const int tp = s.parallelism.tensor_model_parallel_size;
  const GptDims dims = gpt_dims(s, make_parallel_context(make_layout({.world_size = 1}), 0));
  ParameterSet params(tp, 0);
  const GptChunk chunk(params, dims, plan_chunk(s, r, 0), Recompute::none);
  double n = 0;
  for (const auto& p : params.all()) n += static_cast<double>(p.local_shape.numel());
  return n;
}

// By hand: a layer holds QKV 64 · 192 + 192 = 12480, the projection 64 · 64 + 64 = 4160,
// fc1 64 · 256 + 256 = 16640, fc2 256 · 64 + 64 = 16448 and two LayerNorms of 128: 49984.
// The main model: 2 layers, the word embedding 512 · 64 = 32768, the final norm 128:
// 132864. A depth: enorm, hnorm and its final norm 3 · 128, eh_proj 64 · 128 = 8192 and a
// layer: 58560; two of them 117120. On pp 2 ("Et|tmmL") rank 0 holds the embedding and a
// layer, 82752; rank 1 a layer, the final norm, the word embedding's copy (the tied output
// layer, which the depths embed with) and both depths: 49984 + 128 + 32768 + 117120 =
// 200000. Untied, rank 1 holds the output layer besides the copy: 32768 more.
TEST(ParameterCount, MultiTokenPredictionByHand) {
  const Scenario one = mtp_model(1, 1, false, false);
  const ParameterCount c = parameter_count(dense_shape(one));
  EXPECT_EQ(c.total, 132864.0);
  EXPECT_EQ(c.mtp, 117120.0);
  EXPECT_EQ(registered_parameters(one, 1), 249984.0);
  const Scenario two = mtp_model(1, 2, false, false);
  EXPECT_EQ(registered_on_stage(two, 0), 82752.0);
  EXPECT_EQ(registered_on_stage(two, 1), 200000.0);
  const Scenario untied = mtp_model(1, 2, true, false);
  EXPECT_EQ(registered_on_stage(untied, 1), 232768.0);
  EXPECT_EQ(parameter_count(dense_shape(untied)).total, 132864.0 + 32768.0);
}

// Every form against the formulas: tied or not, the last layer dense or MoE (the depths'
// layers follow it), tp 1 and 2, pp 1 and 2: the whole model registers total + mtp, and
// each pp rank's busiest share is parameters_per_rank().
TEST(ParameterCount, MultiTokenPredictionRegistersWhatItCounts) {
  for (bool untied : {false, true})
    for (bool moe_last : {false, true})
      for (int tp : {1, 2})
        for (int pp : {1, 2}) {
          const Scenario s = mtp_model(tp, pp, untied, moe_last);
          const DenseShape d = dense_shape(s);
          const ParameterCount c = parameter_count(d);
          const std::string what = "untied " + std::to_string(untied) + " moe " +
                                   std::to_string(moe_last) + " tp " + std::to_string(tp) + " pp " +
                                   std::to_string(pp);
          EXPECT_EQ(registered_parameters(s, 1), c.total + c.mtp) << what;
          EXPECT_EQ(d.mtp_moe, moe_last) << what;
          std::vector<bool> moe_layer{false, moe_last};
          EXPECT_EQ(busiest_stage_parameters(s),
                    parameters_per_rank(d, tp, pp, 1, moe_layer, pipeline_partition(s)))
              << what;
        }
}

}  // namespace
}  // namespace tandem
