// The scenario's field registry: one descriptor per field (name, section, flag, type, help,
// its own range, and the member it reads and writes), built from pointers to the member so
// JSON parsing, flag overrides, help text and unknown-key suggestions cannot disagree.
// The defaults are the member initializers in scenario.hpp; default_scenario() is here.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/fp8_fields.hpp"
#include "core/mla_fields.hpp"
#include "core/scenario_detail.hpp"
#include "core/scenario_values.hpp"

namespace tandem {
namespace scenario_detail {
namespace {

std::string number_text(double x) {
  if (x == std::trunc(x) && std::abs(x) < 1e15) return std::to_string(std::llround(x));
  return cat(x);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : std::string(sep)) + item;
  return out;
}

std::string broken_number_rule(const Rule& r, double x) {
  const bool low = r.min && (r.min_open ? x <= *r.min : x < *r.min);
  const bool high = (r.max_open && x >= *r.max_open) || (r.max && x > *r.max);
  if (!low && !high) return "";
  if (r.min && (r.max_open || r.max))
    return cat("must lie in ", r.min_open ? "(" : "[", number_text(*r.min), ", ",
               number_text(r.max ? *r.max : *r.max_open), r.max ? "]" : ")");
  if (r.min) return cat("must be ", r.min_open ? "> " : "≥ ", number_text(*r.min));
  return cat("must be < ", number_text(*r.max_open));
}

Rule at_least(double min) {
  return Rule{.min = min};
}
Rule positive() {
  return at_least(1);
}
Rule non_negative() {
  return at_least(0);
}
Rule above(double min) {
  return Rule{.min = min, .min_open = true};
}
Rule unit_interval() {
  return Rule{.min = 0.0, .max_open = 1.0};
}
Rule choices(std::vector<std::string> allowed) {
  return Rule{.one_of = std::move(allowed)};
}

// Megatron's --rampup-batch-size <start> <increment> <samples>.
std::string broken_rampup(const json& v) {
  if (v.empty()) return "";
  if (v.size() != 3) return "must be empty or exactly 3 integers: start increment samples";
  if (v[0].get<std::int64_t>() < 1) return "start batch size must be ≥ 1";
  if (v[1].get<std::int64_t>() < 1) return "batch size increment must be ≥ 1";
  // Megatron divides by the samples per increment: a zero-sample ramp crashes it.
  if (v[2].get<std::int64_t>() < 1) return "ramp-up samples must be ≥ 1";
  return "";
}

template <class Sec>
constexpr const char* section_name();
template <>
constexpr const char* section_name<ModelConfig>() {
  return "model";
}
template <>
constexpr const char* section_name<ParallelismConfig>() {
  return "parallelism";
}
template <>
constexpr const char* section_name<TrainingConfig>() {
  return "training";
}
template <>
constexpr const char* section_name<ClusterConfig>() {
  return "cluster";
}

struct FieldSpec {
  std::string name;
  std::string help;
  Rule rule{};
  std::vector<std::string> aliases{};
  std::string flag{};  // Megatron's flag when it is not the kebab-case name
};

// One descriptor from pointers to the section and the member: the type, section name and
// both directions of conversion all follow from the two pointers.
template <class Sec, class T>
FieldDef make_field(Sec Scenario::*section, T Sec::*member, FieldSpec spec) {
  FieldDef f;
  f.meta = {section_name<Sec>(),
            spec.name,
            spec.flag.empty() ? kebab_flag(spec.name) : spec.flag,
            type_name<typename Unoptional<T>::type>(),
            spec.help,
            spec.aliases};
  f.rule = spec.rule;
  f.get = [=](const Scenario& s) { return encode(s.*section.*member); };
  f.set = [=, rule = spec.rule](Scenario& s, const json& j) {
    T value{};
    if (auto err = decode(j, value); !err.empty()) return err;
    if (auto err = broken_rule(rule, encode(value)); !err.empty()) return err;
    s.*section.*member = std::move(value);
    return std::string();
  };
  f.set_text = [set = f.set](Scenario& s, std::string_view text) {
    auto j = text_to_json(text, static_cast<const T*>(nullptr));
    if (!j) return std::string(text_rule(static_cast<const T*>(nullptr)));
    return set(s, *j);
  };
  return f;
}

// Megatron's list form of --moe-layer-freq, a Python expression of 0/1 lists joined by +
// and repeated by * (e.g. "[0]*3+[1]*58", "([1]*3+[0])*4"): the list, or nullopt.
class LayerPatternParser {
 public:
  explicit LayerPatternParser(std::string_view text) : text_(text) {}
  std::optional<std::vector<int>> parse() {
    auto list = sum();
    skip();
    if (!list || at_ < text_.size()) return std::nullopt;
    return list;
  }

