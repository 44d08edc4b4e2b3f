#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/error.hpp"
#include "model/context_parallel_attention.hpp"
#include "schedules/step_interpreter.hpp"
#include "train/checkpoint_params.hpp"

namespace tandem {
namespace {

// Multi-latent attention's sizes (model/mla_attention.hpp). Megatron's MLA RoPE rotates
// int(qk_pos_emb_head_dim · rotary_percent) features under rope_type rope
// (RotaryEmbedding) and all of them under yarn (YarnRotaryEmbedding ignores the percent).
MlaOptions mla_options_of(const Scenario& s) {
  const MlaConfig& a = s.model.mla;
  if (!a.enabled()) return {};
  const int rotated =
      a.yarn() ? a.qk_pos_emb_head_dim
               : static_cast<int>(a.qk_pos_emb_head_dim * s.model.rotary_percent) / 2 * 2;
  return {.enabled = true,
          .q_lora_rank = a.q_lora_rank.value_or(0),
          .kv_lora_rank = a.kv_lora_rank,
          .qk_head_dim = a.qk_head_dim,
          .qk_pos_emb_head_dim = a.qk_pos_emb_head_dim,
          .v_head_dim = a.v_head_dim,
          .rotary_dim = rotated};
}

// The model's architecture switches under Megatron's names (model/transformer_layer.hpp).
LayerOptions options_of(const Scenario& s) {
  const auto& m = s.model;
  return {.num_query_groups = num_query_groups(s),
          .swiglu = m.swiglu,
          .normalization = parse_normalization(m.normalization),
          .norm_epsilon = static_cast<float>(m.norm_epsilon),
          .rope = m.position_embedding_type == "rope",
          .rotary_base = static_cast<float>(m.rotary_base),
          .rotary_percent = static_cast<float>(m.rotary_percent),
          .add_bias_linear = !m.disable_bias_linear,
          .flash_attn = runs_fused_attention(m),
          .kv_channels = m.kv_channels.value_or(0),
          .qk_layernorm = m.qk_layernorm,
          .untie_embeddings_and_output_weights = m.untie_embeddings_and_output_weights,
          .learned_position_embedding = m.position_embedding_type == "learned_absolute",
          .fp8 = s.training.fp8,
          .mla = mla_options_of(s)};
}

std::vector<bool> moe_layers_of(const Scenario& s) {
  std::vector<bool> out;
  for (int i = 0; i < s.model.num_layers; ++i) out.push_back(is_moe_layer(s, i));
  return out;
}

MoeOptions moe_options_of(const Scenario& s) {
  const auto& m = s.model;
  if (!m.num_experts) return {};
  return {.num_experts = *m.num_experts,
          .top_k = m.moe_router_topk,
          .ffn = moe_ffn_hidden_size(s),
          .shared_ffn = m.moe_shared_expert_intermediate_size.value_or(0),
          .aux_loss_coeff = m.moe_router_load_balancing_type == "aux_loss"
                                ? static_cast<float>(m.moe_aux_loss_coeff)
                                : 0.0f,
          .pre_softmax = m.moe_router_pre_softmax,
          .force_balance = m.moe_router_force_load_balancing,
          .allgather_dispatcher = m.moe_token_dispatcher_type == "allgather",
          .score_function = m.moe_router_score_function == "sigmoid" ? MoeScoreFunction::sigmoid
                                                                     : MoeScoreFunction::softmax,
          .num_groups = m.moe_router_group_topk ? m.moe_router_num_groups.value_or(0) : 0,
          .group_topk = m.moe_router_group_topk.value_or(0),
          .topk_scaling_factor = static_cast<float>(m.moe_router_topk_scaling_factor.value_or(1.0)),
          .expert_bias = m.moe_router_enable_expert_bias,
          .capacity_factor = m.moe_expert_capacity_factor.value_or(0.0),
          .drop_policy = m.moe_token_drop_policy == "position" ? MoeDropPolicy::position
                                                               : MoeDropPolicy::probs,
          .pad_to_capacity = m.moe_pad_expert_input_to_capacity};
}

constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";

std::optional<RampupBatchSize> rampup_of(const Scenario& s) {
  const auto& r = s.training.rampup_batch_size;
  if (r.empty()) return std::nullopt;
  return RampupBatchSize{r.at(0), r.at(1), r.at(2)};
}

Communicator& need(Communicator* c, const char* what) {
  if (!c) throw std::invalid_argument(std::string("Trainer: no ") + what + " communicator");
  return *c;
}

}  // namespace

GptDims gpt_dims(const Scenario& s, const ParallelContext& ctx) {
  const auto& m = s.model;
  const auto& p = s.parallelism;
  // Megatron turns sequence parallelism off at tp 1 (it has nothing to shard).
  return {m.num_layers,
          m.hidden_size,
          m.num_attention_heads,
          ffn_hidden_size(s),
          m.seq_length / p.context_parallel_size,  // this rank's share of each sequence
          s.training.micro_batch_size,
          padded_vocab_size(s),
          m.max_position_embeddings.value_or(m.seq_length),
          p.sequence_parallel && p.tensor_model_parallel_size > 1,
          s.training.bf16   ? DType::bf16
          : s.training.fp16 ? DType::fp16
                            : DType::fp32,
          options_of(s),
          moe_layers_of(s),
          moe_options_of(s),
          ctx.sizes.ep,
          ctx.coords.ep,
          mtp_depths(m),
          static_cast<float>(mtp_loss_scaling_factor(m))};
}

namespace {

// The attention the layers build (model/transformer_layer.cpp): grouped-query attention on
// the fused op only, whose grouped QKV gives each tp rank whole query groups.
void check_attention_step(const Scenario& s, std::vector<Violation>& v) {
  const auto& m = s.model;
  const int tp = s.parallelism.tensor_model_parallel_size, heads = m.num_attention_heads;
  const int groups = num_query_groups(s);
  if (groups == heads || groups < 1 || tp < 1) return;
  if (!runs_fused_attention(m))
    v.push_back({"num_query_groups", std::to_string(groups),
                 "grouped-query attention (fewer key/value heads than num_attention_heads = " +
                     std::to_string(heads) +
                     ") runs on the fused attention op in the training step: set "
                     "use_flash_attn (or transformer_impl transformer_engine, attention_backend "
                     "not unfused, without attention "
                     "dropout), or leave group_query_attention out"});
  else if (groups % tp != 0)
    v.push_back({"num_query_groups", std::to_string(groups),
                 "must be a multiple of tensor_model_parallel_size = " + std::to_string(tp) +
                     " (Megatron-Core's TransformerConfig rule: each tp rank holds whole query "
                     "groups; the training step does not replicate key/value heads over tp)"});
}

// Multi-latent attention as the step builds it (model/mla_attention.hpp).
void check_mla_step(const Scenario& s, std::vector<Violation>& v) {
  if (!runs_fused_attention(s.model))
    v.push_back({"multi_latent_attention", "true",
                 "runs its attention core on the fused attention op in the training step "
                 "(queries and keys wider than the values, as Transformer Engine's fused "
                 "attention takes them): set use_flash_attn (or transformer_impl "
                 "transformer_engine, attention_backend not unfused, without attention dropout)"});
  if (s.parallelism.context_parallel_size > 1)
    v.push_back({"context_parallel_size", std::to_string(s.parallelism.context_parallel_size),
                 "multi-latent attention over a context-parallel group is not built yet: use 1"});
  if (s.training.fp8.enabled())
    v.push_back({"fp8", s.training.fp8.format,
                 "multi-latent attention's projections are not built in FP8 yet: leave fp8 out "
                 "of MLA runs"});
}

// Multi-token prediction as the step builds it: without FP8 (eh_proj and the depths'
// layers are not built in FP8 yet).
void check_mtp_step(const Scenario& s, std::vector<Violation>& v) {
  const int depths = mtp_depths(s.model);
  if (depths <= 0) return;
  if (s.training.fp8.enabled())
    v.push_back({"fp8", s.training.fp8.format,
                 "multi-token prediction's eh_proj and layers are not built in FP8 yet: leave "
                 "fp8 out with mtp_num_layers"});
  // The MTP block in a later chunk of the rank whose first chunk holds the embedding: two
  // copies of the word embedding on one rank, and Megatron's finalize_model_grads reduces
  // only the first chunk's (its model[0] on the first stage), leaving the other to drift.
  const int pp = s.parallelism.pipeline_model_parallel_size;
  std::vector<ChunkPlan> plans;
  try {
    plans = pipeline_partition(s);
  } catch (const std::exception&) {
    return;  // validate() reports why
  }
  for (std::size_t stage = 1; stage < plans.size(); ++stage)
    if (plans[stage].mtp_layers > 0 && stage % static_cast<std::size_t>(pp) == 0)
      v.push_back({"pipeline_model_parallel_layout",
                   s.parallelism.pipeline_model_parallel_layout.value_or(""),
                   "puts the MTP layers in a later virtual stage of pp rank 0, whose first holds "
                   "the embedding: the step keeps one word-embedding copy per model chunk, and "
                   "Megatron's finalize_model_grads would synchronise only the first; put 'm' on "
                   "another pp rank or in rank 0's first stage"});
}

void check_experts_step(const Scenario& s, std::vector<Violation>& v) {
  const auto& m = s.model;
  if (m.moe_token_dispatcher_type == "flex")
    v.push_back({"moe_token_dispatcher_type", m.moe_token_dispatcher_type,
                 "the training step dispatches tokens with Megatron's alltoall or allgather "
                 "dispatcher (flex needs DeepEP)"});
  if (m.moe_router_load_balancing_type != "aux_loss" && m.moe_router_load_balancing_type != "none")
    v.push_back({"moe_router_load_balancing_type", m.moe_router_load_balancing_type,
                 "the training step balances with aux_loss (or none)"});
  const int tp = s.parallelism.tensor_model_parallel_size;
  if (s.parallelism.expert_tensor_parallel_size && *s.parallelism.expert_tensor_parallel_size != tp)
    v.push_back({"expert_tensor_parallel_size",
                 std::to_string(*s.parallelism.expert_tensor_parallel_size),
                 "the training step splits experts over the tp group (Megatron's default): use "
                 "tensor_model_parallel_size = " +
                     std::to_string(tp)});
  if (!m.disable_bias_linear)
    v.push_back({"disable_bias_linear", "false",
                 "the experts have no biases (as Megatron's grouped experts): set "
                 "disable_bias_linear with num_experts"});
}

}  // namespace

void check_step_supports(const Scenario& s) {
  const int cp = s.parallelism.context_parallel_size;
  if (cp > 1 && !runs_fused_attention(s.model))
    throw ConfigError("context_parallel_size", std::to_string(cp),
                      "context parallelism runs its attention on the fused attention op, as "
                      "Megatron's runs on Transformer Engine's: set use_flash_attn (or "
                      "transformer_impl transformer_engine, attention_backend not unfused, without "
                      "attention dropout), or use 1");
  const std::string& comm = s.parallelism.cp_comm_type;
  if (cp > 1 && comm != "p2p" && comm != "all_gather")
    throw ConfigError("cp_comm_type", comm,
                      "the training step exchanges keys and values by p2p (a ring) or "
                      "all_gather; a2a (Ulysses) is not in it yet");
  std::vector<Violation> v;
  check_attention_step(s, v);
  check_mtp_step(s, v);
  if (s.model.num_experts) check_experts_step(s, v);
  check_fp8_step(s.training.fp8, v);
  if (s.model.mla.enabled()) check_mla_step(s, v);
  // The FP8 ring steps quantize each rank's rows before they move, with one scale over tp
  // (delayed scaling's, or the current scale of the amax reduced over tp); the block
  // recipes' columnwise copies would need the gathered tensor first.
  if (s.parallelism.tp_comm_overlap && s.training.fp8.enabled() &&
      s.training.fp8.recipe != "delayed" && s.training.fp8.recipe != "tensorwise")
    v.push_back({"tp_comm_overlap", "true",
                 "with FP8 the training step overlaps tensor-parallel communication under "
                 "per-tensor scaling only (each rank's rows are quantized with one scale shared "
                 "over tp before they move; fp8_recipe is " +
                     s.training.fp8.recipe +
                     "); use fp8_recipe delayed or tensorwise, or leave tp_comm_overlap out"});
  if (s.parallelism.tp_comm_overlap && s.training.fp8.enabled() && !s.training.fp8.wgrad)
    v.push_back({"tp_comm_overlap", "true",
                 "with FP8 the overlapped backward gathers the output gradient as FP8 codes, "
                 "which the weight gradient then needs in FP8: not with fp8_wgrad false"});
  if (s.training.defer_embedding_wgrad_compute) {
    const bool split =
        s.parallelism.delay_wgrad_compute || effective_pipeline_schedule(s) == "zb-h1";
    if (split)
      v.push_back({"defer_embedding_wgrad_compute", "true",
                   "with a split backward (delay_wgrad_compute, zb-h1) the output layer's "
                   "weight gradients are already placed by the schedule; leave one of the two "
                   "out"});
    if (mtp_depths(s.model) > 0)
      v.push_back({"defer_embedding_wgrad_compute", "true",
                   "with multi-token prediction (whose heads multiply the output layer again) "
                   "is not built yet; leave mtp_num_layers out"});
  }
  if (!v.empty()) throw ConfigError(v);
}

TrainerGroups trainer_groups(const std::function<Communicator*(GroupKind)>& group, int cp) {
  return {group(GroupKind::tp),
          group(GroupKind::pp),
          group(cp > 1 ? GroupKind::dp_cp : GroupKind::dp),
          group(GroupKind::tp_pp),
          group(GroupKind::embedding),
          cp > 1 ? group(GroupKind::cp) : nullptr,
          group(GroupKind::ep),
          group(GroupKind::expert_dp),
          group(GroupKind::tp_ep),
          group(GroupKind::tp_dp_cp)};
}

Trainer::Trainer(const Scenario& scenario, const ParallelContext& ctx, Device& device,
                 TrainerGroups groups, const data::SampleDataset& train,
                 const data::SampleDataset* valid, StepObserver* observer)
    : scenario_((check_step_supports(scenario), scenario)),
      ctx_(ctx),
      device_(device),
      stream_(device.default_stream()),
      groups_(groups),
      train_(train),
      valid_(valid),
      dims_(gpt_dims(scenario, ctx)),
      params_(ctx.sizes.tp, ctx.coords.tp),
      microbatches_(scenario.training.global_batch_size, scenario.training.micro_batch_size,
                    ctx.sizes.dp, rampup_of(scenario)) {
  const auto& t = scenario.training;
  const int vpp = virtual_pipeline_size(scenario);
  const Recompute recompute = parse_recompute(t.recompute_granularity);
  for (int c = 0; c < vpp; ++c) {
    params_.begin_chunk(c);
    chunks_.push_back(std::make_unique<GptChunk>(
        params_, dims_, plan_chunk(scenario, ctx.coords.pp, c), recompute));
  }
  const auto& par = scenario.parallelism;
  const int dp = ctx.sizes.dp * ctx.sizes.cp;
  const bool experts = scenario.model.num_experts.has_value();
  if (experts) {
    need(groups_.ep, "ep");
    need(groups_.expert_dp, "expert-dp");
    if (scenario.model.moe_token_dispatcher_type == "allgather") need(groups_.tp_ep, "tp-ep");
  }
  std::int64_t num_parameters = 0;
  for (const auto& p : params_.all()) num_parameters += p.local_shape.numel();
  // With the distributed optimizer a rank holds the fp32 main values of its slices only.
  MainValueShard main;
  if (par.use_distributed_optimizer)
    main = {.dp_size = dp,
            .dp_rank = need(groups_.dp, "dp").rank(),
            .expert_dp_size = experts ? groups_.expert_dp->size() : 0,
            .expert_dp_rank = experts ? groups_.expert_dp->rank() : 0};
  // The gradient buffer in the dtype dp reduces in: Megatron's main_grad is 16-bit unless
  // the run reduces in fp32 (bf16 runs do, unless grad_reduce_in_bf16).
  params_.allocate(device_, grad_buffer_layout(scenario, ctx, num_parameters), dims_.compute, main,
                   grad_reduce_dtype(t));
  params_.initialize(device_, stream_, static_cast<std::uint64_t>(t.seed));
  // The first step copies too (the values it copies are those initialize rounded).
  compute_copy_stale_ = !par.use_distributed_optimizer && params_.separate_main();
  optimizer_ = std::make_unique<AdamW>(
      device_, params_,
      AdamConfig{static_cast<float>(t.adam_beta1), static_cast<float>(t.adam_beta2),
                 static_cast<float>(t.adam_eps), static_cast<float>(t.weight_decay)},
      make_optimizer_shard(params_, main.dp_size, main.dp_rank, main.expert_dp_size,
                           main.expert_dp_rank));
  std::vector<GptChunk*> raw;
  for (auto& c : chunks_) raw.push_back(c.get());
  ModelEnv env{device_,
               stream_,
               need(groups_.tp, "tp"),
               dims_.sequence_parallel,
               dims_.compute,
               ctx.sizes.cp > 1 ? &need(groups_.cp, "cp") : nullptr,
               parse_cp_comm_type(scenario.parallelism.cp_comm_type),
               groups_.ep,
               groups_.tp_ep,
               observer};
  env.attention_dropout = static_cast<float>(scenario.model.attention_dropout);
  env.hidden_dropout = static_cast<float>(scenario.model.hidden_dropout);
  env.dropout_seed = static_cast<std::uint64_t>(t.seed);
  env.gradient_accumulation_fusion = t.gradient_accumulation_fusion;
  env.async_tensor_model_parallel_allreduce = t.async_tensor_model_parallel_allreduce;
  env.bias_gelu_fusion = t.bias_gelu_fusion;
  env.bias_dropout_fusion = t.bias_dropout_fusion;
  env.cross_entropy_loss_fusion = t.cross_entropy_loss_fusion;
  env.defer_embedding_wgrad_compute = t.defer_embedding_wgrad_compute;
  env.wgrad_deferral_limit = t.wgrad_deferral_limit;
  if (t.fp8.enabled()) env.amax_group = &need(groups_.amax, "tp-dp-cp");
  env.tp_comm_overlap = scenario.parallelism.tp_comm_overlap;
  env.transformer_engine = transformer_engine_modules(scenario.model);
  program_ = std::make_unique<GptStageProgram>(env, raw, dims_);
  // As in Megatron, sequence parallelism (activations already sharded over tp) turns the
  // scatter-gather of pipeline tensors off.
  program_->set_scatter_gather(scenario.parallelism.scatter_gather_tensors_in_pipeline &&
                               !dims_.sequence_parallel);
  scaler_ = GradScaler::of(t);
  lr_schedule_ = {t.lr, t.min_lr, t.lr_warmup_iters, t.lr_decay_iters.value_or(t.train_iters),
                  t.lr_decay_style};
  schedule_kind_ = *parse_schedule_kind(effective_pipeline_schedule(scenario));
  // Megatron's p2p_communication exchanges shapes first with variable_seq_lengths or
  // mtp_standalone (the MTP stage sends [h0 | depth 1 | … | depth D] on).
  exchange_shapes_ = par.variable_seq_lengths || mtp_standalone(scenario);
  if (mtp_standalone(scenario)) {
    const auto plans = pipeline_partition(scenario);
    for (std::size_t v = 0; v < plans.size(); ++v)
      if (plans[v].mtp_layers > 0)
        program_->set_mtp_stage(static_cast<int>(v), ctx.sizes.pp, ctx.coords.pp);
  }
  const GradReduction reduction = grad_reduction(par);
  summed_pieces_ = reduction == GradReduction::all_reduce_then_gather
                       ? make_optimizer_shard(params_, 1, 0, experts ? 1 : 0, 0).pieces
                       : optimizer_->shard().pieces;
  buckets_ =
      std::make_unique<GradBuckets>(params_, optimizer_->shard(), reduction, need(groups_.dp, "dp"),
                                    device_, stream_, groups_.expert_dp);
  // --fp8-param-gather: the FP8 linear layers' weights cast from the main values and
  // gathered as codes, now (initialised) and after every optimizer step.
  std::vector<Fp8Weight> fp8_weights;
  for (auto& c : chunks_)
    for (auto& layer : c->layers())
      for (const Fp8Weight& w : layer.fp8_weights()) fp8_weights.push_back(w);
  if (!fp8_weights.empty()) {
    fp8_cast_ = std::make_unique<Fp8ParamCast>(params_, fp8_weights);
    buckets_->set_fp8_cast(fp8_cast_.get());
    buckets_->gather_fp8_params();
  }
  if (par.overlap_grad_reduce)
    for (auto& c : chunks_) c->set_grad_ready_hook(buckets_.get());
  if (par.overlap_param_gather)
    for (auto& c : chunks_) c->set_params_needed_hook(buckets_.get());
}

Trainer::~Trainer() = default;

std::vector<std::int64_t> Trainer::routed_per_expert() const {
  std::vector<std::int64_t> sum;
  for (const auto& c : chunks_) add_counts(sum, c->routed_per_expert());
  return sum;
}

void Trainer::set_trace(RunTrace* trace) {
  program_->set_trace(trace, virtual_pipeline_size(scenario_) > 1);
}

StepBatch Trainer::make_batch(const data::SampleDataset& samples, std::int64_t first_sample,
                              std::int64_t num_microbatches) const {
  // Megatron's pretraining sampler: each microbatch takes micro · dp consecutive samples,
  // and data-parallel rank r reads its `micro` of them (the ranks of a cp group read the
  // same samples and each keeps its part of every sequence).
  const std::int64_t micro = scenario_.training.micro_batch_size;
  const std::int64_t dp = ctx_.sizes.dp, r = ctx_.coords.dp;
  StepBatch batch{&samples, {}};
  for (std::int64_t j = 0; j < num_microbatches; ++j) {
    std::vector<std::int64_t> idx;
    for (std::int64_t i = 0; i < micro; ++i)
      idx.push_back((first_sample + j * micro * dp + r * micro + i) % samples.size());
    batch.microbatches.push_back(std::move(idx));
  }
  return batch;
}

void Trainer::all_reduce_shard_grads(Communicator& group, bool (*selected)(const ParameterSpec&)) {
  std::vector<std::unique_ptr<Work>> works;
  for (const auto& piece : summed_pieces_)
    if (selected(params_[piece.param].spec)) {
      Tensor g = params_.grads().view(Shape{piece.length}, piece.begin);
      works.push_back(group.all_reduce(stream_, g, ReduceOp::sum));
    }
  for (auto& w : works) w->wait();
}

void Trainer::finalize_grads() {
  // Megatron's finalize_model_grads. The loss gradient was scaled by 1/(m · dp), so the sum
  // over dp is the mean; after a reduce-scatter only this rank's slice of the gradient
  // buffer holds it, and the reductions below visit only that slice (summed_pieces_).
  buckets_->finish();  // with overlap_grad_reduce most buckets were launched during backward
  // Sequence parallelism: replicated parameters whose gradients saw one sequence shard; and
  // with or without it, the QK layer norms, whose gradients saw this rank's heads only.
  if (dims_.sequence_parallel)
    all_reduce_shard_grads(need(groups_.tp, "tp"), [](const ParameterSpec& p) {
      return p.sequence_parallel || p.heads_partial_grad;
    });
  else if (dims_.options.qk_layernorm && ctx_.sizes.tp > 1)
    all_reduce_shard_grads(need(groups_.tp, "tp"),
                           [](const ParameterSpec& p) { return p.heads_partial_grad; });
  // The tied word embedding lives on the first and the last stage, and so does the MTP
  // block's copy: sum their gradients (untied and without MTP, each stage has its own:
  // Megatron skips this reduction).
  if ((!dims_.options.untie_embeddings_and_output_weights || dims_.mtp_num_layers > 0) &&
      groups_.embedding && groups_.embedding->size() > 1)
    all_reduce_shard_grads(*groups_.embedding,
                           [](const ParameterSpec& p) { return p.name == kWordEmbedding; });
}

std::vector<MoeLayer*> Trainer::moe_layers() {
  std::vector<MoeLayer*> out;
  for (auto& c : chunks_)
    for (MoeLayer* l : c->moe_layers()) out.push_back(l);
  return out;
}

void Trainer::update_expert_bias() {
  if (!scenario_.model.moe_router_enable_expert_bias) return;
  const std::vector<MoeLayer*> layers = moe_layers();
  if (layers.empty()) return;  // a stage of dense layers only
  std::vector<float> counts;
  for (MoeLayer* l : layers)
    for (std::int64_t c : l->take_step_counts()) counts.push_back(static_cast<float>(c));
  // One all-reduce of every layer's counts (Megatron stacks them), over tp then dp (× cp).
  Tensor t = device_.allocate(Shape{static_cast<std::int64_t>(counts.size())}, DType::fp32);
  device_.upload(stream_, t, Device::ProduceFloats([&](std::span<float> out) {
                   std::copy(counts.begin(), counts.end(), out.begin());
                 }));
  Communicator& tp = need(groups_.tp, "tp");
  if (tp.size() > 1) tp.all_reduce(stream_, t, ReduceOp::sum)->wait();
  need(groups_.dp, "dp").all_reduce(stream_, t, ReduceOp::sum)->wait();
  device_.download(stream_, t, counts);
  const auto rate = static_cast<float>(scenario_.model.moe_router_bias_update_rate);
  std::size_t at = 0;
  for (MoeLayer* l : layers) {
    std::vector<float>& bias = l->expert_bias();
    const std::vector<float> mine(counts.begin() + static_cast<std::ptrdiff_t>(at),
                                  counts.begin() + static_cast<std::ptrdiff_t>(at + bias.size()));
    tandem::update_expert_bias(bias, mine, rate);
    at += bias.size();
  }
}

double Trainer::global_grad_norm() {
  const bool distributed = scenario_.parallelism.use_distributed_optimizer;
  Tensor ss = optimizer_->grad_sum_squares(stream_);
  // The distributed optimizer's slices are disjoint across dp: add them up first.
  if (distributed) need(groups_.dp, "dp").all_reduce(stream_, ss, ReduceOp::sum)->wait();
  if (scenario_.model.num_experts) {
    // The experts: sliced over expert-dp, different on every ep rank; then with the rest
    // over tp and pp (whose groups keep the ep coordinate).
    Tensor experts = optimizer_->grad_sum_squares(stream_, true);
    if (distributed) groups_.expert_dp->all_reduce(stream_, experts, ReduceOp::sum)->wait();
    groups_.ep->all_reduce(stream_, experts, ReduceOp::sum)->wait();
    device_.add(stream_, ss, experts, ss);
  }
  need(groups_.model_parallel, "model-parallel").all_reduce(stream_, ss, ReduceOp::sum)->wait();
  float host = 0;
  device_.download(stream_, ss, std::span<float>(&host, 1));
  return std::sqrt(static_cast<double>(host));
}

void Trainer::reduce_over_gradient_holders(Tensor& t, ReduceOp op) {
  // The grad norm's groups: dp's slices (distributed optimizer), the experts' over expert-dp
  // and ep, then tp and pp. A max over a group whose members agree changes nothing.
  const bool distributed = scenario_.parallelism.use_distributed_optimizer;
  if (distributed) need(groups_.dp, "dp").all_reduce(stream_, t, op)->wait();
  if (scenario_.model.num_experts) {
    if (distributed) groups_.expert_dp->all_reduce(stream_, t, op)->wait();
    groups_.ep->all_reduce(stream_, t, op)->wait();
  }
  need(groups_.model_parallel, "model-parallel").all_reduce(stream_, t, op)->wait();
}

bool Trainer::unscale_and_find_non_finite(float inv_scale) {
  Tensor found = device_.allocate(Shape{1}, DType::fp32);
  device_.fill(stream_, found, 0.0f);
  // This rank's main gradients: its slice of every bucket (all of them without the
  // distributed optimizer), padding included (zeros).
  for (const auto& [begin, end] : optimizer_->shard().bucket_slices) {
    Tensor g = params_.main_grads(begin, end - begin);
    device_.check_finite_and_unscale(stream_, g, inv_scale, found);
  }
  reduce_over_gradient_holders(found, ReduceOp::max);
  float host = 0;
  device_.download(stream_, found, std::span<float>(&host, 1));
  return host > 0;
}

// Megatron's MTPLossLoggingHelper reduces every depth's loss in one all-reduce (AVG over
// the data-parallel × cp group).
std::vector<double> Trainer::average_over_dp(const std::vector<double>& values) {
  if (values.empty()) return {};
  Tensor t = device_.allocate(Shape{static_cast<std::int64_t>(values.size())}, DType::fp32);
  device_.upload(stream_, t, Device::ProduceFloats([&](std::span<float> out) {
                   for (std::size_t i = 0; i < values.size(); ++i)
                     out[i] = static_cast<float>(values[i]);
                 }));
  Communicator& dp = need(groups_.dp, "dp");
  dp.all_reduce(stream_, t, ReduceOp::sum)->wait();
  std::vector<float> host(values.size());
  device_.download(stream_, t, host);
  std::vector<double> out;
  for (float v : host) out.push_back(static_cast<double>(v) / dp.size());
  return out;
}

double Trainer::average_over_dp(double value) {
  Tensor t = device_.allocate(Shape{1}, DType::fp32);
  device_.upload(stream_, t, Device::ProduceFloats([&](std::span<float> out) {
                   out[0] = static_cast<float>(value);
                 }));
  Communicator& dp = need(groups_.dp, "dp");
  dp.all_reduce(stream_, t, ReduceOp::sum)->wait();
  float host = 0;
  device_.download(stream_, t, std::span<float>(&host, 1));
  return static_cast<double>(host) / dp.size();
}

// The parameters forward will read: the dp all-gather of the distributed optimizer done,
// and under mixed precision without it the 16-bit copy refreshed from the fp32 main values
// (Megatron copies main to model params at the end of each optimizer step; here at the
// start of the step that reads them, so that every simulated step, the first included,
// holds one copy, as a step in the steady state does).
void Trainer::parameters_ready() {
  buckets_->finish_param_gather();
  if (!compute_copy_stale_) return;
  params_.refresh_compute(device_, stream_);
  compute_copy_stale_ = false;
}

StepResult Trainer::train_step() {
  microbatches_.update(consumed_samples_);
  const std::int64_t m = microbatches_.num_microbatches();
  const std::int64_t global = microbatches_.current_global_batch_size();
  const int dp = ctx_.sizes.dp * ctx_.sizes.cp;
  if (scenario_.parallelism.overlap_param_gather) {
    // The previous step's parameter all-gathers: the first bucket's launched here (Megatron's
    // zero_grad), each bucket waited for in forward (the chunks' params-needed hooks). The
    // first step, or one after an evaluation or a load, gathers the whole parameters it
    // already has, so that every step costs what a steady-state one does.
    if (!buckets_->param_gather_pending()) {
      parameters_ready();
      buckets_->start_param_gather(true);
    }
    buckets_->launch_next_gather();
  } else {
    parameters_ready();
  }
  device_.fill(stream_, params_.grads(), 0.0f);
  buckets_->begin_step(static_cast<int>(m) - 1);
  // The loss gradient is 1/(m · dp) of each microbatch's mean (the sum over dp is the mean),
  // times the loss scale under fp16.
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  program_->begin_step(make_batch(train_, consumed_samples_, m),
                       static_cast<float>(loss_scale / static_cast<double>(m * dp)), false);
  const ScheduleSpec spec = schedule_spec(m, false);
  StepContext step{device_, stream_, need(groups_.pp, "pp"), exchange_shapes_};
  run_schedule(make_rank_schedule(spec, ctx_.coords.pp), *program_, step);
  program_->drain_output_weight_grads();  // Megatron's finish_embedding_wgrad_compute
  buckets_->finish_param_gather();        // a stage whose forward needed none of them
  finalize_grads();
  // A 16-bit gradient buffer's held slices in fp32 for the optimizer (Megatron's
  // _copy_model_grads_to_main_grads), freed once the step is done or skipped.
  params_.stage_main_grads(device_, stream_);
  update_expert_bias();
  // Megatron averages the loss over dp for its log inside the step (the loss function), so
  // it never queues behind the next step's parameter all-gathers.
  const double loss = average_over_dp(program_->mean_loss());
  const std::vector<double> mtp_losses = average_over_dp(program_->mean_mtp_losses());
  if (scaler_) {
    // Megatron's MixedPrecisionOptimizer.prepare_grads: unscale, look for an inf or a NaN,
    // move the scale; a step that found one ends here, the parameters, the optimizer and the
    // learning-rate schedule as they were.
    const bool found = unscale_and_find_non_finite(static_cast<float>(1.0 / loss_scale));
    scaler_->update(found);
    if (found) {
      params_.release_main_grads();
      consumed_samples_ += global;
      ++iteration_;
      return {.lm_loss = loss,
              .mtp_losses = mtp_losses,
              .grad_norm = std::numeric_limits<double>::quiet_NaN(),
              .learning_rate = learning_rate(lr_schedule_, optimizer_->steps()),
              .global_batch_size = global,
              .num_microbatches = m,
              .loss_scale = loss_scale,
              .skipped = true};
    }
  }
  const double norm = global_grad_norm();
  // Megatron steps the optimizer at the rate of the scheduler's current step, then
  // advances the scheduler; the log shows the advanced rate.
  const double lr = learning_rate(lr_schedule_, optimizer_->steps());
  optimizer_->step(stream_, static_cast<float>(lr),
                   clip_coefficient(norm, scenario_.training.clip_grad));
  params_.release_main_grads();
  if (scenario_.parallelism.use_distributed_optimizer) {
    // Every rank updated its slice: gather the parameters (Megatron's start_param_sync), the
    // 16-bit copy under mixed precision, which the gather then keeps current.
    const bool overlap = scenario_.parallelism.overlap_param_gather;
    buckets_->start_param_gather(overlap);
    if (!overlap) buckets_->finish_param_gather();
  } else {
    compute_copy_stale_ = true;
  }
  consumed_samples_ += global;
  ++iteration_;
  return {.lm_loss = loss,
          .mtp_losses = mtp_losses,
          .grad_norm = norm,
          .learning_rate = learning_rate(lr_schedule_, optimizer_->steps()),
          .global_batch_size = global,
          .num_microbatches = m,
          .loss_scale = loss_scale};
}

ScheduleSpec Trainer::schedule_spec(std::int64_t num_microbatches, bool forward_only) const {
  const auto& p = scenario_.parallelism;
  return {.kind = schedule_kind_,
          .pp = ctx_.sizes.pp,
          .vpp = virtual_pipeline_size(scenario_),
          .num_microbatches = static_cast<int>(num_microbatches),
          .microbatch_group_size = p.microbatch_group_size_per_vp_stage.value_or(0),
          .forward_only = forward_only,
          .delay_wgrad_compute = p.delay_wgrad_compute && !forward_only,
          .combined_1f1b = p.overlap_moe_expert_parallel_comm && !forward_only,
          // Megatron's overlap_p2p_comm counts on the interleaved schedule only.
          .overlap_p2p_comm = p.overlap_p2p_comm && schedule_kind_ == ScheduleKind::interleaved};
}

double Trainer::evaluate() {
  if (!valid_) throw std::logic_error("Trainer::evaluate: no validation samples");
  parameters_ready();
  const std::int64_t global = scenario_.training.global_batch_size;
  const int dp = ctx_.sizes.dp;
  const std::int64_t m = global / (scenario_.training.micro_batch_size * dp);
  const ScheduleSpec spec = schedule_spec(m, true);
  const auto ops = make_rank_schedule(spec, ctx_.coords.pp);
  double sum = 0;
  const std::int64_t iters = scenario_.training.eval_iters;
  for (std::int64_t k = 0; k < iters; ++k) {
    program_->begin_step(make_batch(*valid_, k * global, m), 1.0f, true);
    StepContext step{device_, stream_, need(groups_.pp, "pp"), exchange_shapes_};
    run_schedule(ops, *program_, step);
    sum += program_->mean_loss();
  }
  return average_over_dp(sum / static_cast<double>(std::max<std::int64_t>(1, iters)));
}

namespace {
// Checkpoint names of a layer's FP8 state, by its global index as parameters are named.
std::string fp8_state_name(int layer) {
  return "fp8.layers." + std::to_string(layer) + ".";
}
}  // namespace

CheckpointState Trainer::checkpoint_state() {
  auto grab = [&](const std::string& name, const Tensor& t) {
    CheckpointTensor ct{name, std::vector<float>(static_cast<std::size_t>(t.numel()))};
    device_.download(stream_, t, ct.values);
    return ct;
  };
  CheckpointState st;
  st.iteration = iteration_;
  st.consumed_samples = consumed_samples_;
  st.optimizer_steps = optimizer_->steps();
  st.rank = ctx_.rank;
  st.world_size = ctx_.sizes.world();
  st.scenario = to_json(scenario_);
  st.parameters = parameter_table(params_);
  // Every rank's fp32 main slices, not only the 16-bit copy.
  st.tensors.push_back(grab("params", buckets_->gather_main_values()));
  st.tensors.push_back(grab("exp_avg", optimizer_->exp_avg()));
  st.tensors.push_back(grab("exp_avg_sq", optimizer_->exp_avg_sq()));
  for (auto& c : chunks_)
    for (auto& layer : c->layers())
      if (Fp8LayerState* f = layer.fp8_state(); f && f->has_checkpoint_state()) {
        const std::string name = fp8_state_name(layer.index());
        st.tensors.push_back(grab(name + "amax_history", f->amax_history()));
        st.tensors.push_back(grab(name + "scale", f->scales()));
        st.tensors.push_back(grab(name + "amax", f->step_amaxes()));
      }
  // The loss scaler's state (Megatron's optimizer state dict keeps its grad_scaler's).
  if (scaler_) {
    const GradScalerState& g = scaler_->state();
    st.tensors.push_back({"grad_scaler",
                          {static_cast<float>(g.scale), static_cast<float>(g.growth_tracker),
                           static_cast<float>(g.hysteresis_tracker)}});
  }
  // The expert biases are state, not parameters (Megatron's persistent buffer): every MoE
  // layer's, in layer order.
  if (scenario_.model.moe_router_enable_expert_bias) {
    CheckpointTensor bias{"expert_bias", {}};
    for (MoeLayer* l : moe_layers())
      bias.values.insert(bias.values.end(), l->expert_bias().begin(), l->expert_bias().end());
    st.tensors.push_back(std::move(bias));
  }
  return st;
}

void Trainer::restore(const CheckpointState& st) {
  // The model and the layout must match; training settings (iterations, intervals, lr
  // schedule) may change between runs as in Megatron.
  const auto now = to_json(scenario_);
  for (const char* section : {"model", "parallelism"})
    if (st.scenario.value(section, nlohmann::json{}) != now.at(section))
      throw ConfigError(
          "load", std::string(section),
          "the checkpoint was written with a different " + std::string(section) +
              " configuration: " + st.scenario.value(section, nlohmann::json{}).dump());
  if (st.world_size != ctx_.sizes.world())
    throw ConfigError("load", std::to_string(st.world_size),
                      "the checkpoint was written by " + std::to_string(st.world_size) +
                          " ranks, this run has " + std::to_string(ctx_.sizes.world()));
  auto put = [&](const std::string& name, Tensor& t) {
    for (const auto& ct : st.tensors)
      if (ct.name == name) {
        if (static_cast<std::int64_t>(ct.values.size()) != t.numel())
          throw ConfigError("load", name,
                            "holds " + std::to_string(ct.values.size()) +
                                " values, the model needs " + std::to_string(t.numel()));
        device_.upload(stream_, t, Device::ProduceFloats([&](std::span<float> out) {
                         std::copy(ct.values.begin(), ct.values.end(), out.begin());
                       }));
        return;
      }
    throw ConfigError("load", name, "is missing from the checkpoint");
  };
  buckets_->finish_param_gather();
  {
    Tensor full = device_.allocate(Shape{params_.numel()}, DType::fp32);
    put("params", full);
    params_.load_values(device_, stream_, full);
  }
  put("exp_avg", optimizer_->exp_avg());
  put("exp_avg_sq", optimizer_->exp_avg_sq());
  // Delayed scaling continues from the saved amax history and scales. A checkpoint without
  // them (written without FP8, or with a recipe that keeps no state) starts them afresh, as
  // a run switching to FP8 at this iteration would.
  auto has = [&](const std::string& name) {
    return std::any_of(st.tensors.begin(), st.tensors.end(),
                       [&](const CheckpointTensor& t) { return t.name == name; });
  };
  for (auto& c : chunks_)
    for (auto& layer : c->layers()) {
      Fp8LayerState* f = layer.fp8_state();
      const std::string name = fp8_state_name(layer.index());
      if (!f || !f->delayed() || !has(name + "amax_history")) continue;
      f->allocate_for_restore(device_);
      put(name + "amax_history", f->amax_history());
      put(name + "scale", f->scales());
      put(name + "amax", f->step_amaxes());
    }
  // FP8 parameters: cast from the loaded main values with the loaded scales.
  buckets_->gather_fp8_params();
  // The loss scaler continues where it stopped; a checkpoint without its state (written
  // without fp16) leaves it at its start, as a run switching to fp16 here would be.
  if (scaler_) {
    const auto found =
        std::find_if(st.tensors.begin(), st.tensors.end(),
                     [](const CheckpointTensor& t) { return t.name == "grad_scaler"; });
    if (found != st.tensors.end()) {
      if (found->values.size() != 3)
        throw ConfigError("load", "grad_scaler",
                          "holds " + std::to_string(found->values.size()) +
                              " values, the loss scaler 3 (scale, growth and hysteresis counts)");
      scaler_->restore({.scale = found->values[0],
                        .growth_tracker = static_cast<std::int64_t>(found->values[1]),
                        .hysteresis_tracker = static_cast<std::int64_t>(found->values[2])});
    }
  }
  if (scenario_.model.moe_router_enable_expert_bias) {
    const auto found =
        std::find_if(st.tensors.begin(), st.tensors.end(),
                     [](const CheckpointTensor& t) { return t.name == "expert_bias"; });
    if (found == st.tensors.end())
      throw ConfigError("load", "expert_bias", "is missing from the checkpoint");
    std::size_t at = 0, want = 0;
    for (MoeLayer* l : moe_layers()) want += l->expert_bias().size();
    if (found->values.size() != want)
      throw ConfigError("load", "expert_bias",
                        "holds " + std::to_string(found->values.size()) +
                            " values, the model needs " + std::to_string(want));
    for (MoeLayer* l : moe_layers())
      for (float& b : l->expert_bias()) b = found->values[at++];
  }
  iteration_ = st.iteration;
  consumed_samples_ = st.consumed_samples;
  optimizer_->set_steps(st.optimizer_steps);
}

}  // namespace tandem
