// Megatron's BlendedDataset: samples drawn from several datasets in proportion to
// weights. Sample i comes from dataset_index[i], as its dataset_sample_index[i]-th
// sample; the dataset is chosen greedily, the one furthest behind its share at each
// step, so after any k samples each dataset has supplied its weight × k rounded up or
// down by less than one sample. Worked example, weights 0.5/0.3/0.2:
// dataset_index = 0 1 2 0 1 0 2 0 1 0 …
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/sample_dataset.hpp"

namespace tandem::data {

struct BlendingIndices {
  std::vector<std::int16_t> dataset_index;         // (size,) which dataset
  std::vector<std::int64_t> dataset_sample_index;  // (size,) which of its samples
};

// helpers.cpp's build_blending_indices: `size` samples for normalised `weights`.
BlendingIndices build_blending_indices(const std::vector<double>& weights, std::int64_t size);
// build_exhaustive_blending_indices: exactly sizes[d] samples from dataset d.
BlendingIndices build_exhaustive_blending_indices(const std::vector<std::int64_t>& sizes);

class BlendedDataset : public SampleDataset {
 public:
  // `size` given: `weights` (any positive scale) are normalised and `size` samples drawn.
  // `size` nullopt: `weights` are whole sample counts, each drawn exactly. Throws
  // ConfigError when a dataset would be asked for more samples than it has.
  BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                 std::vector<double> weights, std::optional<std::int64_t> size);

  std::int64_t size() const override;
  std::int64_t sequence_length() const override;
  void read_sample(std::int64_t index, std::span<std::int32_t> text) const override;

  const std::vector<double>& weights() const { return weights_; }
  const BlendingIndices& indices() const { return indices_; }
  const std::vector<std::shared_ptr<const SampleDataset>>& datasets() const { return datasets_; }

 private:
  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<double> weights_;
  BlendingIndices indices_;
};

}  // namespace tandem::data
