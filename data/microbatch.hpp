// Microbatches for the training loop, drawn as Megatron's MegatronPretrainingSampler
// draws them: the samples are consumed in order, a global step of
// micro_batch_size × data_parallel_size samples at a time, and data-parallel rank r
// takes the r-th block of micro_batch_size. Worked example, micro batch 2, dp 2, 3
// samples consumed so far: rank 0 reads samples 3, 4 and rank 1 reads 5, 6; the
// next microbatch starts at 7.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sample_dataset.hpp"

namespace tandem::data {

struct Microbatch {
  std::int64_t micro_batch_size = 0;
  std::int64_t sequence_length = 0;
  std::vector<std::int32_t> tokens;  // (micro_batch_size, seq_length) row-major
  std::vector<std::int32_t> labels;  // (micro_batch_size, seq_length) row-major
};

// The sample indices rank `dp_rank` reads for the microbatch that starts after
// `consumed_samples` samples (summed over all data-parallel ranks).
std::vector<std::int64_t> microbatch_sample_indices(std::int64_t consumed_samples,
                                                    std::int64_t micro_batch_size,
                                                    std::int64_t dp_rank, std::int64_t dp_size);

// Stacks the samples at `indices`. Throws std::out_of_range for an index past the dataset.
Microbatch get_microbatch(const SampleDataset& dataset, const std::vector<std::int64_t>& indices);

}  // namespace tandem::data
