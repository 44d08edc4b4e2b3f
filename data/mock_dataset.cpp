// The mock dataset's lengths (drawn once) and tokens (computed on demand).
#include "data/mock_dataset.hpp"

#include <random>
#include <stdexcept>
#include <string>

namespace tandem::data {

MockTokenSource::MockTokenSource(const MockDataConfig& config) : config_(config) {
  if (config_.vocab_size < 1 || config_.num_sequences < 0 || config_.max_sequence_length < 2)
    throw std::invalid_argument("mock data needs a vocabulary and sequences of ≥ 1 token");
  std::mt19937_64 rng(0);  // Megatron hard-codes seed 0 for the mock lengths
  const auto span = static_cast<std::uint64_t>(config_.max_sequence_length - 1);
  lengths_.resize(static_cast<std::size_t>(config_.num_sequences));
  for (auto& length : lengths_) length = static_cast<std::int32_t>(1 + rng() % span);
}

void MockTokenSource::read_tokens(std::int64_t sequence, std::int64_t offset,
                                  std::span<std::int32_t> out) const {
  const std::int64_t length = lengths_.at(static_cast<std::size_t>(sequence));
  const auto count = static_cast<std::int64_t>(out.size());
  if (offset < 0 || count > length - offset)
    throw std::out_of_range("tokens past the end of mock sequence " + std::to_string(sequence));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t position = offset + i;
    out[static_cast<std::size_t>(i)] =
        position == length - 1 ? config_.eod
                               : static_cast<std::int32_t>((position + 1) % config_.vocab_size);
  }
}

}  // namespace tandem::data
