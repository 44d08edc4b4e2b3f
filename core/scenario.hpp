// Scenario: model + parallelism + training + cluster, the one input every tandem command
// reads. Field names are Megatron-LM's argument names (tensor_model_parallel_size,
// micro_batch_size, …) so a Megatron launch script translates line by line; in JSON they
// sit under four sections, and on the command line the same names in kebab case
// (--tensor-model-parallel-size 8) override the file.
//
//   {"model":       {"num_layers": 24, "hidden_size": 1024, …},
//    "parallelism": {"tensor_model_parallel_size": 2, …},
//    "training":    {"micro_batch_size": 1, "global_batch_size": 64, …},
//    "cluster":     {"world_size": 8, "gpus_per_node": 8}}
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/fp8_config.hpp"
#include "core/mla_config.hpp"
#include "core/parallel_context.hpp"

namespace tandem {

struct ModelConfig {
  int num_layers = 24;
  int hidden_size = 1024;
  int num_attention_heads = 16;
  std::optional<int> ffn_hidden_size;  // default ffn_hidden_size(s)
  std::optional<int> kv_channels;      // default hidden_size / heads
  int seq_length = 1024;
  std::optional<int> max_position_embeddings;  // default seq_length
  int vocab_size = 50257;
  int make_vocab_size_divisible_by = 128;  // padded to a multiple of this · tp
  // The architecture of today's dense models (Llama, Mistral, Qwen, ...), under Megatron's
  // names. Megatron's defaults are GPT-2's: learned positions, LayerNorm, GeLU 4h MLP with
  // biases, tied input and output embeddings, one key/value head per query head.
  bool group_query_attention = false;
  int num_query_groups = 1;                 // key/value heads, with group_query_attention
  bool swiglu = false;                      // gated SiLU MLP (two input projections)
  std::string normalization = "LayerNorm";  // LayerNorm | RMSNorm
  double norm_epsilon = 1e-5;
  std::string position_embedding_type = "learned_absolute";  // learned_absolute | rope | none
  int rotary_base = 10000;
  double rotary_percent = 1.0;  // fraction of each head's channels rotated
  bool untie_embeddings_and_output_weights = false;
  bool disable_bias_linear = false;  // Megatron's add_bias_linear = false
  bool use_flash_attn = false;
  // Megatron's --transformer-impl: "transformer_engine" (Megatron's default, what
  // Megatron-Core runs) builds each layer from Transformer Engine's modules — the layer norm
  // inside the following linear's module (LayerNormLinear), fused attention
  // (DotProductAttention), each module one framework call whose kernels TE launches from its
  // C++ — ; "local" is Megatron's own layers, one framework call per kernel, attention
  // unfused unless use_flash_attn. tandem's scenarios default to "local" (the published runs
  // of 2021-22 predate TE); a Megatron command line without a scenario starts from
  // Megatron's default.
  std::string transformer_impl = "local";
  // Megatron-Core's --attention-backend (AttnBackend): which of Transformer Engine's
  // DotProductAttention backends runs the core under transformer_engine — "flash" (the
  // flash-attn package's kernels), "fused" (cuDNN's fused attention), "unfused" (TE's own
  // softmax and batched GEMMs) or "auto" (TE picks: cuDNN's from compute capability 9.0,
  // the flash-attn package's on Ampere); "local" needs transformer_impl local. The math is
  // the same fused op on every binding; the simulator prices the chosen library's kernel.
  std::string attention_backend = "auto";
  // Megatron-Core's --qk-layernorm: the normalization (LayerNorm or RMSNorm, as the
  // layer's) over each query and key head, one kv_channels-wide weight each for q and k.
  bool qk_layernorm = false;
  // Megatron's --attention-dropout on the attention probabilities. Megatron's default is
  // 0.1; tandem's is 0 (none), so a scenario that wants Megatron's says so.
  double attention_dropout = 0.0;
  // Megatron's --hidden-dropout after the embedding and on each layer's attention and MLP
  // output (Megatron's default 0.1; tandem's 0). Not with context parallelism.
  double hidden_dropout = 0.0;
  // Megatron-Core's multi-token prediction (DeepSeek-V3): mtp_num_layers depths after the
  // decoder, each the shared embedding of the tokens k ahead and the hidden states of the
  // depth before through enorm / hnorm, eh_proj (2h -> h) and one transformer layer of the
  // decoder's last layer's kind, its own final norm and the shared output layer; their mean
  // loss, times mtp_loss_scaling_factor (absent: Megatron's 0.1), joins the training loss.
  // Absent or 0: no MTP. model/multi_token_prediction.hpp.
  std::optional<int> mtp_num_layers;
  std::optional<double> mtp_loss_scaling_factor;
  // Mixture of experts, under Megatron-Core's names (absent num_experts: a dense model).
  // Every moe_layer_freq-th layer (0, freq, 2·freq, …), or the layers moe_layer_pattern
  // marks 1 (Megatron's list form of moe_layer_freq), replaces its MLP by num_experts
  // experts of width moe_ffn_hidden_size, moe_router_topk of which each token goes to, plus
  // a shared expert of moe_shared_expert_intermediate_size that every token goes through.
  std::optional<int> num_experts;
  int moe_router_topk = 2;
  std::optional<int> moe_ffn_hidden_size;  // default ffn_hidden_size(s)
  std::optional<int> moe_shared_expert_intermediate_size;
  int moe_layer_freq = 1;
  std::vector<int> moe_layer_pattern;  // one 0 / 1 per layer; empty: moe_layer_freq decides
  // The router and the dispatcher, under Megatron-Core's names and with its defaults.
  // aux_loss | seq_aux_loss | sinkhorn | none
  std::string moe_router_load_balancing_type = "aux_loss";
  double moe_aux_loss_coeff = 0.0;
  bool moe_router_pre_softmax = false;
  bool moe_router_force_load_balancing = false;         // experts by position (benchmarks)
  std::string moe_token_dispatcher_type = "allgather";  // allgather | alltoall | flex
  bool moe_grouped_gemm = false;
  // DeepSeek-V3's router: sigmoid scores, the aux-loss-free expert bias (moved by
  // moe_router_bias_update_rate each optimizer step toward balanced counts), group-limited
  // routing (num_groups groups, the k experts inside the group_topk best), and a scaling
  // factor on the gates.
  std::string moe_router_score_function = "softmax";  // softmax | sigmoid
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  std::optional<int> moe_router_num_groups;
  std::optional<int> moe_router_group_topk;
  std::optional<double> moe_router_topk_scaling_factor;  // absent: none
  // Token dropping: each expert takes at most ceil(T·k / E · factor) of a rank's T tokens,
  // dropping by gate (probs) or position; padded, every expert gets exactly that many rows.
  std::optional<double> moe_expert_capacity_factor;  // absent: dropless
  std::string moe_token_drop_policy = "probs";       // probs | position
  bool moe_pad_expert_input_to_capacity = false;
  // Multi-latent attention (DeepSeek-V2/V3): core/mla_config.hpp; off unless
  // mla.multi_latent_attention.
  MlaConfig mla;

