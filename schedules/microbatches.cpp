// Megatron's microbatch calculators: ConstantNumMicroBatchesCalculator and
// RampupBatchsizeNumMicroBatchesCalculator (megatron/core/num_microbatches_calculator.py,
// as of the last version that had the ramp-up; Megatron-Core has since replaced it with a
// step schedule). Megatron checks divisibility of the current global batch only when the
// training loop updates; tandem checks every batch size the ramp-up can reach up front, so a
// bad configuration fails before the first step rather than in the middle of the ramp.
#include "schedules/microbatches.hpp"

#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace tandem {
namespace {

std::string n(std::int64_t v) {
  return std::to_string(v);
}

std::string rampup_value(const RampupBatchSize& r) {
  return n(r.start) + " " + n(r.increment) + " " + n(r.samples);
}

void check_positive(std::vector<Violation>& out, const char* field, std::int64_t value) {
  if (value < 1) out.push_back({field, n(value), "must be at least 1"});
}

// `batch` (a global batch size the run will use) must split into whole microbatches per
// data-parallel rank.
void check_divisible(std::vector<Violation>& out, const char* field, const std::string& value,
                     const std::string& what, std::int64_t batch, std::int64_t micro, int dp) {
  const std::int64_t unit = micro * dp;
  if (batch % unit != 0)
    out.push_back({field, value,
                   what + " (" + n(batch) + ") must be divisible by micro_batch_size (" + n(micro) +
                       ") x data_parallel_size (" + n(dp) + ") = " + n(unit)});
}

// Megatron asserts start, increment > 0 and samples >= 0, then divides by the number of
// increments and by the samples per increment: start == global or samples == 0 end in a
// ZeroDivisionError there, so both are rejected here with the rule spelled out.
void check_rampup_shape(std::vector<Violation>& out, const RampupBatchSize& r,
                        std::int64_t global) {
  const std::string v = rampup_value(r);
  if (r.start < 1 || r.increment < 1 || r.samples < 1) {
    out.push_back({"rampup_batch_size", v, "start, increment and samples must all be at least 1"});
    return;
  }
  const std::int64_t diff = global - r.start;
  if (diff < 1)
    out.push_back(
        {"rampup_batch_size", v,
         "start (" + n(r.start) + ") must be below global_batch_size (" + n(global) + ")"});
  else if (diff % r.increment != 0)
    out.push_back({"rampup_batch_size", v,
                   "global_batch_size - start (" + n(diff) + ") must be divisible by increment (" +
                       n(r.increment) + ")"});
}

void check(std::int64_t global, std::int64_t micro, int dp,
           const std::optional<RampupBatchSize>& rampup) {
  std::vector<Violation> out;
  check_positive(out, "global_batch_size", global);
  check_positive(out, "micro_batch_size", micro);
  check_positive(out, "data_parallel_size", dp);
  if (rampup) check_rampup_shape(out, *rampup, global);
  if (!out.empty()) throw ConfigError(std::move(out));
  // The batch sizes reached are start + k · increment, k = 0 … steps: all divide into
  // micro · dp exactly when start and increment do (and then so does the global batch).
  check_divisible(out, "global_batch_size", n(global), "global_batch_size", global, micro, dp);
  if (rampup) {
    const std::string v = rampup_value(*rampup);
    check_divisible(out, "rampup_batch_size", v, "start", rampup->start, micro, dp);
    check_divisible(out, "rampup_batch_size", v, "increment", rampup->increment, micro, dp);
  }
  if (!out.empty()) throw ConfigError(std::move(out));
}

}  // namespace

MicrobatchCalculator::MicrobatchCalculator(std::int64_t global_batch_size,
                                           std::int64_t micro_batch_size, int data_parallel_size,
                                           std::optional<RampupBatchSize> rampup)
    : global_batch_size_(global_batch_size),
      micro_batch_size_(micro_batch_size),
      data_parallel_size_(data_parallel_size),
      rampup_(rampup) {
  check(global_batch_size, micro_batch_size, data_parallel_size, rampup);
  update(0);
}

// Megatron's RampupBatchsizeNumMicroBatchesCalculator.update: past `samples` the batch is the
// global one; before (and at) it, steps = int(consumed / (samples / increments)) in floating
// point, which is reproduced with the same doubles so both agree at the step boundaries.
void MicrobatchCalculator::update(std::int64_t consumed_samples) {
  if (consumed_samples < 0)
    throw std::invalid_argument("consumed_samples must be >= 0, got " + n(consumed_samples));
  current_global_batch_size_ = global_batch_size_;
  if (rampup_ && consumed_samples <= rampup_->samples) {
    const std::int64_t increments = (global_batch_size_ - rampup_->start) / rampup_->increment;
    const double samples_per_increment =
        static_cast<double>(rampup_->samples) / static_cast<double>(increments);
    const auto steps =
        static_cast<std::int64_t>(static_cast<double>(consumed_samples) / samples_per_increment);
    current_global_batch_size_ = rampup_->start + steps * rampup_->increment;
  }
  num_microbatches_ = current_global_batch_size_ / (micro_batch_size_ * data_parallel_size_);
}

}  // namespace tandem
