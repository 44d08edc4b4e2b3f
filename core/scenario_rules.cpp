// Megatron-LM's cross-field argument checks (arguments.py, the microbatch calculator, the
// interleaved schedule, the rank generator, TransformerConfig) and the sizes they derive
// (data-parallel size, padded vocabulary, default ffn width, ...).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/fp8_fields.hpp"
#include "core/mla_fields.hpp"
#include "core/mtp_rules.hpp"
#include "core/pipeline_layout.hpp"
#include "core/scenario_detail.hpp"

namespace tandem {
using namespace scenario_detail;

// ---------------------------------------------------------------------------------------
// Derived quantities. They tolerate an unvalidated scenario (returning 0 or 1 rather than
// dividing by zero) because validate() itself uses them.

int data_parallel_size(const Scenario& s) {
  const auto& p = s.parallelism;
  const std::int64_t model = std::int64_t{p.tensor_model_parallel_size} *
                             p.pipeline_model_parallel_size * p.context_parallel_size;
  return model > 0 ? static_cast<int>(s.cluster.world_size / model) : 0;
}

int virtual_pipeline_size(const Scenario& s) {
  const auto& p = s.parallelism;
  if (p.virtual_pipeline_model_parallel_size) return *p.virtual_pipeline_model_parallel_size;
  if (p.pipeline_model_parallel_layout && p.pipeline_model_parallel_size >= 1) {
    // Megatron's arguments.py: the layout's stages / pp.
    const auto parsed = parse_pipeline_layout(*p.pipeline_model_parallel_layout);
    const auto stages = static_cast<int>(parsed.stages.size());
    const int pp = p.pipeline_model_parallel_size;
    return parsed.error.empty() && stages >= pp && stages % pp == 0 ? stages / pp : 1;
  }
  if (!p.num_layers_per_virtual_pipeline_stage || *p.num_layers_per_virtual_pipeline_stage < 1 ||
      p.pipeline_model_parallel_size < 1)
    return 1;
  // Megatron's arguments.py counts the embedding and loss here when they are accounted for.
  const int layers = s.model.num_layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                     (p.account_for_loss_in_pipeline_split ? 1 : 0);
  const int per_stage = layers / p.pipeline_model_parallel_size;
  return std::max(1, per_stage / *p.num_layers_per_virtual_pipeline_stage);
}

// Megatron's _vocab_size_with_padding: round up to a multiple of divisible_by · tp so the
// vocab-parallel embedding splits evenly and each shard keeps GEMM-friendly widths.
int padded_vocab_size(const Scenario& s) {
  const std::int64_t multiple =
      std::int64_t{s.model.make_vocab_size_divisible_by} * s.parallelism.tensor_model_parallel_size;
  if (multiple <= 0) return s.model.vocab_size;
  return static_cast<int>((s.model.vocab_size + multiple - 1) / multiple * multiple);
}

// Megatron's arguments.py: 4h, or with swiglu int(4h · 2/3 / 64) · 64, which keeps the
// parameter count of the two input projections near that of one 4h projection.
int ffn_hidden_size(const Scenario& s) {
  if (s.model.ffn_hidden_size) return *s.model.ffn_hidden_size;
  // In 64 bits and clamped: an absurd --hidden-size must be reported, not overflow.
  const std::int64_t four_h = std::int64_t{4} * s.model.hidden_size;
  const std::int64_t ffn = s.model.swiglu ? four_h * 2 / 3 / 64 * 64 : four_h;
  return static_cast<int>(std::min<std::int64_t>(ffn, std::numeric_limits<int>::max()));
}

bool is_moe_layer(const Scenario& s, int layer) {
  const auto& m = s.model;
  if (!m.num_experts || layer < 0) return false;
  if (!m.moe_layer_pattern.empty())
    return static_cast<std::size_t>(layer) < m.moe_layer_pattern.size() &&
           m.moe_layer_pattern[static_cast<std::size_t>(layer)] != 0;
  return m.moe_layer_freq >= 1 && layer % m.moe_layer_freq == 0;
}

int num_moe_layers(const Scenario& s) {
  int n = 0;
  for (int i = 0; i < s.model.num_layers; ++i) n += is_moe_layer(s, i);
  return n;
}

int moe_ffn_hidden_size(const Scenario& s) {
  return s.model.moe_ffn_hidden_size ? *s.model.moe_ffn_hidden_size : ffn_hidden_size(s);
}

int num_query_groups(const Scenario& s) {
  return s.model.group_query_attention ? s.model.num_query_groups : s.model.num_attention_heads;
}

ParallelSizes parallel_sizes(const Scenario& s) {
  const auto& p = s.parallelism;
  return {.tp = p.tensor_model_parallel_size,
          .pp = p.pipeline_model_parallel_size,
          .dp = data_parallel_size(s),
          .cp = p.context_parallel_size,
          .ep = p.expert_model_parallel_size,
          .vpp = virtual_pipeline_size(s)};
}

std::string effective_pipeline_schedule(const Scenario& s) {
  const auto& p = s.parallelism;
  if (p.pipeline_schedule != "auto") return p.pipeline_schedule;
  if (p.pipeline_model_parallel_size == 1) return "none";
  return virtual_pipeline_size(s) > 1 ? "interleaved" : "1f1b";
}

// ---------------------------------------------------------------------------------------
// Validation: Megatron-LM's argument checks (arguments.py, the microbatch calculator,
// the interleaved schedule and the rank generator), each a function that appends what it
// finds. A check returns early when a size it divides by is not positive: check_fields
// has already reported that size.

namespace {

using I64 = std::int64_t;

bool all_positive(std::initializer_list<I64> values) {
  return std::all_of(values.begin(), values.end(), [](I64 v) { return v >= 1; });
}

// world / (tp · pp · cp), or 0 when the sizes are not positive or do not divide.
I64 valid_dp(const Scenario& s) {
  const auto& p = s.parallelism;
  const I64 model =
      I64{p.tensor_model_parallel_size} * p.pipeline_model_parallel_size * p.context_parallel_size;
  if (model < 1 || s.cluster.world_size < 1 || s.cluster.world_size % model != 0) return 0;
  return s.cluster.world_size / model;
}

// Per-field ranges again: a Scenario built in code never went through the decoders.
void check_fields(const Scenario& s, Violations& out) {
  for (const auto& f : registry()) {
    const json v = f.get(s);
    if (auto rule = broken_rule(f.rule, v); !rule.empty())
      out.push_back({f.meta.name, shown(v), rule});
  }
}

void check_world(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const I64 tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size,
            cp = p.context_parallel_size, ep = p.expert_model_parallel_size,
            world = s.cluster.world_size;
  if (!all_positive({tp, pp, cp, ep, world})) return;
  const I64 model = tp * pp * cp;
  if (world % model != 0) {
    out.push_back({"world_size", cat(world),
                   cat("must be divisible by tensor_model_parallel_size × "
                       "pipeline_model_parallel_size × context_parallel_size = ",
                       tp, " × ", pp, " × ", cp, " = ", model)});
    return;
  }
  const I64 dp = world / model;
  if (dp % ep != 0)
    out.push_back({"expert_model_parallel_size", cat(ep),
                   cat("must divide the data-parallel size world_size / (tp × pp × cp) = ", world,
                       " / ", model, " = ", dp)});
}

void check_model_split(const Scenario& s, Violations& out) {
  const auto& m = s.model;
  const I64 tp = s.parallelism.tensor_model_parallel_size;
  const I64 pp = s.parallelism.pipeline_model_parallel_size;
  if (!all_positive({tp, pp, m.num_attention_heads, m.hidden_size, m.num_layers})) return;
  if (m.num_attention_heads % tp != 0)
    out.push_back({"num_attention_heads", cat(m.num_attention_heads),
                   cat("must be divisible by tensor_model_parallel_size = ", tp)});
  const I64 ffn = ffn_hidden_size(s);
  if (ffn >= 1 && ffn % tp != 0)
    out.push_back({"ffn_hidden_size", cat(ffn),
                   cat("must be divisible by tensor_model_parallel_size = ", tp,
                       m.ffn_hidden_size ? "" : " (ffn_hidden_size defaults to 4 × hidden_size)")});
  if (!m.kv_channels && m.hidden_size % m.num_attention_heads != 0)
    out.push_back({"hidden_size", cat(m.hidden_size),
                   cat("must be divisible by num_attention_heads = ", m.num_attention_heads,
                       " (or set kv_channels)")});
  if (m.num_layers % pp != 0 && !uneven_pipeline(s))
    out.push_back({"num_layers", cat(m.num_layers),
                   cat("must be divisible by pipeline_model_parallel_size = ", pp,
                       " (or give decoder_first/last_pipeline_num_layers, "
                       "account_for_embedding/loss_in_pipeline_split or "
                       "pipeline_model_parallel_layout)")});
}

// Megatron's pipeline_model_parallel_layout (arguments.py, TransformerConfig and
// PipelineParallelLayerLayout.validate_layer_layout): it names every stage, so it excludes
// the other ways of asking for a partition; the string must parse, split into whole
// virtual stages per pp rank, open with the embedding and close with the loss, each
// named once, and hold num_layers transformer layers.
void check_pipeline_layout(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const std::string text = *p.pipeline_model_parallel_layout;
  auto add = [&](std::string rule) {
    out.push_back({"pipeline_model_parallel_layout", text, std::move(rule)});
  };
  const I64 pp = p.pipeline_model_parallel_size, layers = s.model.num_layers;
  if (p.num_layers_per_virtual_pipeline_stage)
    add(cat("give it or num_layers_per_virtual_pipeline_stage (",
            *p.num_layers_per_virtual_pipeline_stage,
            "), not both: the layout's stages set the virtual pipeline (Megatron's rule)"));
  if (p.virtual_pipeline_model_parallel_size)
    add(cat("give it or virtual_pipeline_model_parallel_size (",
            *p.virtual_pipeline_model_parallel_size,
            "), not both: the layout's stages set the virtual pipeline (Megatron's rule)"));
  std::string others;
  if (p.decoder_first_pipeline_num_layers) others += " decoder_first_pipeline_num_layers";
  if (p.decoder_last_pipeline_num_layers) others += " decoder_last_pipeline_num_layers";
  if (p.account_for_embedding_in_pipeline_split)
    others += " account_for_embedding_in_pipeline_split";
  if (p.account_for_loss_in_pipeline_split) others += " account_for_loss_in_pipeline_split";
  if (!others.empty())
    add(cat("cannot be combined with", others,
            " (the layout names every stage; Megatron's TransformerConfig refuses both)"));
  const ParsedLayout parsed = parse_pipeline_layout(text);
  if (!parsed.error.empty()) return add(parsed.error);
  I64 embeddings = 0, losses = 0, decoders = 0;  // the MTP layers ('m'): check_mtp
  for (const auto& st : parsed.stages) {
    embeddings += std::count(st.begin(), st.end(), 'E');
    losses += std::count(st.begin(), st.end(), 'L');
    decoders += std::count(st.begin(), st.end(), 't');
  }
  const auto stages = static_cast<I64>(parsed.stages.size());
  if (pp < 1) return;
  if (stages % pp != 0)
    return add(cat("has ", stages, " stages, which must be a multiple of ",
                   "pipeline_model_parallel_size = ", pp,
                   " (each pp rank holds stages / pp virtual stages)"));
  if (stages / pp > 1 && pp == 1)
    add(cat("has ", stages, " stages on one pipeline rank: interleaving requires ",
            "pipeline_model_parallel_size > 1"));
  if (embeddings != 1)
    add(cat("names the embedding 'E' ", embeddings, " times; it must appear exactly once"));
  else if (parsed.stages.front().empty() || parsed.stages.front().front() != 'E')
    add("must open its first stage (pp rank 0, virtual stage 0) with the embedding 'E' "
        "(Megatron: the first layer must be the embedding)");
  if (losses != 1)
    add(cat("names the loss 'L' ", losses, " times; it must appear exactly once"));
  else if (parsed.stages.back().empty() || parsed.stages.back().back() != 'L')
    add("must close its last stage (last pp rank, last virtual stage) with the loss 'L' "
        "(Megatron: the last layer must be the loss)");
  if (decoders != layers)
    add(cat("holds ", decoders, " transformer layers ('t'), but num_layers = ", layers));
}

// Megatron's uneven pipeline (TransformerConfig, arguments.py): the first / last pp rank
// holds the given number of layers and the other ranks split the rest evenly; with
// virtual stages every rank's count must split evenly into its chunks, and the virtual
// pipeline must be given as chunks per rank. Accounting for the embedding / loss adds
// one layer each to the even split instead; the two do not combine.
void check_pipeline_split(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  if (p.pipeline_model_parallel_layout) return check_pipeline_layout(s, out);
  const auto& first = p.decoder_first_pipeline_num_layers;
  const auto& last = p.decoder_last_pipeline_num_layers;
  const bool accounted =
      p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
  const I64 pp = p.pipeline_model_parallel_size, layers = s.model.num_layers;
  const I64 vpp = virtual_pipeline_size(s);
  if (!all_positive({pp, layers, vpp, first.value_or(1), last.value_or(1)})) return;
  if (first || last) {
    const std::string field =
        first ? "decoder_first_pipeline_num_layers" : "decoder_last_pipeline_num_layers";
    const std::string value = cat(first ? *first : *last);
    if (accounted)
      return out.push_back(
          {field, value,
           cat("cannot be combined with account_for_",
               p.account_for_embedding_in_pipeline_split ? "embedding" : "loss",
               "_in_pipeline_split (Megatron's TransformerConfig refuses uneven stages with "
               "the embedding or loss counted as a layer)")});
    if (pp == 1) return out.push_back({field, value, "needs pipeline_model_parallel_size > 1"});
    if (p.num_layers_per_virtual_pipeline_stage)
      return out.push_back(
          {"num_layers_per_virtual_pipeline_stage", cat(*p.num_layers_per_virtual_pipeline_stage),
           "cannot be combined with decoder_first/last_pipeline_num_layers: give the virtual "
           "stages per rank as virtual_pipeline_model_parallel_size "
           "(--num-virtual-stages-per-pipeline-rank), as Megatron asks"});
    for (const auto& [name, n] : {std::pair{"decoder_first_pipeline_num_layers", first},
                                  std::pair{"decoder_last_pipeline_num_layers", last}})
      if (n && vpp > 1 && *n % vpp != 0)
        out.push_back({name, cat(*n),
                       cat("must be divisible by virtual_pipeline_model_parallel_size = ", vpp,
                           " (the stage's layers split evenly into its model chunks)")});
    const I64 middle_ranks = pp - (first ? 1 : 0) - (last ? 1 : 0);
    const I64 middle = layers - first.value_or(0) - last.value_or(0);
    const std::string rest =
        cat("num_layers − ", first ? "decoder_first_pipeline_num_layers" : "",
            first && last ? " − " : "", last ? "decoder_last_pipeline_num_layers" : "", " = ",
            layers, first ? cat(" − ", *first) : "", last ? cat(" − ", *last) : "", " = ", middle);
    if (middle < 0)
      out.push_back({field, value, cat("leaves too few layers: ", rest, " < 0")});
    else if ((middle == 0) != (middle_ranks == 0))
      out.push_back({"num_layers", cat(layers),
                     cat(rest, " layers for ", middle_ranks,
                         " middle pipeline stages: both must be zero or both positive")});
    else if (middle_ranks > 0 && middle % middle_ranks != 0)
      out.push_back({"num_layers", cat(layers),
                     cat(rest, " must be divisible by the ", middle_ranks,
                         " middle pipeline stages (pipeline_model_parallel_size − the uneven "
                         "ones)")});
    else if (middle_ranks > 0 && vpp > 1 && (middle / middle_ranks) % vpp != 0)
      out.push_back({"num_layers", cat(layers),
                     cat("leaves ", middle / middle_ranks,
                         " layers on each middle pipeline stage, which must be divisible by "
                         "virtual_pipeline_model_parallel_size = ",
                         vpp)});
    return;
  }
  if (!accounted) return;
  const I64 extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                    (p.account_for_loss_in_pipeline_split ? 1 : 0);
  const I64 total = layers + extra;
  const std::string counted =
      cat("num_layers + ", extra, " (the embedding", extra == 2 ? " and the loss" : "",
          " counted as layers) = ", layers, " + ", extra, " = ", total);
  if (total % pp != 0)
    out.push_back({"num_layers", cat(layers),
                   cat(counted, " must be divisible by pipeline_model_parallel_size = ", pp)});
  else if (vpp > 1 && (total / pp) % vpp != 0)
    out.push_back({"num_layers", cat(layers),
                   cat(counted, " gives ", total / pp,
                       " layers per pipeline stage, which must be divisible by "
                       "virtual_pipeline_model_parallel_size = ",
                       vpp)});
}

// Grouped-query attention (Megatron-Core's TransformerConfig and attention): every key/value
// head serves the same number of query heads, and tensor parallelism either splits the
// groups evenly or (tp a multiple of them) replicates each group over tp / groups ranks.
void check_attention(const Scenario& s, Violations& out) {
  const auto& m = s.model;
  // Dropout lives in the unfused attention op only (core/device.hpp AttentionDropout).
  if (m.attention_dropout > 0 && m.use_flash_attn)
    out.push_back({"attention_dropout", cat(m.attention_dropout),
                   "must be 0 with use_flash_attn (tandem's fused attention has no dropout)"});
  if (m.attention_dropout > 0 && transformer_engine_modules(m) &&
      (m.attention_backend == "flash" || m.attention_backend == "fused"))
    out.push_back({"attention_dropout", cat(m.attention_dropout),
                   cat("must be 0 with attention_backend ", m.attention_backend,
                       " (tandem's fused attention has no dropout)")});
  // Megatron's arguments.py: "--attention-backend local is only supported with --spec local".
  if (m.attention_backend == "local" && transformer_engine_modules(m))
    out.push_back({"attention_backend", "local",
                   "needs transformer_impl local (Megatron's own attention); Transformer "
                   "Engine's backends are auto, flash, fused and unfused"});
  if (m.attention_dropout > 0 && s.parallelism.context_parallel_size > 1)
    out.push_back(
        {"attention_dropout", cat(m.attention_dropout),
         cat("must be 0 with context_parallel_size = ", s.parallelism.context_parallel_size,
             " (tandem's context-parallel attention has no dropout)")});
  if (m.hidden_dropout > 0 && s.parallelism.context_parallel_size > 1)
    out.push_back(
        {"hidden_dropout", cat(m.hidden_dropout),
         cat("must be 0 with context_parallel_size = ", s.parallelism.context_parallel_size,
             " (tandem's hidden dropout is not built for context-parallel activations)")});
  const I64 tp = s.parallelism.tensor_model_parallel_size, heads = m.num_attention_heads;
  const I64 groups = m.num_query_groups;
  if (!m.group_query_attention || !all_positive({tp, heads, groups})) return;
  if (heads % groups != 0)
    out.push_back({"num_query_groups", cat(groups),
                   cat("must divide num_attention_heads = ", heads,
                       " (each key/value head serves the same number of query heads)")});
  if (groups % tp != 0 && tp % groups != 0)
    out.push_back({"num_query_groups", cat(groups),
                   cat("must be a multiple or a divisor of tensor_model_parallel_size = ", tp)});
}

// The router's and token dropping's rules, as Megatron-Core's TransformerConfig states them
// (__post_init__), plus one of ours: group-limited routing must leave k experts to choose.
void check_moe_router(const Scenario& s, Violations& out) {
  const auto& m = s.model;
  const I64 experts = *m.num_experts, k = m.moe_router_topk;
  if (m.moe_router_enable_expert_bias && m.moe_router_score_function != "sigmoid")
    out.push_back({"moe_router_enable_expert_bias", "true",
                   cat("needs moe_router_score_function sigmoid (Megatron: expert bias for "
                       "aux-loss-free routing only supports sigmoid), not ",
                       m.moe_router_score_function)});
  if (k == 1 && m.moe_router_score_function == "softmax" && !m.moe_router_pre_softmax &&
      m.moe_router_load_balancing_type != "sinkhorn")
    out.push_back({"moe_router_topk", "1",
                   "needs moe_router_pre_softmax with the softmax score function (a softmax "
                   "over one logit has no gradient; Megatron's rule)"});
  if (m.moe_router_group_topk) {
    const I64 groups = m.moe_router_num_groups.value_or(0), gtk = *m.moe_router_group_topk;
    if (groups < 1)
      out.push_back({"moe_router_group_topk", cat(gtk),
                     "needs moe_router_num_groups (Megatron: group limited routing needs the "
                     "number of groups)"});
    else if (experts % groups != 0)
      out.push_back(
          {"moe_router_num_groups", cat(groups), cat("must divide num_experts = ", experts)});
    else if (gtk > groups)
      out.push_back(
          {"moe_router_group_topk", cat(gtk), cat("must be ≤ moe_router_num_groups = ", groups)});
    else if (k > gtk * (experts / groups))
      out.push_back({"moe_router_topk", cat(k),
                     cat("must be ≤ moe_router_group_topk · num_experts / moe_router_num_groups = ",
                         gtk * (experts / groups), " (the chosen groups hold no more experts)")});
  }
  if (m.moe_pad_expert_input_to_capacity && !m.moe_expert_capacity_factor)
    out.push_back({"moe_pad_expert_input_to_capacity", "true",
                   "needs moe_expert_capacity_factor (Megatron: padding to the capacity needs "
                   "a capacity)"});
  const std::string& lb = m.moe_router_load_balancing_type;
  if (m.moe_expert_capacity_factor && lb != "aux_loss" && lb != "seq_aux_loss" && lb != "none")
    out.push_back({"moe_expert_capacity_factor", cat(*m.moe_expert_capacity_factor),
                   cat("works with moe_router_load_balancing_type aux_loss, seq_aux_loss or none "
                       "(Megatron's rule), not ",
                       lb)});
}

// Mixture of experts as Megatron-Core's arguments and MoE layer accept it: a token picks
// at most all the experts, expert parallelism splits the experts evenly and needs some,
// and tensor parallelism splits each expert's and the shared expert's MLP.
void check_moe(const Scenario& s, Violations& out) {
  const auto& m = s.model;
  const I64 ep = s.parallelism.expert_model_parallel_size,
            tp = s.parallelism.tensor_model_parallel_size;
  if (!m.num_experts) {
    if (ep > 1)
      out.push_back({"expert_model_parallel_size", cat(ep),
                     "needs num_experts (expert parallelism splits the experts of MoE layers)"});
    return;
  }
  const I64 experts = *m.num_experts;
  if (!all_positive({experts, ep, tp, m.moe_router_topk})) return;
  if (m.moe_router_topk > experts)
    out.push_back(
        {"moe_router_topk", cat(m.moe_router_topk), cat("must be ≤ num_experts = ", experts)});
  if (experts % ep != 0)
    out.push_back({"num_experts", cat(experts),
                   cat("must be divisible by expert_model_parallel_size = ", ep)});
  const I64 width = moe_ffn_hidden_size(s);
  if (width >= 1 && width % tp != 0)
    out.push_back({"moe_ffn_hidden_size", cat(width),
                   cat("must be divisible by tensor_model_parallel_size = ", tp,
                       m.moe_ffn_hidden_size ? "" : " (it defaults to ffn_hidden_size)")});
  const I64 listed = static_cast<I64>(m.moe_layer_pattern.size());
  if (listed > 0 && listed != m.num_layers)
    out.push_back({"moe_layer_freq", cat("a list of ", listed),
                   cat("must list one 0 or 1 per layer: num_layers = ", m.num_layers)});
  // Megatron's arguments.py: "When using MoE and tensor parallelism, sequence parallelism
  // must be used" (each tp rank routes its own sequence shard).
  if (tp > 1 && !s.parallelism.sequence_parallel)
    out.push_back({"sequence_parallel", "false",
                   cat("must be set with num_experts and tensor_model_parallel_size = ", tp,
                       " > 1 (Megatron's rule for MoE with tensor parallelism)")});
  if (m.moe_shared_expert_intermediate_size && *m.moe_shared_expert_intermediate_size % tp != 0)
    out.push_back({"moe_shared_expert_intermediate_size",
                   cat(*m.moe_shared_expert_intermediate_size),
                   cat("must be divisible by tensor_model_parallel_size = ", tp)});
  check_moe_router(s, out);
}

// Megatron accepts the interleaving as layers per virtual stage or as virtual stages per
// rank (vpp), never both; either way every stage holds vpp chunks of equal depth. (Megatron
// also asks for pp > 2 unless p2p communication is overlapped (overlap_p2p_comm), a limit of
// torch's batched p2p between the same two ranks; we keep only pp > 1, which the schedule
// itself needs.)
void check_interleaving(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const auto& per_vstage = p.num_layers_per_virtual_pipeline_stage;
  const auto& vstages = p.virtual_pipeline_model_parallel_size;
  const I64 pp = p.pipeline_model_parallel_size, layers = s.model.num_layers;
  if (!per_vstage && !vstages) return;
  if (!all_positive({pp, layers, per_vstage.value_or(1), vstages.value_or(1)})) return;
  if (per_vstage && vstages) {
    out.push_back(
        {"num_layers_per_virtual_pipeline_stage", cat(*per_vstage),
         cat("give it or virtual_pipeline_model_parallel_size (", *vstages, "), not both")});
    return;
  }
  const std::string field =
      per_vstage ? "num_layers_per_virtual_pipeline_stage" : "virtual_pipeline_model_parallel_size";
  const I64 given = per_vstage ? *per_vstage : *vstages;
  const I64 vpp = virtual_pipeline_size(s);
  const I64 extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                    (p.account_for_loss_in_pipeline_split ? 1 : 0);
  if (per_vstage && extra > 0 && (layers + extra) % pp == 0 &&
      ((layers + extra) / pp) % *per_vstage != 0)
    out.push_back({field, cat(given),
                   cat("must divide the layers per pipeline stage (num_layers + ", extra,
                       ", the embedding or loss counted as layers) / "
                       "pipeline_model_parallel_size = ",
                       layers + extra, " / ", pp, " = ", (layers + extra) / pp)});
  if (per_vstage && extra == 0 && layers % pp == 0 && (layers / pp) % *per_vstage != 0)
    out.push_back({field, cat(given),
                   cat("must divide the layers per pipeline stage num_layers / "
                       "pipeline_model_parallel_size = ",
                       layers, " / ", pp, " = ", layers / pp)});
  if (vpp > 1 && pp == 1)
    out.push_back({field, cat(given),
                   cat("interleaving (", vpp,
                       " model chunks per stage) requires pipeline_model_parallel_size > 1")});
  if (vstages && vpp > 1 && layers % (pp * vpp) != 0 && !uneven_pipeline(s))
    out.push_back({"num_layers", cat(layers),
                   cat("must be divisible by pipeline_model_parallel_size × "
                       "virtual_pipeline_model_parallel_size = ",
                       pp, " × ", vpp, " = ", pp * vpp)});
}

// Megatron's microbatch calculator: with a ramp-up every intermediate batch size must
// split into whole microbatches on every dp rank, and the ramp must end on the global batch.
void check_rampup(const Scenario& s, I64 dp, Violations& out) {
  const auto& t = s.training;
  const auto& r = t.rampup_batch_size;
  if (r.size() != 3 || r[0] < 1 || r[1] < 1) return;  // its shape is check_fields' business
  const std::string value = shown(encode(r));
  const I64 start = r[0], increment = r[1], global = t.global_batch_size;
  const I64 unit = t.micro_batch_size * dp;
  const std::string unit_text =
      cat("micro_batch_size × data-parallel size = ", t.micro_batch_size, " × ", dp, " = ", unit);
  if (start >= global)
    out.push_back({"rampup_batch_size", value,
                   cat("start batch size ", start, " must be < global_batch_size = ", global)});
  else if ((global - start) % increment != 0)
    out.push_back({"rampup_batch_size", value,
                   cat("global_batch_size − start = ", global, " − ", start, " = ", global - start,
                       " must be divisible by the increment ", increment)});
  if (start % unit != 0)
    out.push_back({"rampup_batch_size", value,
                   cat("start batch size ", start, " must be divisible by ", unit_text)});
  if (increment % unit != 0)
    out.push_back({"rampup_batch_size", value,
                   cat("increment ", increment, " must be divisible by ", unit_text)});
}

void check_batch(const Scenario& s, Violations& out) {
  const auto& t = s.training;
  const I64 dp = valid_dp(s);
  if (dp == 0 || !all_positive({t.micro_batch_size, t.global_batch_size})) return;
  const I64 unit = t.micro_batch_size * dp;
  if (t.global_batch_size % unit != 0)
    out.push_back({"global_batch_size", cat(t.global_batch_size),
                   cat("must be divisible by micro_batch_size × data-parallel size = ",
                       t.micro_batch_size, " × ", dp, " = ", unit)});
  check_rampup(s, dp, out);
}

// Every global batch size a run goes through: the ramp-up's steps, then the target.
std::vector<I64> batch_sizes(const Scenario& s) {
  const auto& r = s.training.rampup_batch_size;
  const I64 global = s.training.global_batch_size;
  std::vector<I64> sizes;
  if (r.size() == 3 && r[0] >= 1 && r[1] >= 1 && r[0] < global)
    for (I64 b = r[0]; b < global; b += r[1]) sizes.push_back(b);
  sizes.push_back(global);
  return sizes;
}

// Megatron-Core's interleaved schedule walks microbatches in groups of
// microbatch_group_size_per_vp_stage (default pp) per model chunk: a group smaller than pp
// or larger than m cannot fill the pipeline, and a short last group would deadlock the
// p2p pairing, so m mod group must be 0 or at least pp.
std::string broken_group_rule(I64 pp, I64 group, I64 m) {
  if (group < pp || group > m)
    return cat("the interleaved schedule needs pipeline_model_parallel_size ≤ microbatch group ",
               "size ≤ number of microbatches, i.e. ", pp, " ≤ ", group, " ≤ ", m);
  if (m % group != 0 && m % group < pp)
    return cat("the last microbatch group, m mod group = ", m, " mod ", group, " = ", m % group,
               ", must be 0 or ≥ pipeline_model_parallel_size = ", pp);
  return "";
}

void check_microbatch_groups(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const I64 pp = p.pipeline_model_parallel_size, dp = valid_dp(s);
  const I64 micro = s.training.micro_batch_size;
  if (virtual_pipeline_size(s) <= 1 || pp <= 1 || dp == 0 || micro < 1) return;
  const I64 group = p.microbatch_group_size_per_vp_stage.value_or(static_cast<int>(pp));
  for (const I64 batch : batch_sizes(s)) {
    if (batch % (micro * dp) != 0) continue;  // check_batch / check_rampup report it
    const I64 m = batch / (micro * dp);
    std::string rule = broken_group_rule(pp, group, m);
    if (rule.empty()) continue;
    const bool ramp = batch != s.training.global_batch_size;
    rule += cat(" (m = ", batch, " / (micro_batch_size × dp) = ", m,
                ramp ? " during the batch-size ramp-up" : "", ")");
    if (p.microbatch_group_size_per_vp_stage)
      out.push_back({"microbatch_group_size_per_vp_stage", cat(group), rule});
    else
      out.push_back({ramp ? "rampup_batch_size" : "global_batch_size",
                     ramp ? shown(encode(s.training.rampup_batch_size)) : cat(batch),
                     rule + "; microbatch_group_size_per_vp_stage defaults to pp"});
    return;
  }
}

void check_sequence(const Scenario& s, Violations& out) {
  const I64 seq = s.model.seq_length, tp = s.parallelism.tensor_model_parallel_size,
            cp = s.parallelism.context_parallel_size;
  if (!all_positive({seq, tp, cp})) return;
  if (cp > 1 && seq % (2 * cp) != 0)
    out.push_back({"seq_length", cat(seq),
                   cat("must be divisible by 2 × context_parallel_size = 2 × ", cp, " = ", 2 * cp,
                       " (context parallelism cuts the sequence into 2·cp chunks to balance "
                       "the causal mask)")});
  // At tp 1 Megatron switches sequence parallelism off with a warning rather than failing;
  // we accept it the same way (it has nothing to shard) and check only where it acts.
  if (s.parallelism.sequence_parallel && tp > 1 && seq % (tp * cp) != 0)
    out.push_back(
        {"seq_length", cat(seq),
         cp > 1 ? cat("must be divisible by tensor_model_parallel_size × context_parallel_size = ",
                      tp, " × ", cp, " = ", tp * cp, " with sequence_parallel")
                : cat("must be divisible by tensor_model_parallel_size = ", tp,
                      " with sequence_parallel")});
  if (s.parallelism.tp_comm_overlap && !s.parallelism.sequence_parallel)
    out.push_back({"tp_comm_overlap", "true",
                   "requires sequence_parallel (as Megatron: the overlapped collectives are "
                   "sequence parallelism's all-gathers and reduce-scatters)"});
  const I64 max_positions = s.model.max_position_embeddings.value_or(s.model.seq_length);
  if (max_positions < seq)
    out.push_back(
        {"max_position_embeddings", cat(max_positions), cat("must be ≥ seq_length = ", seq)});
}

void check_optimizer(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const auto& t = s.training;
  if (t.fp16 && t.bf16)
    out.push_back({"fp16", "true", "fp16 and bf16 exclude each other, and bf16 is true too"});
  if (p.distributed_optimizer_grad_reduce != "reduce_scatter" && !p.use_distributed_optimizer)
    out.push_back({"distributed_optimizer_grad_reduce", p.distributed_optimizer_grad_reduce,
                   "requires use_distributed_optimizer (it says how that optimizer reduces "
                   "gradients; without it they are all-reduced)"});
  if (p.overlap_param_gather && !p.use_distributed_optimizer)
    out.push_back({"overlap_param_gather", "true",
                   "requires use_distributed_optimizer (it gathers the optimizer's shards)"});
  if (p.overlap_param_gather && !p.overlap_grad_reduce)
    out.push_back({"overlap_param_gather", "true", "requires overlap_grad_reduce"});
  if (p.ddp_bucket_size && p.ddp_num_buckets)
    out.push_back({"ddp_num_buckets", std::to_string(*p.ddp_num_buckets),
                   "give ddp_bucket_size or ddp_num_buckets, not both (as Megatron)"});
  if (t.min_lr > t.lr) out.push_back({"min_lr", cat(t.min_lr), cat("must be ≤ lr = ", t.lr)});
  if (t.min_loss_scale > t.initial_loss_scale)
    out.push_back({"min_loss_scale", cat(t.min_loss_scale),
                   cat("must be ≤ initial_loss_scale = ", t.initial_loss_scale)});
  const I64 decay = t.lr_decay_iters.value_or(t.train_iters);
  if (t.lr_warmup_iters > decay)
    out.push_back({"lr_warmup_iters", cat(t.lr_warmup_iters),
                   cat("must be ≤ lr_decay_iters = ", decay,
                       t.lr_decay_iters ? "" : " (lr_decay_iters defaults to train_iters)")});
}

// Full recomputation checkpoints groups of layers inside one model chunk (a stage, or a
// virtual stage when interleaved), so a group cannot be deeper than the chunk.
void check_recompute(const Scenario& s, Violations& out) {
  const auto& t = s.training;
  const I64 pp = s.parallelism.pipeline_model_parallel_size, layers = s.model.num_layers;
  const I64 vpp = virtual_pipeline_size(s);
  if (t.recompute_granularity != "full" || !all_positive({pp, layers, vpp})) return;
  if (uneven_pipeline(s)) {
    // Uneven chunks: a group cannot be deeper than the deepest chunk.
    std::vector<ChunkPlan> plans;
    try {
      plans = pipeline_partition(s);
    } catch (const std::exception&) {
      return;  // check_pipeline_split reports why
    }
    I64 deepest = 0;
    for (const auto& c : plans) deepest = std::max<I64>(deepest, c.num_layers);
    if (t.recompute_num_layers > deepest)
      out.push_back({"recompute_num_layers", cat(t.recompute_num_layers),
                     cat("must be ≤ the layers of the deepest model chunk, ", deepest)});
    return;
  }
  if (layers % (pp * vpp) != 0) return;
  const I64 per_chunk = layers / (pp * vpp);
  if (t.recompute_num_layers <= per_chunk) return;
  out.push_back({"recompute_num_layers", cat(t.recompute_num_layers),
                 vpp > 1 ? cat("must be ≤ the layers of one model chunk num_layers / (pp × vpp) = ",
                               layers, " / (", pp, " × ", vpp, ") = ", per_chunk)
                         : cat("must be ≤ the layers per pipeline stage num_layers / "
                               "pipeline_model_parallel_size = ",
                               layers, " / ", pp, " = ", per_chunk)});
}

// Megatron-Core's rules for --overlap-moe-expert-parallel-comm (TransformerConfig's
// __post_init__: pp > 1 only interleaved), then tandem's: without a split backward. Megatron also
// asks for bf16 or fp16; tandem runs it in fp32 too, the cpu binding's precision, where the
// combined step is checked against the plain one.
void check_combined_1f1b(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  if (!p.overlap_moe_expert_parallel_comm) return;
  const char* field = "overlap_moe_expert_parallel_comm";
  auto refuse = [&](const std::string& rule) { out.push_back({field, "true", rule}); };
  if (!s.model.num_experts || p.expert_model_parallel_size < 2)
    refuse(
        "needs expert parallelism: num_experts and expert_model_parallel_size > 1 "
        "(Megatron's rule)");
  if (s.model.moe_token_dispatcher_type == "allgather")
    refuse("needs moe_token_dispatcher_type alltoall (Megatron's rule: alltoall or flex)");
  if (s.training.recompute_granularity == "full")
    refuse("not with recompute_granularity full (Megatron's rule)");
  if (mtp_depths(s.model) > 1)
    refuse(cat("takes at most one multi-token prediction layer, not mtp_num_layers = ",
               mtp_depths(s.model), " (Megatron's rule)"));
  const std::string kind = effective_pipeline_schedule(s);
  if (p.pipeline_model_parallel_size > 1 && kind != "interleaved")
    refuse(
        cat("needs the interleaved schedule (virtual pipeline stages) at "
            "pipeline_model_parallel_size = ",
            p.pipeline_model_parallel_size, ", not \"", kind, "\" (Megatron's rule)"));
  if (p.delay_wgrad_compute)
    refuse("not with delay_wgrad_compute in tandem (the combined step runs whole backwards)");
}

void check_schedule(const Scenario& s, Violations& out) {
  const std::string& kind = s.parallelism.pipeline_schedule;
  const I64 pp = s.parallelism.pipeline_model_parallel_size;
  const I64 vpp = virtual_pipeline_size(s);
  if (kind == "none" && pp != 1)
    out.push_back({"pipeline_schedule", kind,
                   cat("\"none\" runs without pipelining and needs pipeline_model_parallel_size "
                       "= 1, not ",
                       pp)});
  if (kind == "interleaved" && vpp <= 1)
    out.push_back({"pipeline_schedule", kind,
                   "needs more than one model chunk per stage: set "
                   "num_layers_per_virtual_pipeline_stage or "
                   "virtual_pipeline_model_parallel_size"});
  if ((kind == "1f1b" || kind == "gpipe" || kind == "zb-h1") && vpp > 1)
    out.push_back({"pipeline_schedule", kind,
                   cat("runs one model chunk per stage, but there are ", vpp,
                       " (virtual pipeline); use \"interleaved\" or \"auto\"")});
  if (kind == "zb-h1" && pp < 2)
    out.push_back({"pipeline_schedule", kind,
                   "fills a pipeline's bubble and needs pipeline_model_parallel_size ≥ 2; use "
                   "\"none\" or \"auto\" at 1"});
  if (kind == "zb-h1" && s.parallelism.delay_wgrad_compute)
    out.push_back({"delay_wgrad_compute", "true",
                   "zb-h1 places every weight gradient itself; leave delay_wgrad_compute out"});
  check_combined_1f1b(s, out);
  // Megatron-Core's ModelParallelConfig.__post_init__.
  if (s.training.defer_embedding_wgrad_compute && pp == 1)
    out.push_back({"defer_embedding_wgrad_compute", "true",
                   "needs pipeline_model_parallel_size > 1 (Megatron: \"Cannot defer embedding "
                   "wgrad compute when pipeline model parallel is not used\")"});
  if (s.training.defer_embedding_wgrad_compute && !s.training.gradient_accumulation_fusion)
    out.push_back({"defer_embedding_wgrad_compute", "true",
                   "needs gradient_accumulation_fusion (Megatron: \"Cannot defer embedding wgrad "
                   "compute when gradient accumulation fusion is not used\")"});
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

// Megatron-Core's RankGenerator: a '-'-joined permutation of tp, cp, ep, dp, pp; a
// dimension of size 1 may be left out (it is appended), and ep splits dp, so the two must
// be neighbours when ep > 1.
void check_order(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const auto tokens = split(p.order, '-');
  auto add = [&](std::string rule) { out.push_back({"order", p.order, std::move(rule)}); };
  auto index_of = [&](std::string_view t) {
    return std::find(tokens.begin(), tokens.end(), t) - tokens.begin();
  };
  const auto absent = static_cast<std::ptrdiff_t>(tokens.size());
  constexpr std::array<std::string_view, 5> kDims = {"tp", "cp", "ep", "dp", "pp"};
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (std::find(kDims.begin(), kDims.end(), tokens[i]) == kDims.end())
      add(cat("has unknown dimension \"", tokens[i],
              "\"; the dimensions are tp, cp, ep, dp, pp joined by '-'"));
    else if (index_of(tokens[i]) != static_cast<std::ptrdiff_t>(i))
      add(cat("names \"", tokens[i], "\" more than once"));
  }
  for (std::string_view need : {"tp", "dp", "pp"})
    if (index_of(need) == absent) add(cat("must contain \"", need, "\""));
  const std::pair<std::string_view, I64> optional_dims[] = {{"cp", p.context_parallel_size},
                                                            {"ep", p.expert_model_parallel_size}};
  for (const auto& [dim, size] : optional_dims)
    if (size > 1 && index_of(dim) == absent)
      add(cat("must contain \"", dim, "\" when its size is ", size, " (only size-1 dimensions ",
              "may be left out)"));
  const auto ep = index_of("ep"), dp = index_of("dp");
  if (p.expert_model_parallel_size > 1 && ep != absent && dp != absent && std::abs(ep - dp) != 1)
    add("must put \"ep\" next to \"dp\" when expert_model_parallel_size > 1 (expert "
        "parallelism splits the data-parallel dimension)");
  // Megatron-Core's rank generators (parallel_state.py) assert that unless pp is the
  // slowest dimension, the expert grid's data-parallel size dp × cp / ep equals dp.
  const I64 world = s.cluster.world_size, tp = p.tensor_model_parallel_size,
            pp = p.pipeline_model_parallel_size, cp = p.context_parallel_size,
            ep_size = p.expert_model_parallel_size;
  if (all_positive({world, tp, pp, cp, ep_size}) && pp > 1 && !tokens.empty() &&
      tokens.back() != "pp" && world % (tp * pp * cp) == 0) {
    const I64 dp_size = world / (tp * pp * cp);
    if (dp_size * cp % ep_size == 0 && dp_size * cp / ep_size != dp_size)
      add(cat("must end with \"pp\" when pipeline_model_parallel_size = ", pp,
              " > 1 and the expert data-parallel size dp × cp / ep = ", dp_size * cp / ep_size,
              " differs from data_parallel_size = ", dp_size,
              " (Megatron-Core's rank generators assert it)"));
  }
}

}  // namespace

void validate(const Scenario& s) {
  Violations out;
  for (auto check : {check_fields, check_world, check_model_split, check_attention, check_moe,
                     check_pipeline_split, check_interleaving, check_batch, check_microbatch_groups,
                     check_sequence, check_optimizer, check_recompute, check_schedule, check_order,
                     check_fp8, check_mla, check_mtp})
    check(s, out);
  if (!out.empty()) throw ConfigError(std::move(out), cat("scenario \"", s.name, "\""));
}

}  // namespace tandem