 private:
  std::optional<std::vector<int>> sum() {
    auto list = product();
    while (list && eat('+')) {
      auto more = product();
      if (!more) return std::nullopt;
      list->insert(list->end(), more->begin(), more->end());
    }
    return list;
  }
  std::optional<std::vector<int>> product() {
    auto list = atom();
    while (list && eat('*')) {
      const auto times = integer();
      if (!times || *times < 0 || *times * list->size() > 1'000'000) return std::nullopt;
      std::vector<int> repeated;
      for (std::int64_t k = 0; k < *times; ++k)
        repeated.insert(repeated.end(), list->begin(), list->end());
      list = std::move(repeated);
    }
    return list;
  }
  std::optional<std::vector<int>> atom() {
    if (eat('(')) {
      auto list = sum();
      return list && eat(')') ? list : std::nullopt;
    }
    if (!eat('[')) return std::nullopt;
    std::vector<int> list;
    if (eat(']')) return list;
    do {
      const auto x = integer();
      if (!x) return std::nullopt;
      list.push_back(static_cast<int>(*x));
    } while (eat(','));
    return eat(']') ? std::optional(list) : std::nullopt;
  }
  std::optional<std::int64_t> integer() {
    skip();
    std::int64_t x = 0;
    const char* begin = text_.data() + at_;
    const auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), x);
    if (ec != std::errc() || x > 1'000'000) return std::nullopt;
    at_ += static_cast<std::size_t>(end - begin);
    return x;
  }
  bool eat(char c) {
    skip();
    if (at_ >= text_.size() || text_[at_] != c) return false;
    ++at_;
    return true;
  }
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  std::string_view text_;
  std::size_t at_ = 0;
};

std::string broken_moe_layer_freq(const json& v) {
  if (v.is_number()) return v.get<double>() >= 1 ? "" : "must be ≥ 1";
  for (const auto& x : v)
    if (!x.is_number_integer() || (x.get<std::int64_t>() != 0 && x.get<std::int64_t>() != 1))
      return "a list must hold only 0 and 1, one per layer";
  return "";
}

// moe_layer_freq takes Megatron's two forms: an integer k (every k-th layer from layer 0)
// or a list with one 0 / 1 per layer, written out in JSON or as Megatron's expression.
FieldDef moe_layer_freq_field() {
  FieldDef f;
  f.meta = {"model",
            "moe_layer_freq",
            "--moe-layer-freq",
            "int or 0/1 list",
            "every this-many-th layer is an MoE layer (from layer 0), or a 0/1 per layer: "
            "[1,0,1,0], or Megatron's \"[0]*3+[1]*58\"",
            {}};
  f.rule = Rule{.custom = broken_moe_layer_freq};
  f.get = [](const Scenario& s) {
    return s.model.moe_layer_pattern.empty() ? json(s.model.moe_layer_freq)
                                             : json(s.model.moe_layer_pattern);
  };
  f.set = [](Scenario& s, const json& j) {
    if (j.is_array()) {
      if (auto err = broken_moe_layer_freq(j); !err.empty()) return err;
      s.model.moe_layer_pattern = j.get<std::vector<int>>();
      s.model.moe_layer_freq = 1;
      return std::string();
    }
    if (!j.is_number())
      return "must be an integer or a list of 0 and 1, one per layer, not a JSON " +
             std::string(j.type_name());
    int every = 0;
    if (auto err = decode(j, every); !err.empty()) return err;
    if (auto err = broken_moe_layer_freq(json(every)); !err.empty()) return err;
    s.model.moe_layer_freq = every;
    s.model.moe_layer_pattern.clear();
    return std::string();
  };
  f.set_text = [set = f.set](Scenario& s, std::string_view text) {
    if (auto n = number_from_text(text)) return set(s, *n);
    const auto list = LayerPatternParser(text).parse();
    if (!list)
      return std::string(
          "must be an integer or a list of 0 and 1 per layer, e.g. \"[0]*3+[1]*58\"");
    return set(s, json(*list));
  };
  return f;
}

