#include "exec/train/grad_buckets.hpp"

#include <algorithm>
#include <numeric>

namespace tandem {

GradBuckets::GradBuckets(ParameterSet& params, std::int64_t bucket_elements, Communicator& dp,
                         Stream& stream)
    : params_(params), dp_(dp), stream_(stream) {
  const int n = static_cast<int>(params.all().size());
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return params[a].grad_offset < params[b].grad_offset; });
  bucket_of_.assign(static_cast<std::size_t>(n), 0);
  for (int i : order) {
    const auto& p = params[i];
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= bucket_elements)
      buckets_.push_back({p.grad_offset, p.grad_offset, 0, 0, nullptr});
    Bucket& b = buckets_.back();
    b.end = p.grad_offset + p.local_shape.numel();
    ++b.parameters;
    bucket_of_[static_cast<std::size_t>(i)] = static_cast<int>(buckets_.size()) - 1;
  }
  ready_.assign(static_cast<std::size_t>(n), false);
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
  Tensor view = params_.grads().view(Shape{b.end - b.begin}, b.begin);
  b.work = dp_.all_reduce(stream_, view, ReduceOp::sum);
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
  }
}

}  // namespace tandem
