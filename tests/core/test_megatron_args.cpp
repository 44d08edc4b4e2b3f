// Megatron command lines (core/megatron_args.hpp): the argument table against
// pretrain_gpt.py's argparse rules, modelled and not-modelled arguments, refusals with the
// closest flag, and the launch-script reader on the bash that Megatron's examples use.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/megatron_args.hpp"

namespace tandem {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(TANDEM_SOURCE_DIR) / "tests" / "tools" / "megatron";

std::vector<Violation> violations_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.violations();
  }
  return {};
}

std::string value_of(const MegatronCommandLine& cl, const std::string& field) {
  std::string v = "(absent)";
  for (const auto& [k, text] : cl.overrides)
    if (k == field) v = text;
  return v;
}

bool not_modelled(const MegatronCommandLine& cl, const std::string& flag) {
  return std::any_of(cl.not_modelled.begin(), cl.not_modelled.end(),
                     [&](const auto& a) { return a.first == flag; });
}

TEST(MegatronTable, SortedUniqueAndComplete) {
  const auto table = megatron_arguments();
  EXPECT_GT(table.size(), 800u);  // pretrain_gpt.py has some 850 arguments
  for (std::size_t i = 1; i < table.size(); ++i)
    EXPECT_LT(table[i - 1].flag, table[i].flag) << "sorted and unique at " << table[i].flag;
  // Every scenario field that is a Megatron argument is found by modelled_argument, and
  // the fields Megatron has no flag for are tandem's own (cluster, schedule choice, order).
  int modelled = 0;
  for (const auto& a : table) modelled += modelled_argument(a).has_value();
  EXPECT_GE(modelled, 45);
  EXPECT_LT(modelled, static_cast<int>(table.size()) / 4);
}

// Every scenario field is set by some Megatron argument, except tandem's own: the cluster,
// the schedule choice and rank order, two pipeline options and the async tensor-parallel
// all-reduce switch Megatron-LM has since removed from its command line, Megatron-DeepSpeed's
// --deepspeed (not Megatron-LM's) and its BF16_Optimizer's all-reduce of the gradients
// (distributed_optimizer_grad_reduce), and the host's per-layer sync and timestamps of a
// profiled run. A field added to
// the scenario under a name Megatron does not use shows up here.
TEST(MegatronTable, EveryScenarioFieldButTandemsOwnIsAMegatronArgument) {
  std::vector<std::string> unreachable;
  for (const auto& f : scenario_fields()) {
    bool reached = false;
    for (const auto& a : megatron_arguments()) {
      const auto m = modelled_argument(a);
      reached = reached || (m && m->field == f.name);
    }
    if (!reached) unreachable.push_back(f.name);
  }
  EXPECT_EQ(unreachable, (std::vector<std::string>{
                             "pipeline_schedule", "order", "distributed_optimizer_grad_reduce",
                             "variable_seq_lengths", "scatter_gather_tensors_in_pipeline",
                             "async_tensor_model_parallel_allreduce", "deepspeed",
                             "host_sync_per_layer", "host_layer_timestamps",
                             "host_sync_output_layer", "world_size", "gpus_per_node", "topology"}));
}

