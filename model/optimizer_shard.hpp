// The slice of the parameter and gradient buffers one data-parallel rank updates — Megatron's
// DistributedOptimizer shard: every bucket (padded to a multiple of dp) is cut into dp equal
// parts and rank r owns part r of each. Without the distributed optimizer a rank owns
// everything (dp_size 1 here). A shard is a list of pieces, each a contiguous run of one
// parameter, so the optimizer, the gradient norm and the tp / embedding reductions visit
// exactly the elements this rank is responsible for. Pure arithmetic, no device.
//
// Example: buckets [0, 12) holding a (7) then b (5) and [12, 16) holding c (3) + 1 padding,
// dp = 2: rank 0 owns [0, 6) and [12, 14): pieces a[0, 6), c[0, 2); rank 1 owns [6, 12) and
// [14, 16): pieces a[6, 7), b[0, 5), c[2, 3) (the padding element 15 belongs to no piece).
#pragma once

#include <cstdint>
#include <vector>

#include "model/parameters.hpp"

namespace tandem {

struct ShardPiece {
  int param = 0;                  // index in the ParameterSet
  std::int64_t begin = 0;         // elements into the value and gradient buffers
  std::int64_t length = 0;        // elements
  std::int64_t state_offset = 0;  // elements into the optimizer state (exp_avg, exp_avg_sq)
  std::int64_t param_offset = 0;  // elements into the parameter (begin − its offset)
};

struct OptimizerShard {
  std::vector<ShardPiece> pieces;  // in buffer order
  // This rank's slice [begin, end) of each bucket, in bucket order (padding included).
  std::vector<std::pair<std::int64_t, std::int64_t>> bucket_slices;
  std::int64_t state_numel = 0;  // Σ piece lengths: the optimizer state this rank allocates
};

// Rank `dp_rank` of `dp_size`'s shard of `params` (allocated; every bucket's size a
// multiple of dp_size). Throws std::invalid_argument when a bucket does not divide.
// The experts' buckets are cut over the expert-data-parallel group instead (rank
// expert_dp_rank of expert_dp_size; 0: as the others).
OptimizerShard make_optimizer_shard(const ParameterSet& params, int dp_size, int dp_rank,
                                    int expert_dp_size = 0, int expert_dp_rank = 0);

// The pieces of `shard` that belong to parameter `param`.
std::vector<ShardPiece> pieces_of(const OptimizerShard& shard, int param);

}  // namespace tandem
