// GPTDataset's indices, checked as properties against brute force: the epoch count and
// sample count are Megatron's formulas, every sample is the next seq_length + 1 tokens
// of the documents concatenated in document-index order, the index shuffles are
// permutations with Megatron's structure, and the same seed gives the same samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.hpp"
#include "data/gpt_dataset.hpp"
#include "data/microbatch.hpp"
#include "data/mock_dataset.hpp"
#include "tests/data/data_test_util.hpp"

namespace tandem::data {
namespace {

using testing::MemoryTokenSource;

// Sequence d holds the tokens d·1000, d·1000 + 1, …: every token says where it came from.
std::shared_ptr<MemoryTokenSource> make_source(const std::vector<int>& lengths) {
  std::vector<std::vector<std::int32_t>> sequences;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    std::vector<std::int32_t> s;
    for (int k = 0; k < lengths[d]; ++k) s.push_back(static_cast<std::int32_t>(d) * 1000 + k);
    sequences.push_back(s);
  }
  return std::make_shared<MemoryTokenSource>(sequences);
}

std::vector<int> random_lengths(std::mt19937& rng, int n, int max) {
  std::vector<int> lengths(static_cast<std::size_t>(n));
  for (auto& l : lengths) l = 1 + static_cast<int>(rng() % static_cast<unsigned>(max));
  return lengths;
}

// Brute force: the smallest number of epochs covering num_samples × L + 1 tokens.
std::int64_t expected_epochs(std::int64_t tokens, std::int64_t num_samples, std::int64_t L) {
  std::int64_t epochs = 1;
  while (epochs * tokens < num_samples * L + 1) ++epochs;
  return epochs;
}

void check_structure(const GptDataset& ds, const MemoryTokenSource& source,
                     std::optional<std::int64_t> num_samples) {
  const std::int64_t L = ds.sequence_length();
  const SequenceRange range = ds.range();
  std::int64_t tokens = 0;
  for (std::int64_t d = range.begin; d < range.end; ++d)
    tokens += static_cast<std::int64_t>(source.sequence(d).size());
  const std::int64_t epochs = num_samples ? expected_epochs(tokens, *num_samples, L) : 1;
  ASSERT_EQ(ds.epochs().num_epochs, epochs);
  ASSERT_EQ(ds.size(), (epochs * tokens - 1) / L);
  if (num_samples) {
    ASSERT_GE(ds.size(), *num_samples);
  }

  // Document index: each sequence of the range once per epoch; the final epoch on its
  // own when it is separated.
  std::map<std::int32_t, std::int64_t> counts;
  for (const auto d : ds.document_index()) ++counts[d];
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(range.size()));
  for (const auto& [d, n] : counts) {
    EXPECT_GE(d, range.begin);
    EXPECT_LT(d, range.end);
    EXPECT_EQ(n, epochs);
  }
  if (ds.epochs().separate_final_epoch) {
    std::vector<std::int32_t> last(ds.document_index().end() - range.size(),
                                   ds.document_index().end());
    std::sort(last.begin(), last.end());
    for (std::int64_t i = 0; i < range.size(); ++i)
      EXPECT_EQ(last[static_cast<std::size_t>(i)], range.begin + i);
  }

  // Shuffle index: a permutation, in two parts when the final epoch is separate.
  std::vector<std::int64_t> shuffle;
  for (std::int64_t i = 0; i < ds.size(); ++i) shuffle.push_back(ds.shuffled(i));
  const auto first = static_cast<std::ptrdiff_t>(
      ds.epochs().separate_final_epoch ? ds.epochs().num_samples_sans_final_epoch : ds.size());
  std::sort(shuffle.begin(), shuffle.begin() + first);
  std::sort(shuffle.begin() + first, shuffle.end());
  for (std::int64_t i = 0; i < ds.size(); ++i) EXPECT_EQ(shuffle[static_cast<std::size_t>(i)], i);

  // Samples: unshuffled sample j is tokens [j·L, j·L + L] of the concatenation.
  std::vector<std::int32_t> stream;
  for (const auto d : ds.document_index())
    stream.insert(stream.end(), source.sequence(d).begin(), source.sequence(d).end());
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    const std::int64_t j = ds.shuffled(i);
    const Sample s = ds.get(i);
    ASSERT_EQ(s.tokens.size(), static_cast<std::size_t>(L));
    ASSERT_EQ(s.labels.size(), static_cast<std::size_t>(L));
    const auto begin = stream.begin() + j * L;
    ASSERT_TRUE(std::equal(s.tokens.begin(), s.tokens.end(), begin)) << "sample " << i;
    ASSERT_TRUE(std::equal(s.labels.begin(), s.labels.end(), begin + 1)) << "sample " << i;
  }
}

