// Megatron's DDP buckets (_ParamAndGradBucketGroup): the data-parallel reduction of the
// gradient buffer, bucket by bucket (ParameterSet::buckets(): parameters in reverse order, so
// backward fills the buffer front to back). Without the distributed optimizer each bucket is
// all-reduced; with it each bucket is reduce-scattered and this rank's slice of the sum is
// written back into its place in the gradient buffer, and after the optimizer step each
// bucket's parameters are all-gathered (in place) from the slices the ranks updated.
//
// With overlap_grad_reduce, during the last microbatch's backward a bucket's reduction is
// launched as soon as every parameter in it has its final gradient (Megatron's gradient
// hooks); finish() launches the rest and waits for all (finish_grad_sync). Without it, the
// buffer is one bucket reduced in finish(). With overlap_param_gather the all-gathers are
// launched after the optimizer step and waited for before the parameters are next used.
#pragma once

#include <memory>
#include <vector>

#include "core/communicator.hpp"
#include "model/gpt_chunk.hpp"
#include "model/optimizer_shard.hpp"

namespace tandem {

enum class GradReduction { all_reduce, reduce_scatter };

class GradBuckets : public GradReadyHook {
 public:
  // `shard` is this dp rank's OptimizerShard (its bucket slices are what reduce_scatter
  // writes and what the parameter all-gather sends).
  // The experts' buckets reduce over `expert_dp` (needed when there are any). With a
  // 16-bit `reduce_dtype` (Megatron's fp16 without accumulate_allreduce_grads_in_fp32)
  // each bucket's gradients are converted to it, reduced, and converted back.
  GradBuckets(ParameterSet& params, const OptimizerShard& shard, GradReduction reduction,
              Communicator& dp, Device& device, Stream& stream, Communicator* expert_dp = nullptr,
              DType reduce_dtype = DType::fp32);

  // Gradients are final during the backward of microbatch `last_microbatch`.
  void begin_step(int last_microbatch);
  void on_grads_ready(int microbatch, const std::vector<int>& parameters) override;
  // Launches any bucket not launched yet, then waits for every bucket's reduction.
  void finish();

  // Distributed optimizer: all-gathers every bucket's parameters from the dp ranks' slices.
  void start_param_gather();
  void finish_param_gather();  // no-op when nothing is in flight

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
    Tensor reduced;    // the bucket in the reduce dtype while it is reduced (16-bit only)
    std::unique_ptr<Work> gather;
  };
  void launch(Bucket& b);
  bool converts(const Bucket& b) const;  // reduced in reduce_dtype_ (16-bit, group > 1)

  ParameterSet& params_;
  GradReduction reduction_;
  DType reduce_dtype_;
  Device& device_;
  Stream& stream_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter index → bucket
  std::vector<bool> ready_;     // parameter index → final this step
  int last_microbatch_ = 0;
  int launched_early_ = 0;
};

}  // namespace tandem