TEST(MegatronArgs, ModelledArgumentsBecomeOverrides) {
  const auto cl = parse_megatron_args(
      {"--num-layers", "96", "--hidden-size=12288", "--fp16", "--disable-bias-linear",
       "--recompute-activations", "--rampup-batch-size", "16", "16", "5859375",
       "--num-virtual-stages-per-pipeline-rank", "2", "--norm-epsilon", "1e-5",
       "--no-gradient-accumulation-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
       "--hidden-dropout", "0.1"});
  EXPECT_EQ(value_of(cl, "num_layers"), "96");
  EXPECT_EQ(value_of(cl, "hidden_size"), "12288");
  EXPECT_EQ(value_of(cl, "fp16"), "true");
  EXPECT_EQ(value_of(cl, "disable_bias_linear"), "true");  // Megatron: add_bias_linear false
  EXPECT_EQ(value_of(cl, "recompute_granularity"), "selective");
  EXPECT_EQ(value_of(cl, "rampup_batch_size"), "16 16 5859375");
  EXPECT_EQ(value_of(cl, "virtual_pipeline_model_parallel_size"), "2");
  EXPECT_EQ(value_of(cl, "norm_epsilon"), "1e-5");
  EXPECT_EQ(value_of(cl, "gradient_accumulation_fusion"), "false");  // a store_false flag
  EXPECT_TRUE(cl.not_modelled.empty());
  Scenario s;
  apply_overrides(s, cl.overrides);  // and the scenario takes them
  EXPECT_EQ(s.model.hidden_size, 12288);
  EXPECT_EQ(s.training.rampup_batch_size, (std::vector<std::int64_t>{16, 16, 5859375}));
  EXPECT_FALSE(s.training.gradient_accumulation_fusion);
  EXPECT_TRUE(Scenario{}.training.gradient_accumulation_fusion);  // Megatron's default
  EXPECT_DOUBLE_EQ(s.model.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(Scenario{}.model.hidden_dropout, 0.0);  // tandem's default; Megatron's 0.1
  EXPECT_FALSE(s.training.bias_gelu_fusion);
  EXPECT_FALSE(s.training.bias_dropout_fusion);
  EXPECT_TRUE(Scenario{}.training.bias_gelu_fusion);  // Megatron's defaults
  EXPECT_TRUE(Scenario{}.training.bias_dropout_fusion);
}

TEST(MegatronArgs, UnmodelledArgumentsAreAcceptedAndListedOnce) {
  const auto cl =
      parse_megatron_args({"--app-tag-run-name", "a", "--init-method-std", "0.006", "--data-path",
                           "a", "0.3", "b", "--no-mmap-bin-files", "--app-tag-run-name", "b"});
  EXPECT_TRUE(cl.overrides.empty());
  EXPECT_TRUE(not_modelled(cl, "--init-method-std"));
  ASSERT_EQ(cl.not_modelled[2].first, "--data-path");
  EXPECT_EQ(cl.not_modelled[2].second, (std::vector<std::string>{"a", "0.3", "b"}));
  EXPECT_EQ(not_modelled_line(cl),
            "not modelled: --app-tag-run-name, --init-method-std, --data-path, "
            "--no-mmap-bin-files");
}

// Arguments that change the model tandem would build are refused, not listed as "not
// modelled": MTP's hidden-state mixing would otherwise be left out.
TEST(MegatronArgs, UnbuiltModelChangesAreRefusedNotIgnored) {
  const auto vs = violations_of([] {
    parse_megatron_args({"--multi-latent-attention", "--kv-lora-rank", "512", "--mtp-hsm",
                         "--init-method-std", "0.006"});
  });
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(vs[0].field, "--mtp-hsm");
  EXPECT_NE(vs[0].rule.find("not built"), std::string::npos) << vs[0].rule;
}

// DeepSeek-V3's multi-latent attention flags become the scenario's fields.
TEST(MegatronArgs, MultiLatentAttentionIsModelled) {
  const auto cl =
      parse_megatron_args({"--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank",
                           "512", "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64",
                           "--v-head-dim", "128", "--rope-type", "rope"});
  EXPECT_TRUE(cl.not_modelled.empty());
  Scenario s;
  apply_overrides(s, cl.overrides);
  EXPECT_TRUE(s.model.mla.multi_latent_attention);
  EXPECT_EQ(s.model.mla.q_lora_rank, 1536);
  EXPECT_EQ(s.model.mla.kv_lora_rank, 512);
  EXPECT_EQ(s.model.mla.q_head_dim(), 192);
  EXPECT_EQ(s.model.mla.v_head_dim, 128);
  EXPECT_EQ(s.model.mla.rope_type, "rope");
}

// Multi-token prediction is modelled: its two arguments set the scenario's fields.
TEST(MegatronArgs, MultiTokenPredictionSetsItsFields) {
  const auto cl =
      parse_megatron_args({"--mtp-num-layers", "2", "--mtp-loss-scaling-factor", "0.3"});
  EXPECT_TRUE(cl.not_modelled.empty());
  EXPECT_EQ(cl.overrides, (std::vector<std::pair<std::string, std::string>>{
                              {"mtp_num_layers", "2"}, {"mtp_loss_scaling_factor", "0.3"}}));
}

TEST(MegatronArgs, UnknownFlagsAreRefusedWithTheClosestMegatronFlag) {
  const auto vs = violations_of([] {
    parse_megatron_args({"--num-layer", "2", "--tensor-model-paralel-size", "8", "--foo-bar-baz"});
  });
  ASSERT_EQ(vs.size(), 3u);
  EXPECT_EQ(vs[0].field, "--num-layer");
  EXPECT_NE(vs[0].rule.find("did you mean --num-layers?"), std::string::npos) << vs[0].rule;
  EXPECT_NE(vs[1].rule.find("--tensor-model-parallel-size"), std::string::npos) << vs[1].rule;
  EXPECT_EQ(vs[2].rule.find("did you mean"), std::string::npos) << vs[2].rule;
}

TEST(MegatronArgs, ArgparseValueRules) {
  const auto vs = violations_of([] {
    parse_megatron_args(
        {"stray", "--num-layers", "--fp16=1", "--rampup-batch-size", "16", "16", "--lr", "-1e-3"});
  });
  auto has = [&](const std::string& field, const std::string& rule) {
    return std::any_of(vs.begin(), vs.end(), [&](const Violation& v) {
      return v.field == field && v.rule.find(rule) != std::string::npos;
    });
  };
  EXPECT_TRUE(has("stray", "no flag before it"));
  EXPECT_TRUE(has("--num-layers", "expects 1 value"));
  EXPECT_TRUE(has("--fp16", "is a switch"));
  EXPECT_TRUE(has("--rampup-batch-size", "expects 3 values"));
  EXPECT_FALSE(has("--lr", ""));  // "-1e-3" is a value, as argparse reads it
}

// The Llama-3 8B example counts in samples; tandem in iterations of the global batch 128.
TEST(MegatronArgs, SampleBasedTrainingInIterations) {
  const auto cl =
      parse_megatron_args({"--global-batch-size", "128", "--train-samples", "1953125000",
                           "--lr-decay-samples", "1949218748", "--lr-warmup-samples", "3906252"});
  Scenario s;
  apply_overrides(s, cl.overrides);
  apply_sample_based(cl, cl.overrides, s);
  EXPECT_EQ(s.training.train_iters, 15258789);     // 1953125000 // 128 (Megatron floors)
  EXPECT_EQ(s.training.lr_decay_iters, 15228271);  // 15228271.47 rounded
  EXPECT_EQ(s.training.lr_warmup_iters, 30518);    // 30517.59 rounded
  EXPECT_TRUE(cl.not_modelled.empty());
  // GPT-3's example: warmup as a fraction of the decay, iteration-based.
  const auto gpt3 = parse_megatron_args(
      {"--lr-decay-iters", "430000", "--lr-warmup-fraction", ".001", "--train-iters", "500000"});
  Scenario g;
  apply_overrides(g, gpt3.overrides);
  apply_sample_based(gpt3, gpt3.overrides, g);
  EXPECT_EQ(g.training.lr_warmup_iters, 430);
}

TEST(MegatronArgs, SampleAndIterationCountingDoNotMix) {
  const auto cl = parse_megatron_args({"--train-iters", "10", "--train-samples", "1000",
                                       "--lr-warmup-fraction", "0.1", "--lr-warmup-iters", "2"});
  Scenario s;
  const auto vs = violations_of([&] { apply_sample_based(cl, cl.overrides, s); });
  ASSERT_EQ(vs.size(), 3u);
  EXPECT_EQ(vs[0].field, "--train-samples");
  EXPECT_EQ(vs[1].field, "--lr-warmup-iters");
  EXPECT_EQ(vs[2].field, "--lr-warmup-fraction");
}

TEST(MegatronArgs, RequiredArgumentsWithoutAScenarioFile) {
  const auto cl = parse_megatron_args({"--num-layers", "2", "--hidden-size", "64"});
  const auto vs = violations_of([&] { check_megatron_required(cl); });
  ASSERT_EQ(vs.size(), 2u);
  EXPECT_EQ(vs[0].field, "--num-attention-heads");
  EXPECT_EQ(vs[1].field, "--max-position-embeddings");
}

TEST(LaunchScript, ArraysVariablesContinuationsAndTorchrun) {
  const char* script = R"sh(#!/bin/bash
GPUS_PER_NODE=4
NNODES=2   # two nodes
WORLD=$(( $GPUS_PER_NODE * NNODES ))
CKPT=${1:-"/ckpt/x"}
LAYERS=${LAYERS:-12}
export CUDA_DEVICE_MAX_CONNECTIONS=1
mkdir -p "$(dirname "$CKPT")"
MODEL=(
    --num-layers $LAYERS   # a comment inside the array
    --hidden-size 768
)
MODEL+=(--seq-length 1024)
EXTRA=("--split 99,1,0" --save "$CKPT")
DIST="--nproc_per_node $GPUS_PER_NODE --nnodes=$NNODES"
torchrun $DIST \
  pretrain_gpt.py "${MODEL[@]}" ${EXTRA[@]} --world-note "$WORLD ranks"; echo done
)sh";
  const auto l = parse_launch_script(script, "test.sh");
  EXPECT_EQ(l.nproc_per_node, 4);
  EXPECT_EQ(l.nnodes, 2);
  EXPECT_EQ(l.args, (std::vector<std::string>{"--num-layers", "12", "--hidden-size", "768",
                                              "--seq-length", "1024", "--split", "99,1,0", "--save",
                                              "/ckpt/x", "--world-note", "8 ranks"}));
}

