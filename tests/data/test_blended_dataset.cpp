// Blending: the greedy indices realise the weights to within one sample at every prefix,
// the exhaustive variant draws exactly the counts asked for, and the dataset builder
// (one prefix, a weighted blend, an unweighted blend, mock data) gives Megatron's sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "data/blended_dataset.hpp"
#include "data/dataset_builder.hpp"
#include "data/indexed_dataset.hpp"
#include "tests/data/data_test_util.hpp"

namespace tandem::data {
namespace {

using testing::TempDir;

TEST(Blending, WorkedExampleFromTheHeader) {
  const auto idx = build_blending_indices({0.5, 0.3, 0.2}, 10);
  EXPECT_EQ(idx.dataset_index, (std::vector<std::int16_t>{0, 1, 2, 0, 1, 0, 2, 0, 1, 0}));
  EXPECT_EQ(idx.dataset_sample_index, (std::vector<std::int64_t>{0, 0, 0, 1, 1, 2, 1, 3, 2, 4}));
}

// After any n samples, no dataset is a whole sample ahead of its share weight × n (the
// greedy pick is always at or behind its share). With two datasets neither is then a
// sample behind either; with more, one may lag a little further (up to ~1.25 samples
// seen), which the deficits of the others bound by (datasets − 1).
TEST(Blending, RealisesTheWeightsWithinOneSampleAtEveryPrefix) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t n = trial < 20 ? 2 : 3 + rng() % 5;
    std::vector<double> weights(n);
    double sum = 0;
    for (auto& w : weights) sum += (w = 0.05 + static_cast<double>(rng() % 1000) / 1000.0);
    for (auto& w : weights) w /= sum;
    const std::int64_t size = 2000;
    const auto idx = build_blending_indices(weights, size);
    std::vector<std::int64_t> drawn(n, 0);
    for (std::int64_t k = 0; k < size; ++k) {
      const auto d = static_cast<std::size_t>(idx.dataset_index[static_cast<std::size_t>(k)]);
      EXPECT_EQ(idx.dataset_sample_index[static_cast<std::size_t>(k)], drawn[d]);
      ++drawn[d];
      for (std::size_t e = 0; e < n; ++e) {
        const double ahead =
            static_cast<double>(drawn[e]) - weights[e] * static_cast<double>(k + 1);
        ASSERT_LE(ahead, 1.0) << "trial " << trial << ", " << k + 1 << " samples, dataset " << e;
        ASSERT_GE(ahead, n == 2 ? -1.0 : -static_cast<double>(n - 1))
            << "trial " << trial << ", " << k + 1 << " samples, dataset " << e;
      }
    }
  }
}

TEST(Blending, ExhaustiveDrawsExactlyTheCounts) {
  const auto idx = build_exhaustive_blending_indices({7, 0, 3, 12});
  ASSERT_EQ(idx.dataset_index.size(), 22u);
  std::vector<std::int64_t> drawn(4, 0);
  for (std::size_t k = 0; k < idx.dataset_index.size(); ++k) {
    const auto d = static_cast<std::size_t>(idx.dataset_index[k]);
    EXPECT_EQ(idx.dataset_sample_index[k], drawn[d]++);
  }
  EXPECT_EQ(drawn, (std::vector<std::int64_t>{7, 0, 3, 12}));
}

// Two datasets on disk, token values telling them apart (prefix a: < 1000, b: ≥ 1000).
struct TwoPrefixes {
  TempDir dir;
  std::string a = (dir / "a").string(), b = (dir / "b").string();
  TwoPrefixes() {
    std::mt19937 rng(2);
    for (const auto& [prefix, base] : {std::pair{a, 0}, std::pair{b, 1000}}) {
      IndexedDatasetWriter writer(prefix, TokenDType::uint16);
      for (int d = 0; d < 200; ++d) {
        std::vector<std::int32_t> doc(1 + rng() % 60);
        for (auto& t : doc) t = base + static_cast<std::int32_t>(rng() % 1000);
        writer.add_document(doc);
      }
      writer.finalize();
    }
  }
};