TEST(GptDataset, WorkedExampleFromTheHeader) {
  const auto source = make_source({5, 3});
  const GptDataset ds(source, {0, 2}, 2, Split::train, {.sequence_length = 3, .random_seed = 1});
  EXPECT_EQ(ds.epochs().num_epochs, 1);
  EXPECT_EQ(ds.size(), 2);
  check_structure(ds, *source, 2);
}

TEST(GptIndices, WorkedExampleFromTheHeader) {
  const std::vector<std::int32_t> sizes{5, 3}, document_index{1, 0};
  const EpochPlan plan = plan_epochs(8, 2, 3);
  EXPECT_EQ(plan.num_epochs, 1);
  EXPECT_EQ(num_samples_in(plan, 3), 2);
  EXPECT_EQ(build_sample_index(sizes, document_index, 3, plan),
            (std::vector<SamplePosition>{{0, 0}, {1, 0}, {1, 3}}));
}

// GptDataset finds a sample's start by binary search in the documents' starts instead of
// storing helpers.cpp's sample index: every row of that index, built the Megatron way, is
// found, with empty documents among them (passed over by both; row 0 is {0, 0} in the loop
// even when the first document is empty, where the search names the first with tokens).
TEST(GptIndices, DocumentStartsFindEverySampleIndexRow) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    // Up to 300 documents: several of DocumentStarts' blocks of 64.
    std::vector<std::int32_t> sizes(1 + rng() % (trial % 2 == 0 ? 25 : 300));
    for (auto& size : sizes) size = static_cast<std::int32_t>(rng() % 4 == 0 ? 0 : 1 + rng() % 40);
    std::int64_t tokens = 0;
    for (const auto size : sizes) tokens += size;
    if (tokens < 2) continue;
    const std::int64_t L = 2 + static_cast<std::int64_t>(rng() % 12);
    const std::int64_t wanted = static_cast<std::int64_t>(rng() % 60);
    const EpochPlan plan = plan_epochs(tokens, wanted, L);
    IndexRng index_rng(trial);
    const auto document_index =
        build_document_index({0, static_cast<std::int64_t>(sizes.size())}, plan, index_rng);
    const auto rows = build_sample_index(sizes, document_index, L, plan);
    const DocumentStarts starts(sizes, document_index);
    ASSERT_EQ(starts.tokens(), plan.num_epochs * tokens);
    SCOPED_TRACE("trial " + std::to_string(trial));
    for (std::size_t s = 1; s < rows.size(); ++s)
      ASSERT_EQ(starts.sample_start(static_cast<std::int64_t>(s), L, sizes, document_index),
                rows[s])
          << "row " << s;
    std::int64_t first = 0;
    while (sizes[static_cast<std::size_t>(document_index[static_cast<std::size_t>(first)])] == 0)
      ++first;
    EXPECT_EQ(starts.sample_start(0, L, sizes, document_index), (SamplePosition{first, 0}));
    EXPECT_THROW(starts.sample_start(starts.tokens() / L + 1, L, sizes, document_index),
                 std::out_of_range);
  }
}

// Megatron's uint32 shuffle index where the samples fit: the same permutation as int64's.
TEST(GptIndices, ShuffleIndexIsTheSameIn32And64Bits) {
  for (const bool separate : {false, true}) {
    const EpochPlan plan{.tokens_per_epoch = 1000,
                         .num_epochs = separate ? 2 : 1,
                         .separate_final_epoch = separate,
                         .num_samples_sans_final_epoch = separate ? 70001 : 0};
    IndexRng a(7), b(7);
    const auto narrow = build_shuffle_index<std::uint32_t>(100003, plan, a);
    const auto wide = build_shuffle_index<std::int64_t>(100003, plan, b);
    ASSERT_EQ(narrow.size(), wide.size());
    EXPECT_TRUE(std::equal(narrow.begin(), narrow.end(), wide.begin()));
    EXPECT_EQ(a.next(), b.next());  // the same number of draws
  }
}

