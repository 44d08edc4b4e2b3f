// Megatron's DDP gradient buckets with overlap_grad_reduce: the contiguous gradient buffer
// (parameters in reverse order, so backward fills it front to back) is cut into buckets of
// at least ddp_bucket_size elements; during the last microbatch's backward, as soon as
// every parameter of a bucket has its final gradient, the bucket's data-parallel
// all-reduce is launched, and finish() waits for them all before the optimizer
// (Megatron's finish_grad_sync).
#pragma once

#include <memory>
#include <vector>

#include "core/communicator.hpp"
#include "model/gpt_chunk.hpp"

namespace tandem {

class GradBuckets : public GradReadyHook {
 public:
  GradBuckets(ParameterSet& params, std::int64_t bucket_elements, Communicator& dp, Stream& stream);

  // Gradients are final during the backward of microbatch `last_microbatch`.
  void begin_step(int last_microbatch);
  void on_grads_ready(int microbatch, const std::vector<int>& parameters) override;
  // Launches any bucket not launched yet, then waits for every bucket's reduction.
  void finish();

  std::size_t num_buckets() const { return buckets_.size(); }
  // Buckets launched from inside backward in the last step (the rest waited for finish()).
  int launched_during_backward() const { return launched_early_; }

 private:
  struct Bucket {
    std::int64_t begin = 0, end = 0;  // elements of the gradient buffer
    int parameters = 0;
    int ready = 0;
    std::unique_ptr<Work> work;
  };
  void launch(Bucket& b);

  ParameterSet& params_;
  Communicator& dp_;
  Stream& stream_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter index → bucket
  std::vector<bool> ready_;     // parameter index → final this step
  int last_microbatch_ = 0;
  int launched_early_ = 0;
};

}  // namespace tandem
