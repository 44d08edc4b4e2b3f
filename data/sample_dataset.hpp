// What the training loop draws from: numbered samples of seq_length + 1 tokens, each
// split into inputs (tokens) and targets (labels, the inputs shifted by one). GPTDataset
// and the blend of several implement it; microbatch.hpp stacks samples into batches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::data {

struct Sample {
  std::vector<std::int32_t> tokens;  // (seq_length,) text[0 … seq_length - 1]
  std::vector<std::int32_t> labels;  // (seq_length,) text[1 … seq_length]
};

class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual std::int64_t size() const = 0;             // samples
  virtual std::int64_t sequence_length() const = 0;  // seq_length (tokens per input)
  // Writes sample `index`'s seq_length + 1 tokens to `text`. Throws std::out_of_range
  // for an index outside [0, size()). Safe to call from several threads at once.
  virtual void read_sample(std::int64_t index, std::span<std::int32_t> text) const = 0;

  Sample get(std::int64_t index) const;
};

}  // namespace tandem::data