// The shuffle draws j = draw mod i for i = n … 2 and swaps positions i - 1 and j, in that
// order, whatever the batching and prefetching: spelled out here one swap at a time.
TEST(GptIndices, ShuffleIsFisherYatesFromTheBack) {
  for (const std::size_t n : {0u, 1u, 2u, 31u, 32u, 33u, 64u, 65u, 1000u}) {
    std::vector<std::int64_t> got(n), expected(n);
    for (std::size_t i = 0; i < n; ++i) got[i] = expected[i] = static_cast<std::int64_t>(i);
    IndexRng rng(3);
    rng.shuffle(std::span<std::int64_t>(got));
    std::mt19937_64 engine(3);
    for (std::size_t i = n; i > 1; --i) std::swap(expected[i - 1], expected[engine() % i]);
    EXPECT_EQ(got, expected) << n << " values";
    EXPECT_EQ(rng.next(), engine());
  }
}

TEST(GptDataset, SamplesAreContiguousSlicesAcrossEpochs) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const auto lengths = random_lengths(rng, 1 + static_cast<int>(rng() % 30), 50);
    const auto source = make_source(lengths);
    const std::int64_t L = 2 + static_cast<std::int64_t>(rng() % 20);
    const std::optional<std::int64_t> n =
        trial % 5 == 0 ? std::nullopt : std::optional<std::int64_t>(rng() % 200);
    const auto begin = static_cast<std::int64_t>(rng() % lengths.size());
    const SequenceRange range{begin, static_cast<std::int64_t>(lengths.size())};
    std::int64_t tokens = 0;
    for (auto d = range.begin; d < range.end; ++d) tokens += lengths[static_cast<std::size_t>(d)];
    if (tokens < 2) continue;
    const GptDataset ds(source, range, n, Split::train, {.sequence_length = L, .random_seed = 9});
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_structure(ds, *source, n);
  }
}

TEST(GptDataset, FinalEpochIsSeparateBelowEightyPercent) {
  const auto source = make_source(std::vector<int>(10, 10));  // 100 tokens per epoch
  // seq_length 10: 9 samples per epoch. 10 samples need a second epoch and use 1 of its
  // 9 samples (< int(0.8 × 9) = 7): separate. 16 use 7 of them: not separate.
  const GptDataset few(source, {0, 10}, 10, Split::train, {.sequence_length = 10});
  EXPECT_EQ(few.epochs().num_epochs, 2);
  EXPECT_TRUE(few.epochs().separate_final_epoch);
  EXPECT_EQ(few.epochs().num_samples_sans_final_epoch, 9);
  check_structure(few, *source, 10);
  const GptDataset many(source, {0, 10}, 16, Split::train, {.sequence_length = 10});
  EXPECT_EQ(many.epochs().num_epochs, 2);
  EXPECT_FALSE(many.epochs().separate_final_epoch);
  check_structure(many, *source, 16);
}

TEST(GptDataset, SameSeedSameSamplesOtherSeedOtherOrder) {
  std::mt19937 rng(5);
  const auto source = make_source(random_lengths(rng, 40, 30));
  const auto build = [&](std::uint64_t seed) {
    return GptDataset(source, {0, 40}, 100, Split::train,
                      {.sequence_length = 8, .random_seed = seed});
  };
  const GptDataset a = build(42), b = build(42), c = build(43);
  ASSERT_EQ(a.size(), b.size());
  for (std::int64_t i = 0; i < a.size(); ++i) EXPECT_EQ(a.get(i).tokens, b.get(i).tokens);
  bool same_order = true;
  for (std::int64_t i = 0; i < a.size(); ++i)
    same_order = same_order && a.shuffled(i) == c.shuffled(i);
  EXPECT_FALSE(same_order);
}

TEST(GptDataset, RejectsASplitWithoutTokens) {
  const auto source = make_source({1, 5});
  try {
    GptDataset ds(source, {0, 1}, 4, Split::test, {.sequence_length = 4});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("split = test"), std::string::npos) << what;
    EXPECT_NE(what.find("1 tokens"), std::string::npos) << what;
  }
  EXPECT_THROW(GptDataset(source, {0, 2}, 4, Split::train, {.sequence_length = 1}), ConfigError);
}

TEST(GptDataset, IndexOutOfRangeThrows) {
  const auto source = make_source({20});
  const GptDataset ds(source, {0, 1}, std::nullopt, Split::train, {.sequence_length = 4});
  EXPECT_EQ(ds.size(), 4);
  EXPECT_THROW(ds.get(4), std::out_of_range);
  EXPECT_THROW(ds.get(-1), std::out_of_range);
}

