// A data set for tests whose tokens are a fixed function of the sample index, so the cpu
// binding has something to train on and every run reads the same samples.
#pragma once

#include <cstdint>
#include <span>

#include "data/sample_dataset.hpp"

namespace tandem::testing {

class CountingSamples : public data::SampleDataset {
 public:
  CountingSamples(std::int64_t seq, int vocab) : seq_(seq), vocab_(vocab) {}
  std::int64_t size() const override { return 100000; }
  std::int64_t sequence_length() const override { return seq_; }
  void read_sample(std::int64_t index, std::span<std::int32_t> text) const override {
    for (std::size_t i = 0; i < text.size(); ++i)
      text[i] = static_cast<std::int32_t>((index * 7 + static_cast<std::int64_t>(i)) % vocab_);
  }

 private:
  std::int64_t seq_;
  int vocab_;
};

}  // namespace tandem::testing
