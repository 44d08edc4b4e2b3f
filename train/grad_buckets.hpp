// Megatron's DDP buckets (_ParamAndGradBucketGroup): the data-parallel reduction of the
// gradient buffer, bucket by bucket (ParameterSet::buckets(): parameters in reverse order, so
// backward fills the buffer front to back). Without the distributed optimizer each bucket is
// all-reduced; with it each bucket is reduce-scattered and this rank's slice of the sum is
// written back into its place in the gradient buffer (or, all_reduce_then_gather, all-reduced
// whole), and after the optimizer step each bucket's parameters are all-gathered (in place)
// from the slices the ranks updated.
//
// With overlap_grad_reduce, during the last microbatch's backward a bucket's reduction is
// launched as soon as every parameter in it has its final gradient (Megatron's gradient
// hooks); finish() launches the rest and waits for all (finish_grad_sync). Without it, the
// buffer is one bucket reduced in finish().
//
// The parameter all-gather moves the parameters forward reads: under mixed precision the
// 16-bit copy (each rank first rounds its own updated slice), as Megatron gathers its bf16/fp16
// param buffer, not the fp32 main parameters, of which each rank holds its own slices only
// (ParameterSet::main_values); gather_main_values() assembles all of them. With
// overlap_param_gather nothing is launched after the optimizer step: the next step launches the
// bucket forward needs first (launch_next_gather, Megatron-Core's zero_grad) and forward's
// pre-hooks (on_params_needed) wait for a bucket and launch the next one (its forward pre-hook
// dispatching one bucket ahead, which keeps the NCCL order fixed).
//
// The buffer's layout is Megatron-Core's (grad_buffer_layout below); its sizes are what every
// binding reduces and allocates, so the simulator's bytes and memory follow it too.
#pragma once

#include <memory>
#include <vector>

#include "core/communicator.hpp"
#include "core/parallel_context.hpp"
#include "core/scenario.hpp"
#include "model/fp8_params.hpp"
#include "model/gpt_chunk.hpp"
#include "model/optimizer_shard.hpp"

namespace tandem {

// Megatron-Core's default bucket size (resolve_ddp_bucket_size): max(40M, 1M · dp·cp)
// elements, larger buckets for larger dp so that each rank's ring chunk stays
// bandwidth-bound. dp 1 → 40,000,000; dp 64 → 64,000,000.
std::int64_t default_ddp_bucket_size(int dp_cp);

// The elements a bucket's end is padded to with the distributed optimizer
// (param_layout.bucket_end_divisor): lcm(dp, 128), or lcm(dp, 128, 2^16) with
// pad_buckets_for_high_nccl_busbw. dp 3 → 384 (or 196,608); dp 64 → 128 (or 65,536).
std::int64_t bucket_end_divisor(int dp, bool pad_for_high_nccl_busbw);

// Megatron-Core's gradient-buffer layout for this rank (`num_parameters`: the elements of all
// its model chunks, for ddp_num_buckets). Buckets of ddp_bucket_size (default above) with
// overlap_grad_reduce, else one; only on the first pipeline stage, and only in its first
// model chunk (Megatron-Core's per_chunk_bucket_sizes: later chunks and later stages reduce
// each chunk as one bucket, a bucket never spanning two chunks). With the distributed optimizer
// every parameter starts at a multiple of 64 elements, every bucket ends at a multiple of
// bucket_end_divisor(dp·cp) (the experts' of the expert-dp size, the FP8 parameters' of
// 4·dp·cp: whole words of codes in every slice), and the word embedding tied
// across pipeline stages (pp > 1, not untied: Megatron's shared_embedding) gets a bucket of its
// own, so the first and last stage shard it alike and the embedding-group all-reduce adds matching
// slices. Without it there is no padding and no bucket of its own (_compute_default_per_buffer_
// param_layout).
BufferLayout grad_buffer_layout(const Scenario& s, const ParallelContext& ctx,
                                std::int64_t num_parameters);

// The dtype the dp reduction runs in: fp16 for fp16 runs without
// accumulate_allreduce_grads_in_fp32, bf16 for bf16 runs with grad_reduce_in_bf16
// (Megatron's grad_dtype = param dtype unless grad_reduce_in_fp32), else fp32.
DType grad_reduce_dtype(const TrainingConfig& t);

// all_reduce: every rank holds the whole sum and the whole optimizer (Megatron without the
// distributed optimizer). reduce_scatter: each rank receives its slice of the sum, steps it
// and the parameters are all-gathered (Megatron-Core's distributed optimizer).
// all_reduce_then_gather: the whole sum everywhere, then each rank steps its slice and the
// parameters are all-gathered (ZeRO stage 1 fed by a whole-gradient all-reduce:
// distributed_optimizer_grad_reduce all_reduce).
enum class GradReduction { all_reduce, reduce_scatter, all_reduce_then_gather };

// What the scenario asks for (use_distributed_optimizer, distributed_optimizer_grad_reduce).
GradReduction grad_reduction(const ParallelismConfig& p);

class GradBuckets : public GradReadyHook, public ParamsNeededHook {
 public:
  // `shard` is this dp rank's OptimizerShard (its bucket slices are what reduce_scatter
  // writes and what the parameter all-gather sends).
  // The experts' buckets reduce over `expert_dp` (needed when there are any). The buckets
  // are reduced in the gradient buffer's own dtype (grad_reduce_dtype, as Megatron's
  // main_grad), in place.
  GradBuckets(ParameterSet& params, const OptimizerShard& shard, GradReduction reduction,
              Communicator& dp, Device& device, Stream& stream, Communicator* expert_dp = nullptr);