TEST(DatasetBuilder, ParsesDataPathLikeMegatron) {
  const Blend plain = parse_data_path({"x", "y", "z"});
  EXPECT_EQ(plain.prefixes, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_FALSE(plain.weights);
  const Blend weighted = parse_data_path({"30", "x", "70", "y"});
  EXPECT_EQ(weighted.prefixes, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(*weighted.weights, (std::vector<double>{30, 70}));
  EXPECT_FALSE(parse_data_path({"x", "y"}).weights);
  EXPECT_THROW(parse_data_path({"30", "x", "y", "z"}), ConfigError);
  EXPECT_THROW(parse_data_path({"-1", "x"}), ConfigError);
}

TEST(DatasetBuilder, OnePrefixGivesAGptDatasetPerSplit) {
  TwoPrefixes data;
  GptDataConfig config{.blend = {{data.a}, std::nullopt}, .split = "8,1,1"};
  config.dataset = {.sequence_length = 16, .random_seed = 5};
  const std::vector<std::int64_t> requested{500, 20, 10};
  const auto splits = build_gpt_datasets(config, {requested[0], requested[1], requested[2]});
  for (std::size_t s = 0; s < 3; ++s) {
    const auto* gpt = dynamic_cast<const GptDataset*>(splits[s].get());
    ASSERT_NE(gpt, nullptr);
    EXPECT_GE(gpt->size(), requested[s]);
  }
  const auto* train = dynamic_cast<const GptDataset*>(splits[0].get());
  EXPECT_EQ(train->range().begin, 0);
  EXPECT_EQ(train->range().end, 160);
}

TEST(DatasetBuilder, WeightedBlendHasMegatronsSizesAndShares) {
  TwoPrefixes data;
  GptDataConfig config{.blend = parse_data_path({"30", data.a, "70", data.b}), .split = "98,2,0"};
  config.dataset = {.sequence_length = 16};
  const auto splits = build_gpt_datasets(config, {1000, 33, 5});
  EXPECT_EQ(splits[2], nullptr);  // weight 0: no test split
  const auto* train = dynamic_cast<const BlendedDataset*>(splits[0].get());
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), 300 + 700);  // ceil(1000 × 0.3) + ceil(1000 × 0.7)
  const auto* valid = dynamic_cast<const BlendedDataset*>(splits[1].get());
  EXPECT_EQ(valid->size(), 10 + 24);  // ceil(33 × 0.3) + ceil(33 × 0.7)
  // Each member was built for its share plus 0.5%: ceil(300 × 1.005) = 302 at least.
  EXPECT_GE(train->datasets()[0]->size(), 302);
  std::int64_t from_a = 0;
  for (std::int64_t i = 0; i < train->size(); ++i) {
    const Sample s = train->get(i);
    const bool a = s.tokens[0] < 1000;
    from_a += a;
    for (const auto t : s.tokens) EXPECT_EQ(t < 1000, a) << "a sample mixes datasets";
  }
  EXPECT_EQ(from_a, 300);
}

TEST(DatasetBuilder, UnweightedBlendIsProportionalToSizes) {
  TwoPrefixes data;
  GptDataConfig config{.blend = parse_data_path({data.a, data.b}), .split = "1"};
  config.dataset = {.sequence_length = 16};
  const auto splits = build_gpt_datasets(config, {std::nullopt, std::nullopt, std::nullopt});
  const auto* train = dynamic_cast<const BlendedDataset*>(splits[0].get());
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), train->datasets()[0]->size() + train->datasets()[1]->size());
  const auto capped = build_gpt_datasets(config, {100, std::nullopt, std::nullopt});
  EXPECT_EQ(capped[0]->size(), 100);
}

TEST(DatasetBuilder, MockDataNeedsNoFiles) {
  GptDataConfig config{.mock = true, .split = "1,1,1"};
  config.dataset = {.sequence_length = 64};
  const auto splits = build_gpt_datasets(config, {100, 10, 10});
  for (const auto& split : splits) {
    ASSERT_NE(split, nullptr);
    EXPECT_GE(split->size(), 10);
  }
}

TEST(DatasetBuilder, MissingDatasetIsNamed) {
  GptDataConfig config{.blend = {{"/nonexistent/prefix"}, std::nullopt}};
  config.dataset = {.sequence_length = 16};
  try {
    build_gpt_datasets(config, {10, 1, 1});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/prefix.idx"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::data
