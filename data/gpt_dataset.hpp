// Megatron's GPTDataset over one split of one token source: the split's documents,
// repeated once per epoch and shuffled together, are concatenated and cut into samples of
// seq_length + 1 tokens, served in shuffled order (gpt_indices.hpp has the index
// structure and a worked example). Built eagerly and deterministically from the config's
// seed; no index cache on disk. The sample index is not stored: a sample's start is found
// in the documents' starts when it is read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/gpt_indices.hpp"
#include "data/sample_dataset.hpp"
#include "data/split.hpp"
#include "data/token_source.hpp"

namespace tandem::data {

struct GptDatasetConfig {
  std::int64_t sequence_length = 0;  // --seq-length; each sample reads one token more
  std::uint64_t random_seed = 1234;  // --seed (Megatron's default); every split and every
                                     // blended dataset shuffles from this same seed
};

class GptDataset : public SampleDataset {
 public:
  // `range`: the sequences of this split. `num_samples`: how many samples the caller will
  // draw (the dataset holds at least that many: whole epochs), nullopt for one epoch.
  // Throws ConfigError when the split has fewer than 2 tokens or seq_length < 2.
  GptDataset(std::shared_ptr<const TokenSource> source, SequenceRange range,
             std::optional<std::int64_t> num_samples, Split split, const GptDatasetConfig& config);

  std::int64_t size() const override;
  std::int64_t sequence_length() const override { return config_.sequence_length; }
  void read_sample(std::int64_t index, std::span<std::int32_t> text) const override;

  const EpochPlan& epochs() const { return plan_; }
  std::span<const std::int32_t> document_index() const { return document_index_; }
  // The shuffle index's entry i: which unshuffled sample the i-th sample is.
  std::int64_t shuffled(std::int64_t i) const;
  SequenceRange range() const { return range_; }
  Split split() const { return split_; }
  std::optional<std::int64_t> num_samples() const { return num_samples_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  SequenceRange range_;
  std::optional<std::int64_t> num_samples_;
  Split split_;
  GptDatasetConfig config_;
  EpochPlan plan_;
  std::vector<std::int32_t> document_index_;  // (num_epochs × documents,) sequence ids
  std::optional<DocumentStarts> document_starts_;
  std::int64_t size_ = 0;  // samples
  // (samples,): uint32 where the samples fit (Megatron's choice too), else int64
  std::vector<std::uint32_t> shuffle_index_32_;
  std::vector<std::int64_t> shuffle_index_64_;
};

}  // namespace tandem::data
