// The three indices of Megatron's GPTDataset, as pure functions of the sequence lengths:
//   document index: the split's sequence ids repeated once per epoch, shuffled as one
//                   array (Megatron does not shuffle epoch by epoch: a document can come
//                   twice before another comes once), except that a final epoch used
//                   under 80% is shuffled on its own and kept last;
//   sample index:   (position in the document index, token offset) where each sample
//                   starts, num_samples + 1 rows; sample i is the seq_length + 1 tokens
//                   from row i's position up to and including row i + 1's, so
//                   consecutive samples share one token (the last label of one is the
//                   first input of the next). Row i is where token i · seq_length of the
//                   documents concatenated in document-index order lies, so GptDataset
//                   finds it when asked (DocumentStarts) instead of storing the rows
//                   (16 bytes a sample, 100 MB for the mock data at seq_length 32);
//   shuffle index:  a permutation of the samples.
// Worked example: sequences of 5 and 3 tokens (ids 0, 1), seq_length 3, 2 samples
// requested. An epoch has 8 tokens; 2 × 3 + 1 = 7 fit, so 1 epoch, (8 - 1) / 3 = 2
// samples. Document index [1, 0] (after a shuffle); sample index (0, 0), (1, 0), (1, 3):
// sample 0 = seq 1 [0, 3) + seq 0 [0, 1), sample 1 = seq 0 [0, 4).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "data/index_rng.hpp"
#include "data/split.hpp"

namespace tandem::data {

struct SamplePosition {
  std::int64_t document;  // position in the document index
  std::int64_t offset;    // token offset in that sequence
  bool operator==(const SamplePosition&) const = default;
};

// How many epochs a request takes, and whether the last one is shuffled apart.
struct EpochPlan {
  std::int64_t tokens_per_epoch = 0;
  std::int64_t num_epochs = 1;
  // The last epoch is shuffled separately when fewer than 80% of its samples are used,
  // so the samples actually drawn from it are a uniform pick.
  bool separate_final_epoch = false;
  std::int64_t num_samples_sans_final_epoch = 0;  // samples the first num_epochs - 1 give
};

// num_samples nullopt: one epoch. Megatron's _get_num_epochs and its final-epoch rule.
EpochPlan plan_epochs(std::int64_t tokens_per_epoch, std::optional<std::int64_t> num_samples,
                      std::int64_t sequence_length);

// Samples the plan's epochs hold: (num_epochs × tokens_per_epoch − 1) / seq_length.
std::int64_t num_samples_in(const EpochPlan& plan, std::int64_t sequence_length);

// Sequence ids range.begin … range.end − 1, num_epochs times, shuffled as one array (the
// final epoch on its own when separate_final_epoch).
std::vector<std::int32_t> build_document_index(SequenceRange range, const EpochPlan& plan,
                                               IndexRng& rng);

// helpers.cpp's build_sample_idx, row by row; `sizes` holds every sequence's length by id.
// The reference DocumentStarts is checked against (GptDataset does not build it).
std::vector<SamplePosition> build_sample_index(std::span<const std::int32_t> sizes,
                                               std::span<const std::int32_t> document_index,
                                               std::int64_t sequence_length, const EpochPlan& plan);

// Where the documents of the document index start in their concatenation, kept at every
// kStride-th position and walked from there: the sample index's rows on demand, at 8 bytes
// per 64 documents (the rows take 16 bytes a sample; the document index itself 4 a document).
class DocumentStarts {
 public:
  static constexpr std::int64_t kStride = 64;
  DocumentStarts(std::span<const std::int32_t> sizes, std::span<const std::int32_t> document_index);
  // build_sample_index's row `sample` (0 … num_samples_in(plan, seq_length)): the last
  // document position holding token sample · sequence_length, and the offset in it.
  // `sizes` and `document_index` are those it was built from.
  SamplePosition sample_start(std::int64_t sample, std::int64_t sequence_length,
                              std::span<const std::int32_t> sizes,
                              std::span<const std::int32_t> document_index) const;
  std::int64_t tokens() const { return tokens_; }

 private:
  std::vector<std::int64_t> block_starts_;  // [k]: the tokens before position k · kStride
  std::int64_t tokens_ = 0;
};

// [0, num_samples) shuffled; with a separate final epoch, [0, first) and
// [first, num_samples) are shuffled apart. T: std::uint32_t where num_samples fits (as
// Megatron's uint32 shuffle index), else std::int64_t; the same values either way.
template <typename T>
std::vector<T> build_shuffle_index(std::int64_t num_samples, const EpochPlan& plan, IndexRng& rng);

}  // namespace tandem::data
