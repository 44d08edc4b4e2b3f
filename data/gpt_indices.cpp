// Megatron's index construction (gpt_dataset.py and helpers.cpp), rewritten: the same
// epoch count, final-epoch rule, sample boundaries and shuffle structure.
#include "data/gpt_indices.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace tandem::data {

EpochPlan plan_epochs(std::int64_t tokens_per_epoch, std::optional<std::int64_t> num_samples,
                      std::int64_t sequence_length) {
  if (tokens_per_epoch < 2 || sequence_length < 1)
    throw std::invalid_argument("plan_epochs needs at least 2 tokens per epoch");
  EpochPlan plan;
  plan.tokens_per_epoch = tokens_per_epoch;
  if (!num_samples) return plan;
  // The smallest number of epochs whose tokens cover num_samples × seq_length + 1 (one
  // extra token for the last sample's labels).
  const std::int64_t requested = *num_samples * sequence_length + 1;
  plan.num_epochs =
      std::max<std::int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
  if (plan.num_epochs == 1) return plan;

  plan.num_samples_sans_final_epoch =
      ((plan.num_epochs - 1) * tokens_per_epoch - 1) / sequence_length;
  const std::int64_t from_final_epoch = *num_samples - plan.num_samples_sans_final_epoch;
  const std::int64_t per_epoch = (tokens_per_epoch - 1) / sequence_length;
  if (from_final_epoch < 0 || from_final_epoch > per_epoch + 1)
    throw std::logic_error("plan_epochs: " + std::to_string(from_final_epoch) +
                           " samples from the final epoch, which holds " +
                           std::to_string(per_epoch));
  constexpr double kThreshold = 0.80;
  plan.separate_final_epoch =
      from_final_epoch < static_cast<std::int64_t>(kThreshold * static_cast<double>(per_epoch));
  return plan;
}

std::int64_t num_samples_in(const EpochPlan& plan, std::int64_t sequence_length) {
  return (plan.num_epochs * plan.tokens_per_epoch - 1) / sequence_length;
}

namespace {

std::vector<std::int32_t> repeated_and_shuffled(SequenceRange range, std::int64_t epochs,
                                                IndexRng& rng) {
  std::vector<std::int32_t> index;
  index.reserve(static_cast<std::size_t>(epochs * range.size()));
  for (std::int64_t e = 0; e < epochs; ++e)
    for (std::int64_t id = range.begin; id < range.end; ++id)
      index.push_back(static_cast<std::int32_t>(id));
  rng.shuffle(std::span<std::int32_t>(index));
  return index;
}

}  // namespace

std::vector<std::int32_t> build_document_index(SequenceRange range, const EpochPlan& plan,
                                               IndexRng& rng) {
  if (!plan.separate_final_epoch) return repeated_and_shuffled(range, plan.num_epochs, rng);
  auto index = repeated_and_shuffled(range, plan.num_epochs - 1, rng);
  const auto last = repeated_and_shuffled(range, 1, rng);
  index.insert(index.end(), last.begin(), last.end());
  return index;
}

std::vector<SamplePosition> build_sample_index(std::span<const std::int32_t> sizes,
                                               std::span<const std::int32_t> document_index,
                                               std::int64_t sequence_length,
                                               const EpochPlan& plan) {
  const std::int64_t num_samples = num_samples_in(plan, sequence_length);
  const auto length_at = [&](std::size_t position) -> std::int64_t {
    return sizes[static_cast<std::size_t>(document_index[position])];
  };
  std::vector<SamplePosition> index;
  index.reserve(static_cast<std::size_t>(num_samples + 1));
  std::size_t position = 0;  // into document_index
  std::int64_t offset = 0;   // into the sequence at `position`
  index.push_back({0, 0});
  for (std::int64_t sample = 1; sample <= num_samples; ++sample) {
    std::int64_t remaining = sequence_length + 1;  // tokens this sample still needs
    while (remaining != 0) {
      const std::int64_t available = length_at(position) - offset;
      remaining -= available;
      if (remaining <= 0) {
        // The sample ends inside this sequence; the next one starts on its last token.
        offset += remaining + available - 1;
        remaining = 0;
      } else if (position + 1 == document_index.size()) {
        // Out of sequences: only the last sample can get here, ending the stream.
        if (sample != num_samples) throw std::logic_error("build_sample_index ran out of tokens");
        offset = length_at(position) - 1;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    index.push_back({static_cast<std::int64_t>(position), offset});
  }
  return index;
}

DocumentStarts::DocumentStarts(std::span<const std::int32_t> sizes,
                               std::span<const std::int32_t> document_index) {
  block_starts_.reserve(document_index.size() / kStride + 1);
  for (std::size_t p = 0; p < document_index.size(); ++p) {
    if (p % kStride == 0) block_starts_.push_back(tokens_);
    tokens_ += sizes[static_cast<std::size_t>(document_index[p])];
  }
}

SamplePosition DocumentStarts::sample_start(std::int64_t sample, std::int64_t sequence_length,
                                            std::span<const std::int32_t> sizes,
                                            std::span<const std::int32_t> document_index) const {
  const std::int64_t token = sample * sequence_length;
  if (sample < 0 || token >= tokens_)
    throw std::out_of_range("sample " + std::to_string(sample) + " starts past the " +
                            std::to_string(tokens_) + " tokens of the document index");
  // The last block starting at or before the token holds it (the next starts after it).
  const auto block = std::upper_bound(block_starts_.begin(), block_starts_.end(), token) - 1;
  auto position = static_cast<std::size_t>(block - block_starts_.begin()) * kStride;
  std::int64_t start = *block;
  // Then the document holding it: empty documents before it are passed over, as
  // build_sample_index passes them.
  for (;;) {
    const std::int64_t length = sizes[static_cast<std::size_t>(document_index[position])];
    if (token < start + length) break;
    start += length;
    ++position;
  }
  return {static_cast<std::int64_t>(position), token - start};
}

template <typename T>
std::vector<T> build_shuffle_index(std::int64_t num_samples, const EpochPlan& plan, IndexRng& rng) {
  if (static_cast<std::uint64_t>(num_samples) > std::numeric_limits<T>::max())
    throw std::invalid_argument("build_shuffle_index: " + std::to_string(num_samples) +
                                " samples do not fit its index type");
  std::vector<T> index(static_cast<std::size_t>(num_samples));
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<T>(i);
  const std::int64_t first =
      plan.separate_final_epoch ? plan.num_samples_sans_final_epoch : num_samples;
  const auto split_at = static_cast<std::size_t>(first);
  rng.shuffle(std::span<T>(index).first(split_at));
  rng.shuffle(std::span<T>(index).subspan(split_at));
  return index;
}

template std::vector<std::uint32_t> build_shuffle_index<std::uint32_t>(std::int64_t,
                                                                       const EpochPlan&, IndexRng&);
template std::vector<std::int64_t> build_shuffle_index<std::int64_t>(std::int64_t, const EpochPlan&,
                                                                     IndexRng&);

}  // namespace tandem::data
