// What GPTDataset draws samples from (Megatron's "low-level dataset"): numbered token
// sequences of known lengths. An indexed dataset on disk is one; the mock dataset, which
// makes its tokens up, is another.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tandem::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::span<const std::int32_t> sequence_lengths() const = 0;  // (N,) tokens each
  std::int64_t sequence_count() const {
    return static_cast<std::int64_t>(sequence_lengths().size());
  }
  // Copies tokens [offset, offset + out.size()) of `sequence` into `out`; the range must
  // lie inside the sequence. Safe to call from several threads at once.
  virtual void read_tokens(std::int64_t sequence, std::int64_t offset,
                           std::span<std::int32_t> out) const = 0;
  // Names the source in messages (a path prefix, "mock").
  virtual std::string name() const = 0;
};

}  // namespace tandem::data