std::vector<FieldDef> model_fields() {
  using M = ModelConfig;
  constexpr auto m = &Scenario::model;
  return {
      make_field(m, &M::num_layers, {"num_layers", "number of transformer layers", positive()}),
      make_field(m, &M::hidden_size, {"hidden_size", "hidden size h", positive()}),
      make_field(m, &M::num_attention_heads,
                 {"num_attention_heads", "number of attention heads", positive()}),
      make_field(
          m, &M::ffn_hidden_size,
          {"ffn_hidden_size",
           "MLP hidden width (default 4 × hidden_size; swiglu: 2/3 of it, to 64)", positive()}),
      make_field(
          m, &M::kv_channels,
          {"kv_channels", "per-head projection width (default hidden_size / heads)", positive()}),
      make_field(m, &M::seq_length, {"seq_length", "sequence length in tokens", positive()}),
      make_field(
          m, &M::max_position_embeddings,
          {"max_position_embeddings", "position table size (default seq_length)", positive()}),
      make_field(m, &M::vocab_size, {"vocab_size", "tokenizer vocabulary size", positive()}),
      make_field(
          m, &M::make_vocab_size_divisible_by,
          {"make_vocab_size_divisible_by",
           "pad the vocabulary to a multiple of this × tensor_model_parallel_size", positive()}),
      make_field(
          m, &M::group_query_attention,
          {"group_query_attention", "grouped-query attention: num_query_groups key/value heads"}),
      make_field(m, &M::num_query_groups,
                 {"num_query_groups", "key/value heads with group_query_attention", positive()}),
      make_field(m, &M::swiglu,
                 {"swiglu", "gated SiLU MLP (default ffn 2/3 · 4h, rounded down to 64)"}),
      make_field(m, &M::normalization,
                 {"normalization", "LayerNorm | RMSNorm", choices({"LayerNorm", "RMSNorm"})}),
      make_field(m, &M::norm_epsilon, {"norm_epsilon", "normalization epsilon", above(0)}),
      make_field(m, &M::position_embedding_type,
                 {"position_embedding_type", "learned_absolute | rope | none",
                  choices({"learned_absolute", "rope", "none"})}),
      make_field(m, &M::rotary_base, {"rotary_base", "RoPE base (theta)", positive()}),
      make_field(m, &M::rotary_percent,
                 {"rotary_percent", "fraction of each head's channels RoPE rotates",
                  Rule{.min = 0.0, .min_open = true, .max = 1.0}}),
      make_field(m, &M::untie_embeddings_and_output_weights,
                 {"untie_embeddings_and_output_weights",
                  "separate output layer instead of the input embedding's transpose"}),
      make_field(m, &M::disable_bias_linear,
                 {"disable_bias_linear", "no biases in the linear layers (add_bias_linear false)"}),
      make_field(m, &M::use_flash_attn, {"use_flash_attn", "fused flash attention kernel"}),
      make_field(m, &M::transformer_impl,
                 {"transformer_impl",
                  "local | transformer_engine (Megatron's default: Transformer Engine's modules, "
                  "fused attention without attention dropout)",
                  choices({"local", "transformer_engine"})}),
      make_field(m, &M::attention_backend,
                 {"attention_backend",
                  "auto | flash | fused | unfused | local: Transformer Engine's attention "
                  "backend (flash: the flash-attn package; fused: cuDNN; auto: cuDNN from "
                  "Hopper on, flash-attn before)",
                  choices({"auto", "flash", "fused", "unfused", "local"})}),
      make_field(
          m, &M::qk_layernorm,
          {"qk_layernorm", "normalize each query and key head over its kv_channels (before RoPE)"}),
      make_field(m, &M::attention_dropout,
                 {"attention_dropout",
                  "dropout probability on the attention probabilities (Megatron's default 0.1; "
                  "tandem's 0)",
                  Rule{.min = 0.0, .max_open = 1.0}}),
      make_field(m, &M::hidden_dropout,
                 {"hidden_dropout",
                  "dropout probability after the embedding and on each layer's attention and "
                  "MLP output (Megatron's default 0.1; tandem's 0)",
                  Rule{.min = 0.0, .max_open = 1.0}}),
      make_field(m, &M::mtp_num_layers,
                 {"mtp_num_layers",
                  "multi-token prediction depths after the decoder (DeepSeek-V3; absent or 0: "
                  "none)",
                  non_negative()}),
      make_field(m, &M::mtp_loss_scaling_factor,
                 {"mtp_loss_scaling_factor",
                  "weight of the mean MTP loss over the depths (absent: Megatron's 0.1)"}),
      make_field(m, &M::num_experts,
                 {"num_experts", "experts per MoE layer (absent: a dense model)", positive()}),
      make_field(m, &M::moe_router_topk,
                 {"moe_router_topk", "experts each token is routed to", positive()}),
      make_field(
          m, &M::moe_ffn_hidden_size,
          {"moe_ffn_hidden_size", "an expert's MLP width (default ffn_hidden_size)", positive()}),
      make_field(
          m, &M::moe_shared_expert_intermediate_size,
          {"moe_shared_expert_intermediate_size",
           "MLP width of the shared expert every token goes through (absent: none)", positive()}),
      moe_layer_freq_field(),
      make_field(m, &M::moe_router_load_balancing_type,
                 {"moe_router_load_balancing_type", "aux_loss | seq_aux_loss | sinkhorn | none",
                  choices({"aux_loss", "seq_aux_loss", "sinkhorn", "none"})}),
      make_field(m, &M::moe_aux_loss_coeff,
                 {"moe_aux_loss_coeff", "weight of the load-balancing loss", Rule{.min = 0.0}}),
      make_field(m, &M::moe_router_pre_softmax,
                 {"moe_router_pre_softmax", "gates from the softmax over all experts"}),
      make_field(m, &M::moe_router_force_load_balancing,
                 {"moe_router_force_load_balancing",
                  "route copy t·k + slot to expert (t·k + slot) mod E (benchmarks)"}),
      make_field(m, &M::moe_token_dispatcher_type,
                 {"moe_token_dispatcher_type", "allgather | alltoall | flex",
                  choices({"allgather", "alltoall", "flex"})}),
      make_field(m, &M::moe_grouped_gemm,
                 {"moe_grouped_gemm", "the local experts' GEMMs as one grouped GEMM"}),
      make_field(m, &M::moe_expert_capacity_factor,
                 {"moe_expert_capacity_factor", "expert capacity (absent: dropless)",
                  Rule{.min = 0.0, .min_open = true}}),
      make_field(m, &M::moe_token_drop_policy,
                 {"moe_token_drop_policy",
                  "which copies an expert over capacity drops: probs (lowest gates) | position "
                  "(last tokens)",
                  choices({"probs", "position"})}),
      make_field(m, &M::moe_pad_expert_input_to_capacity,
                 {"moe_pad_expert_input_to_capacity",
                  "every expert gets exactly its capacity of rows (needs a capacity factor)"}),
      make_field(m, &M::moe_router_score_function,
                 {"moe_router_score_function", "softmax | sigmoid (DeepSeek-V3)",
                  choices({"softmax", "sigmoid"})}),
      make_field(m, &M::moe_router_enable_expert_bias,
                 {"moe_router_enable_expert_bias",
                  "aux-loss-free balancing: a per-expert bias on the choice (sigmoid only)"}),
      make_field(m, &M::moe_router_bias_update_rate,
                 {"moe_router_bias_update_rate",
                  "how far the expert bias moves per optimizer step (DeepSeek-V3's 1e-3)",
                  Rule{.min = 0.0}}),
      make_field(m, &M::moe_router_num_groups,
                 {"moe_router_num_groups", "expert groups of group-limited routing", positive()}),
      make_field(m, &M::moe_router_group_topk,
                 {"moe_router_group_topk", "groups each token's experts come from", positive()}),
      make_field(m, &M::moe_router_topk_scaling_factor,
                 {"moe_router_topk_scaling_factor", "factor on the top-k gates (absent: none)",
                  Rule{.min = 0.0, .min_open = true}}),
  };
}