TEST(LaunchScript, EmptyExpansionsMakeNoWords) {
  const auto l = parse_launch_script(
      "NONE=()\npython pretrain_gpt.py \"${NONE[@]}\" $UNSET ${NONE[@]} --fp16 \"\" x$UNSET\n",
      "e.sh");
  // As bash: the empty array and unset variable vanish; a quoted "" stays an empty word.
  EXPECT_EQ(l.args, (std::vector<std::string>{"--fp16", "", "x"}));
}

TEST(LaunchScript, RefusesControlFlowAndMissingLaunchNamingTheLine) {
  auto vs = violations_of([] {
    parse_launch_script("A=1\nif [[ $A == 1 ]]; then\n  B=2\nfi\npython pretrain_gpt.py\n", "s.sh");
  });
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(vs[0].field, "s.sh");
  EXPECT_EQ(vs[0].value, "line 2");
  EXPECT_NE(vs[0].rule.find("`if`"), std::string::npos);
  vs = violations_of([] { parse_launch_script("A=(1 2\n", "t.sh"); });
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_NE(vs[0].rule.find("no closing ')'"), std::string::npos) << vs[0].rule;
  vs = violations_of([] { parse_launch_script("echo hi\n", "u.sh"); });
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_NE(vs[0].rule.find("no pretrain_gpt.py"), std::string::npos);
}

