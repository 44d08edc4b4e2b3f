#include "train/grad_buckets.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace tandem {

std::int64_t default_ddp_bucket_size(int dp_cp) {
  return std::max<std::int64_t>(40'000'000, 1'000'000 * static_cast<std::int64_t>(dp_cp));
}

std::int64_t bucket_end_divisor(int dp, bool pad_for_high_nccl_busbw) {
  const std::int64_t divisor = std::lcm<std::int64_t>(dp, 128);
  return pad_for_high_nccl_busbw ? std::lcm<std::int64_t>(divisor, 1 << 16) : divisor;
}

namespace {

constexpr const char* kSharedEmbeddingName = "embedding.word_embeddings.weight";
constexpr int kParamStartAlignment = 64;  // elements (param_layout.pad_param_start)

int as_int(std::int64_t n, const char* what) {
  if (n > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string("grad_buffer_layout: ") + what + " " +
                                std::to_string(n) + " does not fit an int");
  return static_cast<int>(n);
}

}  // namespace

BufferLayout grad_buffer_layout(const Scenario& s, const ParallelContext& ctx,
                                std::int64_t num_parameters) {
  const auto& p = s.parallelism;
  const int dp_cp = ctx.sizes.dp * ctx.sizes.cp;
  std::int64_t bucket = 0;  // Megatron's bucket_size None: one bucket
  // Off the first pipeline stage Megatron does not bucket either (its dp reduction is not
  // on the critical path there), nor chunks after the first (BufferLayout's default).
  if (p.overlap_grad_reduce && ctx.coords.pp == 0)
    bucket = p.ddp_num_buckets ? num_parameters / *p.ddp_num_buckets
                               : p.ddp_bucket_size.value_or(default_ddp_bucket_size(dp_cp));
  BufferLayout layout{.bucket_elements = bucket};
  if (!p.use_distributed_optimizer) return layout;
  const bool busbw = p.ddp_pad_buckets_for_high_nccl_busbw;
  layout.pad_to = as_int(bucket_end_divisor(dp_cp, busbw), "bucket end divisor");
  layout.expert_pad_to =
      as_int(bucket_end_divisor(dp_cp / ctx.sizes.ep, busbw), "expert bucket end divisor");
  // The FP8 parameters' codes are packed four to a word: each dp rank's slice of their
  // buckets must be whole words, so they end at a multiple of lcm(4·dp, 128) (Megatron's
  // uint8 buffer needs only lcm(dp, 128): the same for dp < 64 and dp not a multiple of 64).
  layout.fp8_pad_to = as_int(bucket_end_divisor(4 * dp_cp, busbw), "FP8 bucket end divisor");
  layout.param_align = kParamStartAlignment;
  if (ctx.sizes.pp > 1 && (!s.model.untie_embeddings_and_output_weights || mtp_depths(s.model) > 0))
    layout.own_bucket = [](const ParameterSpec& spec) { return spec.name == kSharedEmbeddingName; };
  return layout;
}

GradReduction grad_reduction(const ParallelismConfig& p) {
  if (!p.use_distributed_optimizer) return GradReduction::all_reduce;
  return p.distributed_optimizer_grad_reduce == "all_reduce" ? GradReduction::all_reduce_then_gather
                                                             : GradReduction::reduce_scatter;
}

DType grad_reduce_dtype(const TrainingConfig& t) {
  if (t.fp16 && !t.accumulate_allreduce_grads_in_fp32) return DType::fp16;
  if (t.bf16 && t.grad_reduce_in_bf16) return DType::bf16;
  return DType::fp32;
}

GradBuckets::GradBuckets(ParameterSet& params, const OptimizerShard& shard, GradReduction reduction,
                         Communicator& dp, Device& device, Stream& stream, Communicator* expert_dp)
    : params_(params),
      shard_(shard),
      dp_(dp),
      reduction_(reduction),
      device_(device),
      stream_(stream) {
  const auto& layout = params.buckets();
  if (shard.bucket_slices.size() != layout.size())
    throw std::invalid_argument("GradBuckets: the optimizer shard has " +
                                std::to_string(shard.bucket_slices.size()) + " bucket slices, " +
                                "the parameters " + std::to_string(layout.size()) + " buckets");
  bucket_of_.assign(params.all().size(), 0);
  for (std::size_t k = 0; k < layout.size(); ++k) {
    Bucket b;
    b.begin = layout[k].begin;
    b.end = layout[k].end;
    std::tie(b.slice_begin, b.slice_end) = shard.bucket_slices[k];
    b.parameters = static_cast<int>(layout[k].params.size());
    b.fp8 = layout[k].fp8;
    b.group = layout[k].expert ? expert_dp : &dp;
    if (b.group == nullptr)
      throw std::invalid_argument("GradBuckets: the experts' gradients need an expert-dp group");
    for (int i : layout[k].params) bucket_of_[static_cast<std::size_t>(i)] = static_cast<int>(k);
    buckets_.push_back(std::move(b));
  }
  ready_.assign(params.all().size(), false);
}

void GradBuckets::begin_step(int last_microbatch) {
  last_microbatch_ = last_microbatch;
  launched_early_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.ready = 0;
    b.work.reset();
  }
}

void GradBuckets::launch(Bucket& b) {
  // The buffer is already in the dtype the run reduces in (Megatron's main_grad), so the
  // reduction reads it as it is.
  Tensor view = params_.grads().view(Shape{b.end - b.begin}, b.begin);
  if (reduction_ != GradReduction::reduce_scatter) {
    b.work = b.group->all_reduce(stream_, view, ReduceOp::sum);
    return;
  }
  b.scattered =
      device_.allocate(Shape{b.slice_end - b.slice_begin}, view.dtype, MemoryUse::communication);
  b.work = b.group->reduce_scatter(stream_, view, b.scattered, ReduceOp::sum);
}