std::vector<FieldDef> parallelism_fields() {
  using P = ParallelismConfig;
  constexpr auto p = &Scenario::parallelism;
  return {
      make_field(p, &P::tensor_model_parallel_size,
                 {"tensor_model_parallel_size", "tensor-parallel size tp", positive()}),
      make_field(p, &P::pipeline_model_parallel_size,
                 {"pipeline_model_parallel_size", "pipeline-parallel size pp", positive()}),
      make_field(p, &P::context_parallel_size,
                 {"context_parallel_size", "context-parallel size cp", positive()}),
      make_field(p, &P::cp_comm_type,
                 {"cp_comm_type",
                  "context parallelism's key/value exchange: p2p | all_gather | a2a | a2a+p2p",
                  choices({"p2p", "all_gather", "a2a", "a2a+p2p"})}),
      make_field(
          p, &P::expert_model_parallel_size,
          {"expert_model_parallel_size", "expert-parallel size ep (divides dp)", positive()}),
      make_field(
          p, &P::expert_tensor_parallel_size,
          {"expert_tensor_parallel_size",
           "tensor-parallel size of the experts (default tensor_model_parallel_size)", positive()}),
      make_field(p, &P::num_layers_per_virtual_pipeline_stage,
                 {"num_layers_per_virtual_pipeline_stage",
                  "layers per virtual pipeline stage (interleaved schedule)", positive()}),
      make_field(p, &P::virtual_pipeline_model_parallel_size,
                 {"virtual_pipeline_model_parallel_size",
                  "model chunks per pipeline stage vpp (interleaved schedule)",
                  positive(),
                  {"num_virtual_stages_per_pipeline_rank"},
                  "--num-virtual-stages-per-pipeline-rank"}),
      make_field(p, &P::decoder_first_pipeline_num_layers,
                 {"decoder_first_pipeline_num_layers",
                  "transformer layers on the first pipeline stage (the rest split evenly over "
                  "the other stages)",
                  positive()}),
      make_field(p, &P::decoder_last_pipeline_num_layers,
                 {"decoder_last_pipeline_num_layers",
                  "transformer layers on the last pipeline stage (the rest split evenly over "
                  "the other stages)",
                  positive()}),
      make_field(p, &P::account_for_embedding_in_pipeline_split,
                 {"account_for_embedding_in_pipeline_split",
                  "count the embedding as one layer of the even pipeline split (the first "
                  "chunk builds one layer fewer)"}),
      make_field(p, &P::account_for_loss_in_pipeline_split,
                 {"account_for_loss_in_pipeline_split",
                  "count the loss as one layer of the even pipeline split (the last chunk "
                  "builds one layer fewer)"}),
      make_field(p, &P::pipeline_model_parallel_layout,
                 {"pipeline_model_parallel_layout",
                  "every virtual stage's contents: E embedding, t layer, L loss, | stage end, "
                  "(…)*n and x*n repeat (e.g. \"Et*3|(tt|)*29,L\")"}),
      make_field(p, &P::microbatch_group_size_per_vp_stage,
                 {"microbatch_group_size_per_vp_stage",
                  "contiguous microbatches per virtual stage (default pp)",
                  positive(),
                  {"microbatch_group_size_per_virtual_pipeline_stage"},
                  "--microbatch-group-size-per-virtual-pipeline-stage"}),
      make_field(p, &P::pipeline_schedule,
                 {"pipeline_schedule",
                  "auto | none | gpipe | 1f1b | interleaved | zb-h1 (zero bubble, Qi et al. "
                  "2024: 1F1B with each backward split into B and a delayed W)",
                  choices({"auto", "none", "gpipe", "1f1b", "interleaved", "zb-h1"})}),
      make_field(p, &P::delay_wgrad_compute,
                 {"delay_wgrad_compute",
                  "split each backward: its weight gradients after the p2p call that sends "
                  "its input gradient (Megatron-Core's)"}),
      make_field(p, &P::order,
                 {"order", "rank-generator order, tp fastest varying (e.g. tp-cp-ep-dp-pp)"}),
      make_field(p, &P::sequence_parallel,
                 {"sequence_parallel", "shard layer norm and dropout along the sequence"}),
      make_field(p, &P::use_distributed_optimizer,
                 {"use_distributed_optimizer", "shard optimizer state across dp"}),
      make_field(p, &P::distributed_optimizer_grad_reduce,
                 {"distributed_optimizer_grad_reduce",
                  "how the distributed optimizer reduces gradients over dp: reduce_scatter "
                  "(Megatron-Core) | all_reduce (Megatron-DeepSpeed's BF16_Optimizer: every "
                  "rank gets the whole sum, steps its slice, parameters all-gathered)",
                  choices({"reduce_scatter", "all_reduce"})}),
      make_field(p, &P::overlap_grad_reduce,
                 {"overlap_grad_reduce", "overlap dp gradient reduction with backward"}),
      make_field(p, &P::overlap_param_gather,
                 {"overlap_param_gather", "overlap parameter all-gather with forward"}),
      make_field(p, &P::ddp_bucket_size,
                 {"ddp_bucket_size",
                  "elements per dp gradient bucket with overlap_grad_reduce (default "
                  "max(40M, 1M · dp·cp), Megatron-Core's)",
                  positive()}),
      make_field(p, &P::ddp_num_buckets,
                 {"ddp_num_buckets",
                  "dp gradient buckets: bucket size = this rank's parameters / this (instead "
                  "of ddp_bucket_size)",
                  positive()}),
      make_field(p, &P::ddp_pad_buckets_for_high_nccl_busbw,
                 {"ddp_pad_buckets_for_high_nccl_busbw",
                  "distributed optimizer: pad every bucket to lcm(dp·cp, 128, 2^16) elements "
                  "instead of lcm(dp·cp, 128)"}),
      make_field(p, &P::tp_comm_overlap,
                 {"tp_comm_overlap",
                  "with sequence parallelism, overlap the tensor-parallel all-gathers and "
                  "reduce-scatters with the linear layers' GEMMs in ring steps"}),
      make_field(p, &P::overlap_moe_expert_parallel_comm,
                 {"overlap_moe_expert_parallel_comm",
                  "combined 1F1B: each microbatch's forward with the previous one's backward, "
                  "the expert-parallel all-to-alls of one under the other's compute "
                  "(Megatron-Core's; pp 1 or interleaved)"}),
      make_field(p, &P::overlap_p2p_comm,
                 {"overlap_p2p_comm",
                  "interleaved schedule: post each chunk's pipeline sends and receives and wait "
                  "for them before the next chunk of their direction, under its compute "
                  "(Megatron-Core's default; false: batched calls that block)"}),
      make_field(p, &P::variable_seq_lengths,
                 {"variable_seq_lengths",
                  "send each pipeline tensor's shape before it (shapes may vary per microbatch)"}),
      make_field(p, &P::scatter_gather_tensors_in_pipeline,
                 {"scatter_gather_tensors_in_pipeline",
                  "without sequence parallelism, send 1/tp of each pipeline tensor per tp rank "
                  "and all-gather it over tp on arrival"}),
  };
}

