// One rank's share of Megatron's pretrain loop (training.py train / train_step /
// evaluate): the model chunks this rank owns, the optimizer, the schedule, and the steps
// of an iteration — zero grads, forward-backward over the microbatches per the pipeline
// schedule, finalize grads (data-parallel all-reduce — or reduce-scatter with the
// distributed optimizer —, tp all-reduce of sequence-parallel gradients, embedding-group
// all-reduce of the tied word embedding), global grad norm and clipping, AdamW on this
// rank's shard (and the parameter all-gather), learning-rate schedule.
// Written against Device and Communicator only: the cpu, cuda and sim bindings all run it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/parallel_context.hpp"
#include "core/scenario.hpp"
#include "model/optimizer.hpp"
#include "model/optimizer_shard.hpp"
#include "model/step_observer.hpp"
#include "schedules/microbatches.hpp"
#include "train/checkpoint.hpp"
#include "train/gpt_stage_program.hpp"
#include "train/grad_buckets.hpp"
#include "train/grad_scaler.hpp"

namespace tandem {

class MoeLayer;

// Layouts the scenario validator accepts (Megatron runs them) that this training step
// cannot run yet, refused before any work as a ConfigError naming the field: context
// parallelism without the fused attention op (context_parallel_size > 1 needs
// use_flash_attn), Ulysses (a2a) context parallelism, grouped-query attention without the
// fused attention op or with fewer query groups than tp ranks (key/value heads replicated
// over tp), and the mixture-of-experts options beyond Megatron-Core's alltoall and allgather
// dispatchers, dropless, with aux_loss balancing (the flex dispatcher, capacity factors, expert
// tensor parallelism other than tp, other balancing losses, experts with biases), and
// multi-token prediction with context parallelism or FP8. Every binding's entry point
// calls it.
void check_step_supports(const Scenario& s);

// The model's shape as the layers take it: the scenario's sizes and switches, this rank's
// share of each sequence (context parallelism) and its place on the expert grid.
GptDims gpt_dims(const Scenario& s, const ParallelContext& ctx);

// This rank's communicators, one per group kind it uses (not owned).
struct TrainerGroups {
  Communicator* tp = nullptr;
  Communicator* pp = nullptr;
  Communicator* dp = nullptr;              // data parallel (dp-cp when cp > 1)
  Communicator* model_parallel = nullptr;  // tp-pp: where the grad norm is summed
  Communicator* embedding = nullptr;       // first + last stage; nullptr if not a member
  Communicator* cp = nullptr;              // context parallel; needed when cp > 1
  // Mixture of experts: the ranks whose experts make a layer's, and the ranks holding the
  // same experts (where their gradients are reduced); needed when there are experts.
  Communicator* ep = nullptr;
  Communicator* expert_dp = nullptr;
  Communicator* tp_ep = nullptr;  // the allgather dispatcher's group
  // tp-dp-cp: FP8 delayed scaling's amax reduction (Megatron's amax reduction group).
  Communicator* amax = nullptr;
};

// The groups a binding hands the Trainer, looked up by kind: dp is Megatron's dp-cp group
// when cp > 1 (gradients are reduced over both), and cp is left out at cp 1.
TrainerGroups trainer_groups(const std::function<Communicator*(GroupKind)>& group, int cp);

struct StepResult {
  double lm_loss = 0;  // mean per-token loss (meaningful on the last stage)
  // Multi-token prediction: each depth's mean loss, as Megatron logs "mtp_k loss" (last stage).
  std::vector<double> mtp_losses;
  double grad_norm = 0;      // none when skipped
  double learning_rate = 0;  // as Megatron logs it: the rate after this step's scheduler step
  std::int64_t global_batch_size = 0;
  std::int64_t num_microbatches = 0;
  // Loss scaling (fp16, or a constant loss_scale): the scale this step's loss gradient was
  // multiplied by (1 without), and whether its gradients held an inf or a NaN, so that the
  // optimizer did not step (Megatron's skipped iteration).
  double loss_scale = 1.0;
  bool skipped = false;
};

class Trainer {
 public:
  // `observer` (may be null; outlives the trainer) gets the step's layer hooks: a binding's
  // instrumentation that is not the step's own (model/step_observer.hpp).
  Trainer(const Scenario& scenario, const ParallelContext& ctx, Device& device,
          TrainerGroups groups, const data::SampleDataset& train, const data::SampleDataset* valid,
          StepObserver* observer = nullptr);
  ~Trainer();

