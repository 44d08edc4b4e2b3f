#include "model/optimizer_shard.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {

OptimizerShard make_optimizer_shard(const ParameterSet& params, int dense_size, int dense_rank,
                                    int expert_dp_size, int expert_dp_rank) {
  if (expert_dp_size == 0) {
    expert_dp_size = dense_size;
    expert_dp_rank = dense_rank;
  }
  for (const auto& [size, rank] :
       {std::pair{dense_size, dense_rank}, std::pair{expert_dp_size, expert_dp_rank}})
    if (size < 1 || rank < 0 || rank >= size)
      throw std::invalid_argument("optimizer shard: rank " + std::to_string(rank) + " of " +
                                  std::to_string(size));
  OptimizerShard shard;
  for (const auto& bucket : params.buckets()) {
    const int dp_size = bucket.expert ? expert_dp_size : dense_size;
    const int dp_rank = bucket.expert ? expert_dp_rank : dense_rank;
    const std::int64_t size = bucket.end - bucket.begin;
    if (size % dp_size != 0)
      throw std::invalid_argument("optimizer shard: bucket [" + std::to_string(bucket.begin) +
                                  ", " + std::to_string(bucket.end) + ") of " +
                                  std::to_string(size) + " elements does not divide by dp " +
                                  std::to_string(dp_size));
    const std::int64_t part = size / dp_size;
    const std::int64_t lo = bucket.begin + dp_rank * part, hi = lo + part;
    shard.bucket_slices.emplace_back(lo, hi);
    for (int i : bucket.params) {
      const Parameter& p = params[i];
      const std::int64_t begin = std::max(lo, p.grad_offset);
      const std::int64_t end = std::min(hi, p.grad_offset + p.local_shape.numel());
      if (begin >= end) continue;
      shard.pieces.push_back({i, begin, end - begin, shard.state_numel, begin - p.grad_offset});
      shard.state_numel += end - begin;
    }
  }
  return shard;
}

std::vector<ShardPiece> pieces_of(const OptimizerShard& shard, int param) {
  std::vector<ShardPiece> out;
  for (const auto& piece : shard.pieces)
    if (piece.param == param) out.push_back(piece);
  return out;
}

}  // namespace tandem