  bool operator==(const ModelConfig&) const = default;
};

// Multi-token prediction depths (0: none) and the weight of their mean loss.
inline int mtp_depths(const ModelConfig& m) {
  return m.mtp_num_layers.value_or(0);
}
inline double mtp_loss_scaling_factor(const ModelConfig& m) {
  return m.mtp_loss_scaling_factor.value_or(0.1);  // Megatron's TransformerConfig default
}

// Whether the layers are Transformer Engine's modules (transformer_impl).
inline bool transformer_engine_modules(const ModelConfig& m) {
  return m.transformer_impl == "transformer_engine";
}
// Whether attention runs on the fused op: use_flash_attn, or Transformer Engine's
// DotProductAttention — which picks its fused backend — when there is no attention dropout
// (tandem's fused op has none; with dropout the core runs TE's unfused backend).
inline bool runs_fused_attention(const ModelConfig& m) {
  return m.use_flash_attn || (transformer_engine_modules(m) && m.attention_backend != "unfused" &&
                              m.attention_dropout == 0);
}

// The library whose kernel runs the fused attention op on a GPU of compute capability
// `capability` (major · 10 + minor; absent: not a known GPU): the flash-attn package's where
// Megatron's local layers run use_flash_attn or TE is told "flash", and where TE's "auto"
// choice meets a GPU before Hopper (TE 1.2 onwards prefers cuDNN's on Hopper and later);
// cuDNN's otherwise.
enum class FusedAttentionLibrary { flash_attn, cudnn };
inline FusedAttentionLibrary fused_attention_library(const ModelConfig& m,
                                                     std::optional<int> capability) {
  if (!transformer_engine_modules(m) || m.attention_backend == "flash")
    return FusedAttentionLibrary::flash_attn;
  if (m.attention_backend == "fused") return FusedAttentionLibrary::cudnn;
  return capability && *capability < 90 ? FusedAttentionLibrary::flash_attn
                                        : FusedAttentionLibrary::cudnn;
}

struct ParallelismConfig {
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  std::optional<int> expert_tensor_parallel_size;  // default tensor_model_parallel_size
  // Interleaving: give one of the two (Megatron accepts either).
  std::optional<int> num_layers_per_virtual_pipeline_stage;
  std::optional<int> virtual_pipeline_model_parallel_size;
  // Uneven and flexible pipeline stages (core/pipeline_layout.hpp): the first / last pp
  // rank's layer count, the embedding / loss counted as a layer of the even split, or a
  // layout string such as "Et*3|(tt|)*29,L" (E embedding, t layer, L loss, | stage end).
  std::optional<int> decoder_first_pipeline_num_layers;
  std::optional<int> decoder_last_pipeline_num_layers;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  std::optional<std::string> pipeline_model_parallel_layout;
  std::optional<int> microbatch_group_size_per_vp_stage;  // default pp
  // auto | none | gpipe | 1f1b | interleaved | zb-h1 (tandem's own key: Megatron-LM has no
  // zero-bubble schedule; "auto" never picks zb-h1).
  std::string pipeline_schedule = "auto";
  // Megatron-Core's --delay-wgrad-compute: each backward's weight gradients run after the
  // p2p call that sends its input gradient on (schedules/schedule.hpp).
  bool delay_wgrad_compute = false;
  std::string order = "tp-cp-ep-dp-pp";  // rank generator order, tp fastest varying
  // How context parallelism moves keys and values: p2p (a ring, Megatron's default) |
  // all_gather | a2a | a2a+p2p (Megatron accepts all four; the step runs the first two).
  std::string cp_comm_type = "p2p";
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  // How the distributed optimizer reduces the gradients: reduce_scatter (Megatron-Core: each
  // rank receives its slice of the sum) or all_reduce (Megatron-DeepSpeed's BF16_Optimizer:
  // every rank receives the whole sum and steps its slice; the parameters are all-gathered
  // after the step either way).
  std::string distributed_optimizer_grad_reduce = "reduce_scatter";
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  // Megatron-Core's --tp-comm-overlap: with sequence parallelism, the tensor-parallel
  // all-gathers and reduce-scatters of the linear layers run in ring steps under their
  // GEMMs (Transformer Engine's userbuffers overlap).
  bool tp_comm_overlap = false;
  // Megatron-Core's --overlap-moe-expert-parallel-comm, its combined 1F1B: one microbatch's
  // forward runs with another's backward, each handing the host to the other where it has
  // issued an expert-parallel all-to-all, so the all-to-all runs under the other's compute
  // (core/host_turns.hpp). Without pipelining, or interleaved (one warm-up forward more).
  bool overlap_moe_expert_parallel_comm = false;
  // Megatron-Core's overlap_p2p_comm (on unless --no-overlap-p2p-communication; it counts on
  // the interleaved schedule only): the pipeline's sends and receives are posted after each
  // forward and backward and waited for before the next of its direction, not batched and
  // waited for at once (schedules/schedule.hpp).
  bool overlap_p2p_comm = true;
  // Elements per dp gradient bucket (with overlap_grad_reduce). Unset: Megatron-Core's
  // max(40M, 1M · dp·cp), or this rank's parameters / ddp_num_buckets.
  std::optional<std::int64_t> ddp_bucket_size;
  std::optional<int> ddp_num_buckets;  // Megatron's alternative to ddp_bucket_size
  // With the distributed optimizer every bucket is padded to lcm(dp·cp, 128); with this, to
  // lcm(dp·cp, 128, 2^16), so NCCL's per-rank message is a large power of two.
  bool ddp_pad_buckets_for_high_nccl_busbw = false;
  // Megatron's variable_seq_lengths: every pipeline send is preceded by its shape, and the
  // receiver allocates from it (microbatches whose activations differ in shape).
  bool variable_seq_lengths = false;
  // Megatron-LM's scatter_gather_tensors_in_pipeline (on by default there until sequence
  // parallelism replaced it): without sequence parallelism every tp rank holds the whole
  // activation, so each sends only its 1/tp slice and the receiver all-gathers over tp.
  bool scatter_gather_tensors_in_pipeline = false;