std::vector<FieldDef> training_fields_batch() {
  using T = TrainingConfig;
  constexpr auto t = &Scenario::training;
  return {
      make_field(t, &T::micro_batch_size,
                 {"micro_batch_size", "samples per microbatch per dp rank", positive()}),
      make_field(t, &T::global_batch_size,
                 {"global_batch_size", "samples per iteration over all dp ranks", positive()}),
      make_field(t, &T::rampup_batch_size,
                 {"rampup_batch_size", "start increment samples: batch-size ramp-up",
                  Rule{.custom = broken_rampup}}),
      make_field(t, &T::train_iters, {"train_iters", "iterations to train", positive()}),
      make_field(t, &T::lr, {"lr", "peak learning rate", non_negative()}),
      make_field(t, &T::min_lr, {"min_lr", "learning rate floor of the decay", non_negative()}),
      make_field(t, &T::lr_warmup_iters,
                 {"lr_warmup_iters", "iterations of linear warmup", non_negative()}),
      make_field(t, &T::lr_decay_iters,
                 {"lr_decay_iters", "iterations to decay over (default train_iters)", positive()}),
      make_field(t, &T::lr_decay_style,
                 {"lr_decay_style", "constant | linear | cosine",
                  choices({"constant", "linear", "cosine"})}),
  };
}