void GradBuckets::on_grads_ready(int microbatch, const std::vector<int>& parameters) {
  if (microbatch != last_microbatch_) return;
  for (int i : parameters) {
    if (i < 0 || ready_[static_cast<std::size_t>(i)]) continue;
    ready_[static_cast<std::size_t>(i)] = true;
    Bucket& b = buckets_[static_cast<std::size_t>(bucket_of_[static_cast<std::size_t>(i)])];
    if (++b.ready == b.parameters && !b.work) {
      launch(b);
      ++launched_early_;
    }
  }
}

void GradBuckets::finish() {
  for (auto& b : buckets_)
    if (!b.work) launch(b);
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    if (reduction_ == GradReduction::reduce_scatter) {
      // This rank's slice of the sum goes where the optimizer reads its gradients.
      Tensor slice = params_.grads().view(Shape{b.slice_end - b.slice_begin}, b.slice_begin);
      device_.copy(stream_, b.scattered, slice);
      b.scattered = Tensor{};
    }
  }
}

void GradBuckets::launch_gather(Bucket& b, const Tensor& full) {
  // In place: this rank's slice already sits in its block of the bucket.
  const Tensor slice = full.view(Shape{b.slice_end - b.slice_begin}, b.slice_begin);
  Tensor whole = full.view(Shape{b.end - b.begin}, b.begin);
  b.gather = b.group->all_gather(stream_, slice, whole);
  b.gather_pending = false;
}

void GradBuckets::launch_gather(Bucket& b) {
  if (!b.fp8) {
    launch_gather(b, params_.compute_values());
    return;
  }
  const Tensor slice = params_.fp8_codes(b.slice_begin, b.slice_end - b.slice_begin);
  Tensor whole = params_.fp8_codes(b.begin, b.end - b.begin);
  b.gather = b.group->all_gather(stream_, slice, whole);
  b.gather_pending = false;
}

void GradBuckets::start_param_gather(bool chained) {
  if (reduction_ == GradReduction::all_reduce)
    throw std::logic_error(
        "GradBuckets: parameters are gathered only where the optimizer is sharded");
  Tensor& compute = params_.compute_values();
  if (params_.has_fp8()) {
    if (fp8_ == nullptr)
      throw std::logic_error("GradBuckets: FP8 parameters and no cast for them (set_fp8_cast)");
    for (auto& b : buckets_)
      if (b.fp8 && (b.gather || b.gather_pending))
        throw std::logic_error("GradBuckets: a parameter all-gather is in flight");
    fp8_->cast(device_, stream_, shard_, dp_);
  }
  for (auto& b : buckets_) {
    if (b.gather || b.gather_pending)
      throw std::logic_error("GradBuckets: a parameter all-gather is in flight");
    // Megatron's copy of the updated main slice into the model params (the FP8 ones: cast).
    if (params_.separate_main() && !b.fp8) {
      const std::int64_t n = b.slice_end - b.slice_begin;
      Tensor rounded = compute.view(Shape{n}, b.slice_begin);
      device_.copy(stream_, params_.main_values(b.slice_begin, n), rounded);
    }
    b.gather_pending = true;
  }
  if (!chained)
    for (auto& b : buckets_) launch_gather(b);
}

void GradBuckets::wait_gathers() {
  for (auto& b : buckets_)
    if (b.gather) {
      b.gather->wait();
      b.gather.reset();
    }
}

void GradBuckets::gather_fp8_params() {
  if (!params_.has_fp8()) return;
  if (fp8_ == nullptr)
    throw std::logic_error("GradBuckets: FP8 parameters and no cast for them (set_fp8_cast)");
  finish_param_gather();
  fp8_->cast(device_, stream_, shard_, dp_);
  for (auto& b : buckets_)
    if (b.fp8) launch_gather(b);
  wait_gathers();
}

bool GradBuckets::param_gather_pending() const {
  return std::any_of(buckets_.begin(), buckets_.end(),
                     [](const Bucket& b) { return b.gather_pending || b.gather; });
}

// Buckets hold the parameters in reverse order (backward fills the buffer front to back), so
// forward needs the last pending bucket first.
void GradBuckets::launch_next_gather() {
  for (std::size_t k = buckets_.size(); k-- > 0;)
    if (buckets_[k].gather_pending) {
      launch_gather(buckets_[k]);
      return;
    }
}

void GradBuckets::on_params_needed(const std::vector<int>& parameters) {
  for (int i : parameters) {
    if (i < 0) continue;
    Bucket& b = buckets_[static_cast<std::size_t>(bucket_of_[static_cast<std::size_t>(i)])];
    if (b.gather_pending) launch_gather(b);
    if (!b.gather) continue;
    b.gather->wait();
    b.gather.reset();
    launch_next_gather();
  }
}

void GradBuckets::finish_param_gather() {
  for (auto& b : buckets_)
    if (b.gather_pending) launch_gather(b);
  wait_gathers();
}

Tensor GradBuckets::gather_main_values() {
  finish_param_gather();
  Tensor full = device_.allocate(Shape{params_.numel()}, DType::fp32, MemoryUse::communication);
  params_.store_main_values(device_, stream_, full);
  // Holding every main value (fp32 compute), a rank's are current where the step gathers
  // them, all but the FP8 parameters' (the step gathers their codes).
  const bool all = params_.holds_all_main();
  for (auto& b : buckets_)
    if (!all || b.fp8) launch_gather(b, full);
  wait_gathers();
  return full;
}

}  // namespace tandem