// Megatron's examples/gpt3/train_gpt3_175b_distributed.sh, read from the fixture.
TEST(LaunchScript, Gpt3_175bExampleReadsAsMegatronWouldParseIt) {
  const auto l = read_launch_script(kFixtures / "gpt3_175b.sh");
  EXPECT_EQ(l.nproc_per_node, 8);
  EXPECT_EQ(l.nnodes, 1);
  const auto cl = parse_megatron_args(l.args);
  EXPECT_EQ(value_of(cl, "num_layers"), "96");
  EXPECT_EQ(value_of(cl, "tensor_model_parallel_size"), "8");
  EXPECT_EQ(value_of(cl, "pipeline_model_parallel_size"), "16");
  EXPECT_EQ(value_of(cl, "global_batch_size"), "1536");
  EXPECT_EQ(value_of(cl, "lr"), "6.0e-5");
  EXPECT_EQ(value_of(cl, "fp16"), "true");
  EXPECT_TRUE(not_modelled(cl, "--step-batch-size-schedule"));
  EXPECT_TRUE(not_modelled(cl, "--vocab-file"));
  const auto it = std::find(l.args.begin(), l.args.end(), "--step-batch-size-schedule");
  ASSERT_NE(it, l.args.end());
  EXPECT_EQ(*(it + 1), "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536");
}

// Megatron's own script expands its arrays unquoted, so bash splits the batch-size schedule
// into six words and pretrain_gpt.py's argparse refuses the five after the first; tandem
// refuses them the same way (the fixture quotes the expansions to keep it one word).
TEST(LaunchScript, Gpt3_175bAsWrittenByMegatronSplitsTheSchedule) {
  std::ifstream in(kFixtures / "gpt3_175b.sh");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  for (const std::string quoted : {"\"${", "[@]}\""}) {
    const std::string bare = quoted == "\"${" ? "${" : "[@]}";
    for (auto at = text.find(quoted); at != std::string::npos; at = text.find(quoted))
      text.replace(at, quoted.size(), bare);
  }
  const auto l = parse_launch_script(text, "unquoted.sh");
  const auto vs = violations_of([&] { parse_megatron_args(l.args); });
  ASSERT_EQ(vs.size(), 5u);
  EXPECT_EQ(vs[0].field, "2.4B:320");
  EXPECT_NE(vs[0].rule.find("no flag before it"), std::string::npos);
}

TEST(LaunchScript, Llama3_8bExampleSplitsItsFlagValueStrings) {
  const auto l = read_launch_script(kFixtures / "llama3_8b.sh");
  const auto cl = parse_megatron_args(l.args);
  EXPECT_EQ(value_of(cl, "group_query_attention"), "true");
  EXPECT_EQ(value_of(cl, "num_query_groups"), "8");
  EXPECT_EQ(value_of(cl, "normalization"), "RMSNorm");
  EXPECT_EQ(value_of(cl, "rotary_base"), "1000000");
  EXPECT_EQ(value_of(cl, "vocab_size"), "128256");          // from the string "--vocab-size 128256"
  EXPECT_EQ(value_of(cl, "overlap_param_gather"), "true");  // appended with +=
  EXPECT_EQ(value_of(cl, "fp8"), "hybrid");                 // FP8 flags are scenario fields
  EXPECT_EQ(value_of(cl, "fp8_amax_history_len"), "1024");
  EXPECT_EQ(value_of(cl, "fp8_amax_compute_algo"), "max");
  EXPECT_EQ(value_of(cl, "fp8_param_gather"), "true");
  EXPECT_TRUE(not_modelled(cl, "--mock-data"));
  EXPECT_EQ(value_of(cl, "grad_reduce_in_bf16"), "true");  // the script's --grad-reduce-in-bf16
  EXPECT_EQ(value_of(cl, "cross_entropy_loss_fusion"), "true");  // modelled since 2026-11-29
}