  bool operator==(const ParallelismConfig&) const = default;
};

struct TrainingConfig {
  int micro_batch_size = 1;
  int global_batch_size = 8;
  std::vector<std::int64_t> rampup_batch_size;  // empty, or {start, increment, samples}
  std::int64_t train_iters = 10;
  double lr = 1.5e-4;
  double min_lr = 1.0e-5;
  std::int64_t lr_warmup_iters = 0;
  std::optional<std::int64_t> lr_decay_iters;  // default train_iters
  std::string lr_decay_style = "cosine";       // constant | linear | cosine
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  std::int64_t seed = 1234;
  std::string recompute_granularity = "none";  // none | selective | full
  std::string recompute_method = "uniform";    // uniform | block (with full)
  int recompute_num_layers = 1;
  std::int64_t log_interval = 1;
  std::int64_t eval_interval = 1000;
  std::int64_t eval_iters = 10;
  std::int64_t save_interval = 0;  // 0: no periodic checkpoints
  bool bf16 = false;
  bool fp16 = false;
  // Megatron's loss scaling (megatron/core/optimizer/grad_scaler.py): with fp16 a dynamic
  // scale — initial_loss_scale, halved (not below min_loss_scale) once `hysteresis` steps
  // have had non-finite gradients, doubled after loss_scale_window steps without — unless
  // loss_scale fixes it (with fp16 or bf16, as Megatron's ConstantGradScaler). A step whose
  // unscaled gradients hold an inf or a NaN anywhere is skipped (train/grad_scaler.hpp).
  std::optional<double> loss_scale;          // constant; absent: dynamic under fp16
  double initial_loss_scale = 4294967296.0;  // 2^32, Megatron's default
  double min_loss_scale = 1.0;
  std::int64_t loss_scale_window = 1000;
  std::int64_t hysteresis = 2;
  // Megatron's: gradients accumulated and data-parallel reduced in fp32. Off, fp16 runs
  // reduce 16-bit gradients; bf16 runs reduce in fp32 (Megatron forces it on) unless
  // grad_reduce_in_bf16.
  bool accumulate_allreduce_grads_in_fp32 = false;
  // Megatron's --grad-reduce-in-bf16: with bf16, gradients are reduced over dp in bf16 (half
  // the bytes) instead of fp32; the optimizer still steps on fp32 gradients. Without bf16
  // it changes nothing (Megatron reads it only under --bf16).
  bool grad_reduce_in_bf16 = false;
  // Megatron's: the weight-gradient GEMMs accumulate into the gradient buffer (beta = 1).
  // Off (--no-gradient-accumulation-fusion; Megatron-LM before February 2022 and
  // Megatron-DeepSpeed always), each GEMM writes a fresh gradient that a separate kernel adds.
  bool gradient_accumulation_fusion = true;
  // Megatron-Core's --defer-embedding-wgrad-compute: the last pipeline stage keeps the
  // output layer's input and output gradient of each microbatch's backward (the first
  // wgrad_deferral_limit of them; 0: all) and runs their weight-gradient GEMMs after the
  // schedule, in the pipeline flush (schedules.py finish_embedding_wgrad_compute).
  bool defer_embedding_wgrad_compute = false;
  int wgrad_deferral_limit = 0;
  // Megatron's async_tensor_model_parallel_allreduce (Megatron-LM 2021-2024 and
  // Megatron-DeepSpeed; always on in today's Megatron-Core): without sequence parallelism, a
  // column-parallel layer's backward all-reduces its input gradient while the weight
  // gradient is computed. Off (--no-async-tensor-model-parallel-allreduce), the all-reduce
  // ends before the weight-gradient GEMM starts.
  bool async_tensor_model_parallel_allreduce = true;
  // Megatron's bias_gelu_fusion (--no-bias-gelu-fusion turns it off): fc1's bias is added
  // inside the GeLU kernel. With SwiGLU or without biases there is nothing to fuse.
  bool bias_gelu_fusion = true;
  // Megatron-Core's cross_entropy_loss_fusion (--cross-entropy-loss-fusion): the vocab-parallel
  // loss as fused kernels (megatron/core/fusions/fused_cross_entropy.py), the target logit
  // and the sum of exponentials all-reduced over tp as one tensor (two all-reduces, not
  // three); cross_entropy_fusion_impl "native" (those kernels) or "te" (Transformer Engine's
  // parallel cross entropy). The loss is the same; what it costs is the binding's business.
  bool cross_entropy_loss_fusion = false;
  std::string cross_entropy_fusion_impl = "native";
  // Megatron's bias_dropout_fusion (--no-bias-dropout-fusion): the attention projection's
  // and fc2's bias is added inside the residual add (bias-dropout-add; tandem has no hidden
  // dropout). Off, a bias kernel and an add kernel.
  bool bias_dropout_fusion = true;
  // Megatron-DeepSpeed's --deepspeed: DeepSpeed's engine and its fp16 optimizer over
  // flattened parameters. Only the simulator reads it (the optimizer step's host cost).
  bool deepspeed = false;
  // tandem's own: the host waits for the GPU at the start of every transformer layer's
  // forward, recomputed forward and backward, as a per-layer profiler makes it (vTrain's
  // CUPTI timestamps around each layer, which its measured runs are composed from). Off
  // in Megatron, whose host runs ahead of the GPU.
  bool host_sync_per_layer = false;
  // tandem's own: a per-layer profiler's timestamp at the start of every transformer
  // layer's forward, recomputed forward and backward costs the host the preset's
  // host_layer_timestamp_us (vTrain's cuptiActivityFlushAll(0), a host-side flush of
  // CUPTI's activity buffers that does not synchronize the device). Off in Megatron.
  bool host_layer_timestamps = false;
  // tandem's own: the host waits for the GPU before the output layer's forward and after
  // its backward, as where a profile is composed of the layers' and the non-layer part's
  // (vTrain's rows: the output layer's GPU time does not hide behind the layers' issue).
  // Off in Megatron.
  bool host_sync_output_layer = false;
  // Megatron's --fp8-* flags (core/fp8_config.hpp); off unless fp8.format is set.
  Fp8Config fp8;