  StepResult train_step();
  // Mean loss over eval_iters global batches of the validation samples, forward only.
  double evaluate();

  std::int64_t iteration() const { return iteration_; }
  std::int64_t consumed_samples() const { return consumed_samples_; }
  ParameterSet& parameters() { return params_; }
  const GradBuckets* grad_buckets() const { return buckets_.get(); }
  // Records forward/backward of every microbatch on `trace` (null: off).
  void set_trace(RunTrace* trace);
  const ParallelContext& context() const { return ctx_; }
  // Copies this rank's tokens sent to each expert over its MoE layers, all steps so far
  // (what `tandem simulate --moe-routing histogram:…` takes); empty for a dense model.
  std::vector<std::int64_t> routed_per_expert() const;

  CheckpointState checkpoint_state();
  // Throws ConfigError when the checkpoint was written under another model or layout.
  void restore(const CheckpointState& state);

 private:
  StepBatch make_batch(const data::SampleDataset& samples, std::int64_t first_sample,
                       std::int64_t num_microbatches) const;
  void finalize_grads();
  // Megatron's _update_router_expert_bias: the MoE layers' copies per expert of this step,
  // summed over tp × dp × cp, move each expert bias (before the optimizer step, as
  // finalize_model_grads does it). Nothing without moe_router_enable_expert_bias.
  void update_expert_bias();
  std::vector<MoeLayer*> moe_layers();
  void parameters_ready();
  // All-reduces over `group` the pieces of the selected parameters that hold the dp sum
  // (summed_pieces_).
  void all_reduce_shard_grads(Communicator& group, bool (*selected)(const ParameterSpec&));
  double global_grad_norm();
  // Loss scaling: this rank's main gradients multiplied by `inv_scale`; whether any
  // gradient of the step, on any rank, was an inf or a NaN (Megatron's
  // _unscale_main_grads_and_check_for_nan, reduced over the ranks the grad norm is).
  bool unscale_and_find_non_finite(float inv_scale);
  // Max-reduces `t` ((1) fp32, this rank's share) over every rank whose gradients differ
  // from this one's: the grad norm's groups.
  void reduce_over_gradient_holders(Tensor& t, ReduceOp op);
  double average_over_dp(double value);
  std::vector<double> average_over_dp(const std::vector<double>& values);

  Scenario scenario_;
  ParallelContext ctx_;
  Device& device_;
  Stream& stream_;
  TrainerGroups groups_;
  const data::SampleDataset& train_;
  const data::SampleDataset* valid_;
  GptDims dims_;
  ParameterSet params_;
  std::vector<std::unique_ptr<GptChunk>> chunks_;
  std::unique_ptr<GptStageProgram> program_;
  std::optional<GradScaler> scaler_;  // fp16, or a constant loss_scale
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<Fp8ParamCast> fp8_cast_;  // --fp8-param-gather: the FP8 weights' cast
  std::unique_ptr<GradBuckets> buckets_;    // dp reduction (and the distributed optimizer's gather)
  // Where the dp reduction leaves the sum, which finalize_grads' other reductions then visit:
  // this rank's optimizer slices after a reduce-scatter, every parameter after an all-reduce
  // (a sharded optimizer fed by an all-reduce reduces its tied embedding whole too).
  std::vector<ShardPiece> summed_pieces_;
  MicrobatchCalculator microbatches_;
  LrSchedule lr_schedule_;
  ScheduleKind schedule_kind_;
  // The schedule of a training step (or, forward_only, of an evaluation) of m microbatches.
  ScheduleSpec schedule_spec(std::int64_t num_microbatches, bool forward_only) const;
  bool exchange_shapes_ = false;  // every p2p's shapes first (StepContext)
  std::int64_t iteration_ = 0;
  // The 16-bit parameters lag the fp32 main values (after an optimizer step without the
  // distributed optimizer, whose gather refreshes them).
  bool compute_copy_stale_ = false;
  std::int64_t consumed_samples_ = 0;
};

}  // namespace tandem