// Megatron-Core's gradient-buffer flags set the scenario's fields (they were "not modelled").
TEST(MegatronArgs, GradientBufferFlagsAreModelled) {
  const auto cl = parse_megatron_args(
      {"--grad-reduce-in-bf16", "--ddp-num-buckets", "4", "--ddp-pad-buckets-for-high-nccl-busbw"});
  EXPECT_TRUE(cl.not_modelled.empty());
  EXPECT_EQ(value_of(cl, "grad_reduce_in_bf16"), "true");
  EXPECT_EQ(value_of(cl, "ddp_num_buckets"), "4");
  EXPECT_EQ(value_of(cl, "ddp_pad_buckets_for_high_nccl_busbw"), "true");
}

// --transformer-impl is Megatron's: modelled, and a command line without a scenario file
// starts from Megatron's default, transformer_engine (whose attention runs fused where
// tandem's fused op can: no attention dropout).
TEST(MegatronArgs, TransformerImplIsModelledWithMegatronsDefault) {
  const auto cl = parse_megatron_args({"--transformer-impl", "local"});
  EXPECT_TRUE(cl.not_modelled.empty());
  EXPECT_EQ(value_of(cl, "transformer_impl"), "local");
  const Scenario s = megatron_default_scenario();
  EXPECT_EQ(s.model.transformer_impl, "transformer_engine");
  EXPECT_TRUE(transformer_engine_modules(s.model));
  EXPECT_TRUE(runs_fused_attention(s.model));
  Scenario dropout = s;
  dropout.model.attention_dropout = 0.1;
  EXPECT_FALSE(runs_fused_attention(dropout.model));  // TE's unfused backend
  Scenario local = s;
  local.model.transformer_impl = "local";
  EXPECT_FALSE(runs_fused_attention(local.model));
  local.model.use_flash_attn = true;
  EXPECT_TRUE(runs_fused_attention(local.model));
}

// --attention-backend is Megatron-Core's AttnBackend: modelled. Under Transformer Engine it
// picks DotProductAttention's backend: "unfused" runs the unfused op, "flash" the flash-attn
// package's kernel, "fused" cuDNN's, and "auto" what TE picks, cuDNN's from Hopper (compute
// capability 90) on and flash-attn's before. Megatron's local layers run flash-attn's kernel
// with use_flash_attn whatever the backend says.
TEST(MegatronArgs, AttentionBackendPicksTransformerEnginesKernel) {
  const auto cl = parse_megatron_args({"--attention-backend", "flash"});
  EXPECT_TRUE(cl.not_modelled.empty());
  EXPECT_EQ(value_of(cl, "attention_backend"), "flash");
  Scenario s = megatron_default_scenario();
  EXPECT_EQ(s.model.attention_backend, "auto");  // Megatron's default
  using L = FusedAttentionLibrary;
  EXPECT_EQ(fused_attention_library(s.model, 90), L::cudnn);
  EXPECT_EQ(fused_attention_library(s.model, 100), L::cudnn);
  EXPECT_EQ(fused_attention_library(s.model, 80), L::flash_attn);
  EXPECT_EQ(fused_attention_library(s.model, std::nullopt), L::cudnn);
  s.model.attention_backend = "flash";
  EXPECT_TRUE(runs_fused_attention(s.model));
  EXPECT_EQ(fused_attention_library(s.model, 90), L::flash_attn);
  s.model.attention_backend = "fused";
  EXPECT_EQ(fused_attention_library(s.model, 80), L::cudnn);
  s.model.attention_backend = "unfused";
  EXPECT_FALSE(runs_fused_attention(s.model));
  Scenario local = megatron_default_scenario();
  local.model.transformer_impl = "local";
  local.model.use_flash_attn = true;
  local.model.attention_backend = "fused";  // ignored by the local layers, as in Megatron
  EXPECT_EQ(fused_attention_library(local.model, 90), L::flash_attn);
}

}  // namespace
}  // namespace tandem