  bool operator==(const TrainingConfig&) const = default;
};

struct ClusterConfig {
  int world_size = 1;         // number of ranks (GPUs, or MPI processes on cpu)
  int gpus_per_node = 8;      // ranks per node; rank r sits on node r / gpus_per_node
  std::string topology = "";  // a topology preset name, e.g. "dgx-a100-80g" (simulator)

  bool operator==(const ClusterConfig&) const = default;
};

struct Scenario {
  std::string name = "default";
  std::string description;  // free text: what the scenario is for
  std::string source;       // provenance of the numbers (paper, table, launch script)
  ModelConfig model;
  ParallelismConfig parallelism;
  TrainingConfig training;
  ClusterConfig cluster;

  bool operator==(const Scenario&) const = default;
};

// One settable field: its Megatron name, JSON section, the flag spelling, a help line
// and the kind of value it takes. The table drives JSON parsing, flag overrides, help
// text and unknown-key suggestions, so the four can never disagree.
struct ScenarioField {
  std::string section;  // "model", "parallelism", "training", "cluster"
  std::string name;     // "tensor_model_parallel_size"
  std::string flag;     // "--tensor-model-parallel-size" (Megatron's flag where it differs)
  std::string type;     // "int", "float", "bool", "string", "int list"
  std::string help;
  // Other names accepted for the field in JSON and as flags, e.g. Megatron's newer
  // "num_virtual_stages_per_pipeline_rank" for virtual_pipeline_model_parallel_size.
  std::vector<std::string> aliases;
};
const std::vector<ScenarioField>& scenario_fields();

// A small GPT (GPT-2 medium shape) on 8 ranks, TP 2 × PP 2 × DP 2 — what tandem runs
// when given no scenario.
Scenario default_scenario();

// Parse a scenario from JSON: top-level "name", "description", "source" (provenance) and
// the sections "model", "parallelism", "training", "cluster". Unknown keys are errors that
// suggest the closest known key (or name the section a misplaced key belongs in); wrong
// types and out-of-range values name the field ("model.num_layers"), the value and the
// rule. All are thrown together as one ConfigError. `source` names the file in messages.
// Fields absent from the JSON keep the defaults above. Cross-field rules are validate()'s.
Scenario parse_scenario(const nlohmann::json& j, std::string_view source = "scenario");
// A missing, unreadable or malformed file (with line and column) is a ConfigError whose
// field is the path.
Scenario load_scenario(const std::filesystem::path& path);
nlohmann::json to_json(const Scenario& s);

// Apply flag overrides given as (key, value text) pairs. The key is the field name
// ("tensor_model_parallel_size"), its flag ("--tensor-model-parallel-size"), an alias, or
// "section.name"; "name" renames the scenario. Values: "8", "0.5", "cosine",
// "true"/"false"/"1"/"0", lists as "16,16,1000" or "16 16 1000", "none" to unset an
// optional. All or nothing: on any bad pair `s` is unchanged and every bad pair is reported.
void apply_overrides(Scenario& s, const std::vector<std::pair<std::string, std::string>>& kv);

// Cross-field rules (DESIGN §4 and Megatron's argument checks). Throws ConfigError
// carrying every violation.
void validate(const Scenario& s);

// Derived quantities (valid after validate()).
int data_parallel_size(const Scenario& s);     // world / (tp · pp · cp)
int virtual_pipeline_size(const Scenario& s);  // 1 when not interleaved
int padded_vocab_size(const Scenario& s);      // vocab rounded up to divisible_by · tp
// Megatron's default: 4 · hidden, or with swiglu 2/3 of that rounded down to a multiple of 64.
int ffn_hidden_size(const Scenario& s);
// Whether layer i (0-based) is a mixture-of-experts layer: never in a dense model; else as
// moe_layer_pattern marks it, or when i mod moe_layer_freq = 0 (Megatron's integer form).
bool is_moe_layer(const Scenario& s, int layer);
// How many layers are.
int num_moe_layers(const Scenario& s);
// An expert's MLP width: moe_ffn_hidden_size, else ffn_hidden_size(s).
int moe_ffn_hidden_size(const Scenario& s);

// Key/value heads: num_query_groups with group_query_attention, else one per attention head.
int num_query_groups(const Scenario& s);
ParallelSizes parallel_sizes(const Scenario& s);
// The schedule kind a scenario runs: "none" (pp 1), "1f1b", "interleaved", or as forced.
std::string effective_pipeline_schedule(const Scenario& s);

// Suggest the closest of `known` to `word` (edit distance with transpositions, ignoring
// case and '-' vs '_'; a word it truncates, as "seq_len" for "seq_length", also counts),
// or "" when nothing is within about a third of the word's length.
std::string closest_match(std::string_view word, const std::vector<std::string>& known);

}  // namespace tandem