TEST(Split, NormalisesLikeMegatron) {
  const auto f = parse_split("969,30,1");
  EXPECT_DOUBLE_EQ(f[0], 0.969);
  EXPECT_DOUBLE_EQ(f[1], 0.030);
  EXPECT_DOUBLE_EQ(f[2], 0.001);
  const auto m = split_matrix(f);
  ASSERT_TRUE(m[0] && m[1] && m[2]);
  EXPECT_EQ(split_range(*m[0], 1000).begin, 0);
  EXPECT_EQ(split_range(*m[0], 1000).end, 969);
  EXPECT_EQ(split_range(*m[1], 1000).begin, 969);
  EXPECT_EQ(split_range(*m[1], 1000).end, 999);
  EXPECT_EQ(split_range(*m[2], 1000).begin, 999);
  EXPECT_EQ(split_range(*m[2], 1000).end, 1000);
}

TEST(Split, MissingWeightsAreZeroAndZeroWeightsHaveNoSplit) {
  const auto m = split_matrix(parse_split("99,1"));
  EXPECT_TRUE(m[0] && m[1]);
  EXPECT_FALSE(m[2]);
  EXPECT_FALSE(split_matrix(parse_split("1 0 1"))[1]);
}

TEST(Split, RoundsHalfToEvenAsPython) {
  const auto m = split_matrix(parse_split("1,1"));  // 2.5 → 2, 0.5 × 3 = 1.5 → 2
  EXPECT_EQ(split_range(*m[0], 5).end, 2);
  EXPECT_EQ(split_range(*m[1], 5).begin, 2);
  EXPECT_EQ(split_range(*m[0], 3).end, 2);
  EXPECT_EQ(split_range(*m[0], 7).end, 4);  // 3.5 → 4
}

TEST(Split, RejectsBadStrings) {
  for (const char* bad : {"", "a,b", "1,2,3,4", "0,0,0", "1..2"}) {
    try {
      parse_split(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--split"), std::string::npos) << e.what();
    }
  }
}

TEST(MockDataset, IsDeterministicWithMegatronsShape) {
  const MockTokenSource a, b;
  ASSERT_EQ(a.sequence_count(), 100000);
  EXPECT_TRUE(std::equal(a.sequence_lengths().begin(), a.sequence_lengths().end(),
                         b.sequence_lengths().begin()));
  const auto [lo, hi] =
      std::minmax_element(a.sequence_lengths().begin(), a.sequence_lengths().end());
  EXPECT_GE(*lo, 1);
  EXPECT_LE(*hi, 4095);
  const auto n = a.sequence_lengths()[0];
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  a.read_tokens(0, 0, tokens);
  for (std::int32_t k = 0; k + 1 < n; ++k) EXPECT_EQ(tokens[static_cast<std::size_t>(k)], k + 1);
  EXPECT_EQ(tokens.back(), 50256);
}

TEST(MockDataset, FeedsAGptDataset) {
  const auto mock = std::make_shared<MockTokenSource>(MockDataConfig{.num_sequences = 50});
  const GptDataset ds(mock, {0, 50}, 64, Split::train, {.sequence_length = 128});
  EXPECT_GE(ds.size(), 64);
  const Sample s = ds.get(0);
  EXPECT_EQ(s.tokens.size(), 128u);
}

TEST(Microbatch, FollowsMegatronsPretrainingSampler) {
  // micro batch 2, dp 2, 3 samples consumed: rank 0 reads 3, 4 and rank 1 reads 5, 6.
  EXPECT_EQ(microbatch_sample_indices(3, 2, 0, 2), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(microbatch_sample_indices(3, 2, 1, 2), (std::vector<std::int64_t>{5, 6}));
  EXPECT_THROW(microbatch_sample_indices(0, 2, 2, 2), std::invalid_argument);

  std::mt19937 rng(1);
  const auto source = make_source(random_lengths(rng, 20, 40));
  const GptDataset ds(source, {0, 20}, 10, Split::train, {.sequence_length = 6});
  const Microbatch batch = get_microbatch(ds, {4, 1, 7});
  ASSERT_EQ(batch.tokens.size(), 3u * 6);
  for (std::size_t row = 0; row < 3; ++row) {
    const Sample s = ds.get(std::vector<std::int64_t>{4, 1, 7}[row]);
    EXPECT_TRUE(std::equal(s.tokens.begin(), s.tokens.end(),
                           batch.tokens.begin() + static_cast<std::ptrdiff_t>(row * 6)));
    EXPECT_TRUE(std::equal(s.labels.begin(), s.labels.end(),
                           batch.labels.begin() + static_cast<std::ptrdiff_t>(row * 6)));
  }
}

}  // namespace
}  // namespace tandem::data
