// The three ways to build the splits: one source, a weighted blend, an unweighted blend.
#include "data/dataset_builder.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.hpp"
#include "data/blended_dataset.hpp"
#include "data/indexed_dataset.hpp"
#include "data/split.hpp"

namespace tandem::data {
namespace {

using Matrix = std::array<std::optional<Bookends>, 3>;
using GptSplits = std::array<std::shared_ptr<const GptDataset>, 3>;

std::optional<double> parse_number(const std::string& word) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(word.c_str(), &end);
  if (word.empty() || end != word.c_str() + word.size() || errno != 0) return std::nullopt;
  return value;
}

GptSplits build_splits(const std::shared_ptr<const TokenSource>& source, const Matrix& matrix,
                       const SplitSizes& sizes, const GptDatasetConfig& config) {
  GptSplits out;
  for (const Split split : kSplits) {
    const auto s = static_cast<std::size_t>(split);
    if (!matrix[s]) continue;
    const SequenceRange range = split_range(*matrix[s], source->sequence_count());
    out[s] = std::make_shared<const GptDataset>(source, range, sizes[s], split, config);
  }
  return out;
}

SplitDatasets as_samples(const GptSplits& splits) {
  return {splits[0], splits[1], splits[2]};
}

std::vector<double> normalized(std::vector<double> weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (auto& w : weights) w /= sum;
  return weights;
}

}  // namespace

Blend parse_data_path(const std::vector<std::string>& words) {
  Blend blend{words, std::nullopt};
  if (words.size() % 2 == 1) return blend;
  std::vector<double> weights;
  std::vector<std::string> prefixes;
  for (std::size_t i = 0; i < words.size(); i += 2) {
    const auto weight = parse_number(words[i]);
    if (!weight) {
      if (!weights.empty())
        throw ConfigError("--data-path", words[i],
                          "expected a weight: give either weights and prefixes in pairs or "
                          "prefixes only");
      return blend;  // no weights: every word is a prefix
    }
    if (!(*weight > 0)) throw ConfigError("--data-path", words[i], "weights must be positive");
    weights.push_back(*weight);
    prefixes.push_back(words[i + 1]);
  }
  if (!words.empty()) blend = {prefixes, weights};
  return blend;
}

namespace {

// Weights given: prefix d supplies ceil(size × weight) samples of each split, from a
// GptDataset built for that share plus the surplus.
SplitDatasets build_weighted_blend(const std::vector<std::shared_ptr<const TokenSource>>& sources,
                                   const std::vector<double>& raw_weights, const Matrix& matrix,
                                   const SplitSizes& sizes, const GptDataConfig& config) {
  if (raw_weights.size() != sources.size())
    throw ConfigError("--data-path", "", "give one weight per prefix");
  for (const Split split : kSplits)
    if (matrix[static_cast<std::size_t>(split)] && !sizes[static_cast<std::size_t>(split)])
      throw ConfigError("samples", std::string(split_name(split)),
                        "a weighted blend needs the number of samples of every split");
  const std::vector<double> weights = normalized(raw_weights);
  std::vector<SplitSizes> target(sources.size());
  std::vector<GptSplits> per_prefix;
  for (std::size_t d = 0; d < sources.size(); ++d) {
    SplitSizes buffer;
    for (std::size_t s = 0; s < 3; ++s) {
      const double share = std::ceil(static_cast<double>(sizes[s].value_or(0)) * weights[d]);
      target[d][s] = static_cast<std::int64_t>(share);
      buffer[s] =
          static_cast<std::int64_t>(std::ceil(share * (1 + config.mid_level_dataset_surplus)));
    }
    per_prefix.push_back(build_splits(sources[d], matrix, buffer, config.dataset));
  }
  SplitDatasets out;
  for (std::size_t s = 0; s < 3; ++s) {
    if (!matrix[s]) continue;
    std::vector<std::shared_ptr<const SampleDataset>> members;
    std::int64_t size = 0;
    for (std::size_t d = 0; d < sources.size(); ++d) {
      members.push_back(per_prefix[d][s]);
      size += *target[d][s];
    }
    out[s] = std::make_shared<const BlendedDataset>(members, weights, size);
  }
  return out;
}

// No weights: one epoch of each prefix, blended in proportion to their sample counts,
// all of them (exhaustively) or the first `size`.
SplitDatasets build_unweighted_blend(const std::vector<std::shared_ptr<const TokenSource>>& sources,
                                     const Matrix& matrix, const SplitSizes& sizes,
                                     const GptDataConfig& config) {
  std::vector<GptSplits> per_prefix;
  for (const auto& source : sources)
    per_prefix.push_back(build_splits(source, matrix, SplitSizes{}, config.dataset));
  SplitDatasets out;
  for (std::size_t s = 0; s < 3; ++s) {
    if (!matrix[s]) continue;
    std::vector<std::shared_ptr<const SampleDataset>> members;
    std::vector<double> weights;
    std::int64_t total = 0;
    for (const auto& splits : per_prefix) {
      members.push_back(splits[s]);
      weights.push_back(static_cast<double>(splits[s]->size()));
      total += splits[s]->size();
    }
    std::optional<std::int64_t> size;
    if (sizes[s]) size = std::min(*sizes[s], total);
    out[s] = std::make_shared<const BlendedDataset>(members, weights, size);
  }
  return out;
}

}  // namespace

SplitDatasets build_gpt_datasets(const GptDataConfig& config, const SplitSizes& sizes) {
  const Matrix matrix = split_matrix(parse_split(config.split));
  if (config.mock)
    return as_samples(build_splits(std::make_shared<const MockTokenSource>(config.mock_data),
                                   matrix, sizes, config.dataset));
  const auto& prefixes = config.blend.prefixes;
  if (prefixes.empty())
    throw ConfigError("--data-path", "", "give at least one dataset prefix, or --mock-data");
  std::vector<std::shared_ptr<const TokenSource>> sources;
  for (const auto& prefix : prefixes)
    sources.push_back(std::make_shared<const IndexedDataset>(prefix));
  if (prefixes.size() == 1 && !config.blend.weights)
    return as_samples(build_splits(sources[0], matrix, sizes, config.dataset));
  if (config.blend.weights)
    return build_weighted_blend(sources, *config.blend.weights, matrix, sizes, config);
  return build_unweighted_blend(sources, matrix, sizes, config);
}

}  // namespace tandem::data
