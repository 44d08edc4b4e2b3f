// Sampler arithmetic and sample stacking.
#include "data/microbatch.hpp"

#include <span>
#include <stdexcept>

namespace tandem::data {

std::vector<std::int64_t> microbatch_sample_indices(std::int64_t consumed_samples,
                                                    std::int64_t micro_batch_size,
                                                    std::int64_t dp_rank, std::int64_t dp_size) {
  if (consumed_samples < 0 || micro_batch_size < 1 || dp_size < 1 || dp_rank < 0 ||
      dp_rank >= dp_size)
    throw std::invalid_argument(
        "microbatch_sample_indices: need consumed ≥ 0, micro batch ≥ 1, "
        "0 ≤ dp_rank < dp_size");
  std::vector<std::int64_t> indices(static_cast<std::size_t>(micro_batch_size));
  const std::int64_t first = consumed_samples + dp_rank * micro_batch_size;
  for (std::int64_t i = 0; i < micro_batch_size; ++i)
    indices[static_cast<std::size_t>(i)] = first + i;
  return indices;
}

Microbatch get_microbatch(const SampleDataset& dataset, const std::vector<std::int64_t>& indices) {
  Microbatch batch;
  batch.micro_batch_size = static_cast<std::int64_t>(indices.size());
  batch.sequence_length = dataset.sequence_length();
  const auto n = static_cast<std::size_t>(batch.sequence_length);
  batch.tokens.resize(indices.size() * n);
  batch.labels.resize(indices.size() * n);
  std::vector<std::int32_t> text(n + 1);
  for (std::size_t row = 0; row < indices.size(); ++row) {
    dataset.read_sample(indices[row], text);
    std::copy(text.begin(), text.end() - 1,
              batch.tokens.begin() + static_cast<std::ptrdiff_t>(row * n));
    std::copy(text.begin() + 1, text.end(),
              batch.labels.begin() + static_cast<std::ptrdiff_t>(row * n));
  }
  return batch;
}

}  // namespace tandem::data