  // Gradients are final during the backward of microbatch `last_microbatch`.
  void begin_step(int last_microbatch);
  void on_grads_ready(int microbatch, const std::vector<int>& parameters) override;
  // Launches any bucket not launched yet, then waits for every bucket's reduction.
  void finish();

  // reduce_scatter or all_reduce_then_gather, after the optimizer step: every bucket's parameters
  // (the 16-bit copy under mixed precision, the FP8 parameters' codes cast by `fp8` first) are to
  // be all-gathered from the dp ranks' slices; launched at once, or, `chained`
  // (overlap_param_gather), left pending for launch_next_gather and on_params_needed.
  void start_param_gather(bool chained);
  // --fp8-param-gather: the cast of this rank's main values into the FP8 parameters that
  // start_param_gather runs before it gathers them (null: none held).
  void set_fp8_cast(Fp8ParamCast* fp8) { fp8_ = fp8; }
  // The FP8 parameters alone cast and gathered, blocking: after the parameters are
  // initialised or loaded, when only their fp32 main values are set.
  void gather_fp8_params();
  // Launches the pending bucket forward needs first (none pending: nothing).
  void launch_next_gather();
  bool param_gather_pending() const;
  // Waits for the buckets holding `parameters`, launching the next bucket after each.
  void on_params_needed(const std::vector<int>& parameters) override;
  // Launches every bucket not launched yet and waits for all; no-op when nothing is pending.
  void finish_param_gather();
  // Every fp32 main value of the buffer (a checkpoint reads all of them), in a fresh
  // (numel) fp32 tensor: this rank's slices, the other ranks' all-gathered over dp,
  // blocking.
  Tensor gather_main_values();

  std::size_t num_buckets() const { return buckets_.size(); }
  // Buckets launched from inside backward in the last step (the rest waited for finish()).
  int launched_during_backward() const { return launched_early_; }

 private:
  struct Bucket {
    std::int64_t begin = 0, end = 0;              // elements of the buffers
    std::int64_t slice_begin = 0, slice_end = 0;  // this rank's slice (reduce_scatter)
    int parameters = 0;
    int ready = 0;
    Communicator* group = nullptr;  // dp, or expert-dp for the experts' buckets
    std::unique_ptr<Work> work;
    Tensor scattered;  // (slice) the reduce-scatter's output until it is written back
    std::unique_ptr<Work> gather;
    bool gather_pending = false;  // its parameters wait for a gather not yet launched
    bool fp8 = false;             // holds FP8 parameters: their codes are gathered
  };
  void launch(Bucket& b);
  // The model parameters' all-gather: the bucket's part of the 16-bit (or fp32) buffer, or
  // of the FP8 codes.
  void launch_gather(Bucket& b);
  // Gathers into `full` (numel() fp32 values) from this rank's slice of the bucket.
  void launch_gather(Bucket& b, const Tensor& full);
  void wait_gathers();  // every launched parameter all-gather

  ParameterSet& params_;
  Fp8ParamCast* fp8_ = nullptr;
  OptimizerShard shard_;  // this rank's pieces: the main values it casts
  Communicator& dp_;      // the FP8 cast's amax reduction
  GradReduction reduction_;
  Device& device_;
  Stream& stream_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter index → bucket
  std::vector<bool> ready_;     // parameter index → final this step
  int last_microbatch_ = 0;
  int launched_early_ = 0;
};

}  // namespace tandem
