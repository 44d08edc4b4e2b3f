// Splitting a sample's seq_length + 1 tokens into inputs and shifted targets.
#include "data/sample_dataset.hpp"

namespace tandem::data {

Sample SampleDataset::get(std::int64_t index) const {
  const auto n = static_cast<std::size_t>(sequence_length());
  std::vector<std::int32_t> text(n + 1);
  read_sample(index, text);
  return {std::vector<std::int32_t>(text.begin(), text.end() - 1),
          std::vector<std::int32_t>(text.begin() + 1, text.end())};
}

}  // namespace tandem::data
