// Microbatch calculator: how many microbatches a rank runs per iteration.
// m = global batch / (micro batch · dp). With Megatron's batch-size ramp-up
// (--rampup-batch-size start increment samples) the global batch starts at `start`
// and grows by `increment` every samples / ((global - start) / increment) consumed
// samples until it reaches the configured global batch.
//
// Example: start 16, increment 16, samples 1000, global 64, micro 1, dp 4:
//   increments = (64 − 16) / 16 = 3, samples per increment = 1000 / 3 = 333.3,
//   batch = 16 + 16 · int(consumed / 333.3) up to consumed = 1000, then 64:
//   consumed 0 → batch 16 (m = 4); 400 → 32 (m = 8); 700 → 48 (m = 12); ≥ 1000 → 64 (m = 16).
// Every batch size the ramp can reach (start + k · increment) must divide by micro · dp. The
// constructor checks them all, and the ramp's shape, up front and throws ConfigError; Megatron
// checks only the sizes a run reaches, at update time, so a ramp that skips a whole increment
// (samples per increment < batch) can pass there and be rejected here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tandem {

struct RampupBatchSize {
  std::int64_t start = 0;
  std::int64_t increment = 0;
  std::int64_t samples = 0;
};

class MicrobatchCalculator {
 public:
  // Throws ConfigError when the batch sizes do not divide as Megatron requires.
  MicrobatchCalculator(std::int64_t global_batch_size, std::int64_t micro_batch_size,
                       int data_parallel_size, std::optional<RampupBatchSize> rampup = {});

  // Update for the number of samples consumed so far (Megatron's update_num_microbatches).
  void update(std::int64_t consumed_samples);

  std::int64_t num_microbatches() const { return num_microbatches_; }
  std::int64_t current_global_batch_size() const { return current_global_batch_size_; }
  std::int64_t micro_batch_size() const { return micro_batch_size_; }

 private:
  std::int64_t global_batch_size_;
  std::int64_t micro_batch_size_;
  int data_parallel_size_;
  std::optional<RampupBatchSize> rampup_;
  std::int64_t num_microbatches_ = 0;
  std::int64_t current_global_batch_size_ = 0;
};

}  // namespace tandem
