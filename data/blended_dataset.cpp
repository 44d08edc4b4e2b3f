// The greedy blending of helpers.cpp and the checks BlendedDataset makes around it.
#include "data/blended_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace tandem::data {

BlendingIndices build_blending_indices(const std::vector<double>& weights, std::int64_t size) {
  BlendingIndices out;
  out.dataset_index.resize(static_cast<std::size_t>(size));
  out.dataset_sample_index.resize(static_cast<std::size_t>(size));
  std::vector<std::int64_t> drawn(weights.size(), 0);
  for (std::int64_t i = 0; i < size; ++i) {
    // Sample 0 is judged as if it were sample 1, as in Megatron (max(i, 1)).
    const double target = std::max(static_cast<double>(i), 1.0);
    std::size_t best = 0;
    double best_error = weights[0] * target - static_cast<double>(drawn[0]);
    for (std::size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * target - static_cast<double>(drawn[d]);
      if (error > best_error) best = d, best_error = error;  // ties keep the lower index
    }
    out.dataset_index[static_cast<std::size_t>(i)] = static_cast<std::int16_t>(best);
    out.dataset_sample_index[static_cast<std::size_t>(i)] = drawn[best]++;
  }
  return out;
}

BlendingIndices build_exhaustive_blending_indices(const std::vector<std::int64_t>& sizes) {
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  std::vector<double> weights(sizes.size());
  for (std::size_t d = 0; d < sizes.size(); ++d)
    weights[d] = static_cast<double>(sizes[d]) / static_cast<double>(total);
  BlendingIndices out;
  std::vector<std::int64_t> drawn(sizes.size(), 0);
  std::vector<bool> spent(sizes.size());
  for (std::size_t d = 0; d < sizes.size(); ++d) spent[d] = sizes[d] == 0;
  for (std::int64_t i = 0; i < total; ++i) {
    const double target = std::max(static_cast<double>(i), 1.0);
    std::optional<std::size_t> best;
    double best_error = std::numeric_limits<double>::lowest();
    for (std::size_t d = 0; d < sizes.size(); ++d) {  // only datasets with samples left
      if (spent[d]) continue;
      const double error = weights[d] * target - static_cast<double>(drawn[d]);
      if (error > best_error) best = d, best_error = error;
    }
    out.dataset_index.push_back(static_cast<std::int16_t>(*best));
    out.dataset_sample_index.push_back(drawn[*best]++);
    if (drawn[*best] == sizes[*best]) spent[*best] = true;
  }
  return out;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                               std::vector<double> weights, std::optional<std::int64_t> size)
    : datasets_(std::move(datasets)), weights_(std::move(weights)) {
  if (datasets_.empty() || datasets_.size() != weights_.size() || datasets_.size() >= 32767)
    throw std::invalid_argument("a blend needs one weight per dataset (1 … 32766 datasets)");
  for (std::size_t d = 0; d < weights_.size(); ++d)
    if (!(weights_[d] > 0))
      throw ConfigError("data_path weight " + std::to_string(d), std::to_string(weights_[d]),
                        "blend weights must be positive");
  for (const auto& dataset : datasets_)
    if (dataset->sequence_length() != datasets_[0]->sequence_length())
      throw std::invalid_argument("blended datasets must share seq_length");
  if (size) {
    const double sum = std::accumulate(weights_.begin(), weights_.end(), 0.0);
    for (auto& w : weights_) w /= sum;
    indices_ = build_blending_indices(weights_, *size);
  } else {
    std::vector<std::int64_t> counts;
    for (const double w : weights_) {
      if (w != std::floor(w))
        throw std::invalid_argument("exhaustive blend weights must be counts");
      counts.push_back(static_cast<std::int64_t>(w));
    }
    indices_ = build_exhaustive_blending_indices(counts);
  }
  std::vector<std::int64_t> requested(datasets_.size(), 0);
  for (const auto d : indices_.dataset_index) ++requested[static_cast<std::size_t>(d)];
  for (std::size_t d = 0; d < datasets_.size(); ++d)
    if (requested[d] > datasets_[d]->size())
      throw ConfigError("mid_level_dataset_surplus", "",
                        "the blend requests " + std::to_string(requested[d]) +
                            " samples from dataset " + std::to_string(d) + ", which has " +
                            std::to_string(datasets_[d]->size()) +
                            "; increase the surplus (e.g. two- or ten-fold)");
}

std::int64_t BlendedDataset::size() const {
  return static_cast<std::int64_t>(indices_.dataset_index.size());
}

std::int64_t BlendedDataset::sequence_length() const {
  return datasets_[0]->sequence_length();
}

void BlendedDataset::read_sample(std::int64_t index, std::span<std::int32_t> text) const {
  if (index < 0 || index >= size())
    throw std::out_of_range("sample " + std::to_string(index) + " of a blend of " +
                            std::to_string(size()));
  const auto i = static_cast<std::size_t>(index);
  const auto& dataset = datasets_[static_cast<std::size_t>(indices_.dataset_index[i])];
  dataset->read_sample(indices_.dataset_sample_index[i], text);
}

}  // namespace tandem::data
