// Building GPTDataset's indices and reading a sample through them.
#include "data/gpt_dataset.hpp"

#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace tandem::data {

GptDataset::GptDataset(std::shared_ptr<const TokenSource> source, SequenceRange range,
                       std::optional<std::int64_t> num_samples, Split split,
                       const GptDatasetConfig& config)
    : source_(std::move(source)),
      range_(range),
      num_samples_(num_samples),
      split_(split),
      config_(config) {
  const std::string where = source_->name() + " (" + std::string(split_name(split)) +
                            " split, sequences [" + std::to_string(range.begin) + ", " +
                            std::to_string(range.end) + "))";
  if (config_.sequence_length < 2)
    throw ConfigError("seq_length", std::to_string(config_.sequence_length), "must be at least 2");
  if (num_samples && *num_samples < 0)
    throw ConfigError("num_samples", std::to_string(*num_samples), "must be ≥ 0");
  const auto sizes = source_->sequence_lengths();
  if (range.begin < 0 || range.end < range.begin ||
      range.end > static_cast<std::int64_t>(sizes.size()) ||
      range.end > std::numeric_limits<std::int32_t>::max())
    throw std::out_of_range("sequence range outside " + where);
  const std::int64_t tokens =
      std::accumulate(sizes.begin() + range.begin, sizes.begin() + range.end, std::int64_t{0});
  if (tokens < 2)
    throw ConfigError({{"split", std::string(split_name(split)),
                        "has " + std::to_string(tokens) + " tokens in " + where +
                            "; a sample needs at least 2 (change --split or add data)"}});

  plan_ = plan_epochs(tokens, num_samples_, config_.sequence_length);
  IndexRng rng(config_.random_seed);
  document_index_ = build_document_index(range_, plan_, rng);
  document_starts_.emplace(sizes, document_index_);
  size_ = num_samples_in(plan_, config_.sequence_length);
  if (size_ <= std::numeric_limits<std::uint32_t>::max())
    shuffle_index_32_ = build_shuffle_index<std::uint32_t>(size_, plan_, rng);
  else
    shuffle_index_64_ = build_shuffle_index<std::int64_t>(size_, plan_, rng);
}

std::int64_t GptDataset::size() const {
  return size_;
}

std::int64_t GptDataset::shuffled(std::int64_t i) const {
  if (i < 0 || i >= size_)
    throw std::out_of_range("shuffle index " + std::to_string(i) + " of a dataset of " +
                            std::to_string(size_));
  const auto k = static_cast<std::size_t>(i);
  return shuffle_index_64_.empty() ? shuffle_index_32_[k] : shuffle_index_64_[k];
}

void GptDataset::read_sample(std::int64_t index, std::span<std::int32_t> text) const {
  const auto needed = static_cast<std::size_t>(config_.sequence_length + 1);
  if (index < 0 || index >= size())
    throw std::out_of_range("sample " + std::to_string(index) + " of a dataset of " +
                            std::to_string(size()));
  if (text.size() != needed) throw std::invalid_argument("read_sample needs seq_length + 1 tokens");
  const std::int64_t j = shuffled(index);
  const auto sizes = source_->sequence_lengths();
  const SamplePosition begin =
      document_starts_->sample_start(j, config_.sequence_length, sizes, document_index_);
  const SamplePosition end =
      document_starts_->sample_start(j + 1, config_.sequence_length, sizes, document_index_);
  std::size_t written = 0;
  for (std::int64_t p = begin.document; p <= end.document; ++p) {
    const std::int64_t sequence = document_index_[static_cast<std::size_t>(p)];
    const std::int64_t from = p == begin.document ? begin.offset : 0;
    // The last sequence contributes up to and including the next sample's first token.
    const std::int64_t to = p == end.document
                                ? end.offset + 1
                                : source_->sequence_lengths()[static_cast<std::size_t>(sequence)];
    const auto count = static_cast<std::size_t>(to - from);
    if (written + count > needed) throw std::logic_error("sample index spans too many tokens");
    source_->read_tokens(sequence, from, text.subspan(written, count));
    written += count;
  }
  if (written != needed) throw std::logic_error("sample index spans too few tokens");
}

}  // namespace tandem::data
