// Megatron's MockGPTLowLevelDataset: 100000 made-up sequences of 1 … 4095 tokens, sequence
// i of length n being 1, 2, …, n − 1 (mod the vocabulary size) then the end-of-document
// token. Lengths come from std::mt19937_64 seeded with 0 (Megatron: numpy's default_rng(0),
// so the lengths differ from Megatron's, their range and the token pattern do not).
// With --mock-data this stands in for the indexed dataset; nothing is read from disk.
#pragma once

#include <cstdint>
#include <vector>

#include "data/token_source.hpp"

namespace tandem::data {

struct MockDataConfig {
  std::int64_t vocab_size = 50257;
  std::int32_t eod = 50256;
  std::int64_t num_sequences = 100000;
  std::int32_t max_sequence_length = 4096;  // lengths are in [1, max_sequence_length)
};

class MockTokenSource : public TokenSource {
 public:
  explicit MockTokenSource(const MockDataConfig& config = {});
  std::span<const std::int32_t> sequence_lengths() const override { return lengths_; }
  void read_tokens(std::int64_t sequence, std::int64_t offset,
                   std::span<std::int32_t> out) const override;
  std::string name() const override { return "mock"; }

 private:
  MockDataConfig config_;
  std::vector<std::int32_t> lengths_;  // (num_sequences,)
};

}  // namespace tandem::data