std::vector<FieldDef> training_fields_rest() {
  using T = TrainingConfig;
  constexpr auto t = &Scenario::training;
  return {
      make_field(t, &T::weight_decay,
                 {"weight_decay", "decoupled (AdamW) weight decay", non_negative()}),
      make_field(t, &T::clip_grad,
                 {"clip_grad", "gradient clipping by global norm (0: off)", non_negative()}),
      make_field(t, &T::adam_beta1, {"adam_beta1", "Adam beta1", unit_interval()}),
      make_field(t, &T::adam_beta2, {"adam_beta2", "Adam beta2", unit_interval()}),
      make_field(t, &T::adam_eps, {"adam_eps", "Adam epsilon", above(0)}),
      make_field(t, &T::seed, {"seed", "random seed", non_negative()}),
      make_field(t, &T::recompute_granularity,
                 {"recompute_granularity", "activation recomputation: none | selective | full",
                  choices({"none", "selective", "full"})}),
      make_field(t, &T::recompute_method,
                 {"recompute_method", "uniform | block (with full recomputation)",
                  choices({"uniform", "block"})}),
      make_field(t, &T::recompute_num_layers,
                 {"recompute_num_layers",
                  "full: layers per checkpointed group (uniform) or recomputed per stage (block)",
                  positive()}),
      make_field(t, &T::log_interval, {"log_interval", "iterations per log line", positive()}),
      make_field(t, &T::eval_interval,
                 {"eval_interval", "iterations between evaluations", positive()}),
      make_field(t, &T::eval_iters, {"eval_iters", "iterations per evaluation", non_negative()}),
      make_field(t, &T::save_interval,
                 {"save_interval", "iterations between checkpoints (0: none)", non_negative()}),
      make_field(t, &T::bf16, {"bf16", "bf16 mixed precision"}),
      make_field(t, &T::fp16, {"fp16", "fp16 mixed precision"}),
      make_field(t, &T::loss_scale,
                 {"loss_scale",
                  "a constant loss scale (fp16 or bf16; Megatron's ConstantGradScaler); absent: "
                  "fp16 scales dynamically",
                  above(0)}),
      make_field(t, &T::initial_loss_scale,
                 {"initial_loss_scale", "fp16's dynamic loss scale to start from", above(0)}),
      make_field(t, &T::min_loss_scale,
                 {"min_loss_scale", "the dynamic loss scale's floor", above(0)}),
      make_field(t, &T::loss_scale_window,
                 {"loss_scale_window", "steps without an inf or NaN before the scale doubles",
                  positive()}),
      make_field(t, &T::hysteresis,
                 {"hysteresis", "steps with an inf or NaN before the scale halves", positive()}),
      make_field(t, &T::accumulate_allreduce_grads_in_fp32,
                 {"accumulate_allreduce_grads_in_fp32",
                  "reduce gradients over dp in fp32 (so with bf16 unless grad_reduce_in_bf16; "
                  "fp16 reduces 16-bit gradients without it)"}),
      make_field(t, &T::grad_reduce_in_bf16,
                 {"grad_reduce_in_bf16",
                  "with bf16, reduce gradients over dp in bf16 instead of fp32 (the optimizer "
                  "still steps on fp32 gradients)"}),
      make_field(t, &T::gradient_accumulation_fusion,
                 {"gradient_accumulation_fusion",
                  "weight-gradient GEMMs accumulate into the gradient buffer; off, each writes a "
                  "fresh gradient that a separate kernel adds (after the step's first "
                  "microbatch)"}),
      make_field(t, &T::defer_embedding_wgrad_compute,
                 {"defer_embedding_wgrad_compute",
                  "the last pipeline stage runs the output layer's weight-gradient GEMMs after "
                  "the schedule, in the pipeline flush, instead of in each backward"}),
      make_field(t, &T::wgrad_deferral_limit,
                 {"wgrad_deferral_limit",
                  "with defer_embedding_wgrad_compute, how many microbatches' output-layer "
                  "weight gradients wait for the flush (0: all; Megatron's default)",
                  Rule{.min = 0.0}}),
      make_field(t, &T::async_tensor_model_parallel_allreduce,
                 {"async_tensor_model_parallel_allreduce",
                  "without sequence parallelism, a column-parallel layer's backward all-reduces "
                  "its input gradient while the weight gradient is computed (Megatron's "
                  "default); off, the all-reduce ends first"}),
      make_field(t, &T::bias_gelu_fusion,
                 {"bias_gelu_fusion",
                  "fc1's bias is added inside the GeLU kernel (Megatron's default); off, a "
                  "bias kernel then a GeLU kernel"}),
      make_field(t, &T::cross_entropy_loss_fusion,
                 {"cross_entropy_loss_fusion",
                  "the vocab-parallel loss as Megatron-Core's fused kernels, its target logits "
                  "and sums of exponentials all-reduced as one tensor (off: Megatron's unfused "
                  "passes and three all-reduces)"}),
      make_field(t, &T::cross_entropy_fusion_impl,
                 {"cross_entropy_fusion_impl",
                  "native | te: with cross_entropy_loss_fusion, Megatron-Core's fused kernels "
                  "or Transformer Engine's parallel cross entropy",
                  choices({"native", "te"})}),
      make_field(t, &T::bias_dropout_fusion,
                 {"bias_dropout_fusion",
                  "the attention projection's and fc2's bias, the hidden dropout and the "
                  "residual add run as one kernel (Megatron's bias-dropout-add, default on); "
                  "off, a bias kernel, a dropout kernel (with hidden_dropout) and an add kernel"}),
      make_field(t, &T::deepspeed,
                 {"deepspeed",
                  "Megatron-DeepSpeed's DeepSpeed engine (fused fp16 optimizer over flattened "
                  "parameters); the simulator's optimizer host cost only"}),
      make_field(t, &T::host_sync_per_layer,
                 {"host_sync_per_layer",
                  "the host waits for the GPU at the start of each layer's forward, recomputed "
                  "forward and backward, as under a per-layer profiler (vTrain's measured runs); "
                  "off in Megatron"}),
      make_field(t, &T::host_layer_timestamps,
                 {"host_layer_timestamps",
                  "the host takes a profiler timestamp at the start of each layer's forward, "
                  "recomputed forward and backward (the preset's host_layer_timestamp_us, host "
                  "time only, no device sync), as vTrain's CUPTI flushes; off in Megatron"}),
      make_field(t, &T::host_sync_output_layer,
                 {"host_sync_output_layer",
                  "the host waits for the GPU before the output layer's forward and after its "
                  "backward, as in vTrain's rows composed of per-layer and non-layer profiles; "
                  "off in Megatron"}),
  };
}

