// Megatron's BlendedMegatronDatasetBuilder for GPT: from --data-path (one prefix, or
// weights and prefixes), --split and the number of samples each split must supply, the
// train, valid and test datasets. One prefix gives a GptDataset per split; several give
// a BlendedDataset per split over one GptDataset per prefix, each of those asked for its
// weight's share plus a small surplus (0.5%) so the greedy blend never runs out; --mock-data
// splits the mock token source instead of reading files.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/gpt_dataset.hpp"
#include "data/mock_dataset.hpp"
#include "data/sample_dataset.hpp"

namespace tandem::data {

struct Blend {
  std::vector<std::string> prefixes;           // PREFIX of PREFIX.bin / PREFIX.idx
  std::optional<std::vector<double>> weights;  // one per prefix, any positive scale
};

// Megatron's get_blend_from_list: "p1 p2 …" (no weights) or "w1 p1 w2 p2 …". Throws
// ConfigError naming --data-path when some weights are numbers and others are not.
Blend parse_data_path(const std::vector<std::string>& words);

struct GptDataConfig {
  Blend blend;        // ignored with mock
  bool mock = false;  // --mock-data
  MockDataConfig mock_data;
  std::string split = "969,30,1";  // --split
  GptDatasetConfig dataset;        // --seq-length, --seed
  double mid_level_dataset_surplus = 0.005;
};

using SplitSizes = std::array<std::optional<std::int64_t>, 3>;  // train, valid, test samples
// Null where the split has weight 0.
using SplitDatasets = std::array<std::shared_ptr<const SampleDataset>, 3>;

// Throws ConfigError for bad input (a missing or malformed dataset, a split without
// tokens, weights without sizes) before any index is built for the next split.
SplitDatasets build_gpt_datasets(const GptDataConfig& config, const SplitSizes& sizes);

}  // namespace tandem::data