std::vector<FieldDef> cluster_fields() {
  using C = ClusterConfig;
  constexpr auto c = &Scenario::cluster;
  return {
      make_field(c, &C::world_size, {"world_size", "number of ranks (GPUs)", positive()}),
      make_field(c, &C::gpus_per_node, {"gpus_per_node", "ranks per node", positive()}),
      make_field(c, &C::topology,
                 {"topology", "topology preset for the simulator, e.g. dgx-a100-80g"}),
  };
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), the usual
// typo distance: "paralel" and "parallle" are each one edit from "parallel".
// Optimal string alignment distance (Levenshtein plus adjacent transpositions), the usual
// typo distance: "paralel" and "parallle" are each one edit from "parallel".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t k = 0; k <= b.size(); ++k) d[0][k] = k;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t k = 1; k <= b.size(); ++k) {
      const std::size_t cost = a[i - 1] == b[k - 1] ? 0 : 1;
      d[i][k] = std::min({d[i - 1][k] + 1, d[i][k - 1] + 1, d[i - 1][k - 1] + cost});
      if (i > 1 && k > 1 && a[i - 1] == b[k - 2] && a[i - 2] == b[k - 1])
        d[i][k] = std::min(d[i][k], d[i - 2][k - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

const std::vector<FieldDef>& registry() {
  static const std::vector<FieldDef> fields = [] {
    std::vector<FieldDef> all;
    for (auto part : {model_fields(), mla_fields(), parallelism_fields(), training_fields_batch(),
                      training_fields_rest(), fp8_fields(), cluster_fields()})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  }();
  return fields;
}

const FieldDef* find_field(std::string_view name) {
  for (const auto& f : registry()) {
    if (f.meta.name == name) return &f;
    for (const auto& alias : f.meta.aliases)
      if (alias == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> all_field_names() {
  std::vector<std::string> names;
  for (const auto& f : registry()) {
    names.push_back(f.meta.name);
    names.insert(names.end(), f.meta.aliases.begin(), f.meta.aliases.end());
  }
  return names;
}

std::string broken_rule(const Rule& r, const json& v) {
  if (v.is_null()) return "";
  if (r.custom) return r.custom(v);
  if (v.is_number()) return broken_number_rule(r, v.get<double>());
  if (v.is_string() && !r.one_of.empty() &&
      std::find(r.one_of.begin(), r.one_of.end(), v.get<std::string>()) == r.one_of.end())
    return "must be one of " + join(r.one_of, " | ");
  return "";
}

std::string kebab_flag(std::string_view name) {
  std::string flag = "--" + std::string(name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// "--tensor-model-parallel-size", "tensor-model-parallel-size" → "tensor_model_parallel_size".
std::string snake_key(std::string_view key) {
  while (!key.empty() && key.front() == '-') key.remove_prefix(1);
  std::string name(key);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string lower(std::string_view t) {
  std::string out(t);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace scenario_detail

using namespace scenario_detail;

const std::vector<ScenarioField>& scenario_fields() {
  static const std::vector<ScenarioField> fields = [] {
    std::vector<ScenarioField> out;
    for (const auto& f : registry()) out.push_back(f.meta);
    return out;
  }();
  return fields;
}

Scenario default_scenario() {
  Scenario s;
  s.name = "default";
  s.description = "GPT-2 medium shape on one 8-GPU node: TP 2 x PP 2 x DP 2";
  s.model.num_layers = 24;
  s.model.hidden_size = 1024;
  s.model.num_attention_heads = 16;
  s.model.seq_length = 1024;
  s.model.vocab_size = 50257;
  s.parallelism.tensor_model_parallel_size = 2;
  s.parallelism.pipeline_model_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 16;
  s.cluster.world_size = 8;
  s.cluster.gpus_per_node = 8;
  return s;
}

std::string closest_match(std::string_view word, const std::vector<std::string>& known) {
  const std::string w = snake_key(lower(word));
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : known) {
    const std::size_t d = edit_distance(w, snake_key(lower(candidate)));
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // Beyond about a third of the word, a "suggestion" is a different word, not a typo...
  const std::size_t limit = std::max<std::size_t>(1, (w.size() + 1) / 3);
  if (best_distance <= limit) return best;
  // ...unless the word is a truncation ("seq_len" for "seq_length"): take the shortest
  // known word it begins.
  best.clear();
  for (const auto& candidate : known)
    if (w.size() >= 3 && snake_key(lower(candidate)).starts_with(w) &&
        (best.empty() || candidate.size() < best.size()))
      best = candidate;
  return best;
}

}  // namespace tandem
