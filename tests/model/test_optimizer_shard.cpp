// The buffer layout and the distributed optimizer's shard arithmetic: buckets in reverse
// registration order, closed at the bucket size and padded to dp, a parameter alone in its
// own bucket; every dp rank owning an equal slice of every bucket; the pieces of all ranks
// covering every parameter element exactly once (checked element by element against a
// brute-force ownership map); the worked example of optimizer_shard.hpp; and the tp shard
// maps (extract, insert, positions) agreeing with each other.
#include <gtest/gtest.h>

#include <numeric>

#include "exec/cpu/cpu_device.hpp"
#include "model/optimizer_shard.hpp"

namespace tandem {
namespace {

ParameterSet make_set(CpuDevice& d, const std::vector<std::int64_t>& sizes, BufferLayout layout) {
  ParameterSet p(1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    p.add({"p" + std::to_string(i), Shape{sizes[i]}, ShardKind::replicated, 0, 0, true, false});
  p.allocate(d, layout);
  return p;
}

TEST(OptimizerShard, WorkedExampleOfTheHeader) {
  // Registration c, b, a → buffer order a (7), b (5), c (3); buckets close at 12 elements.
  CpuDevice d;
  ParameterSet p = make_set(d, {3, 5, 7}, {.bucket_elements = 12, .pad_to = 2});
  ASSERT_EQ(p.buckets().size(), 2u);
  EXPECT_EQ(p.buckets()[0].begin, 0);
  EXPECT_EQ(p.buckets()[0].end, 12);
  EXPECT_EQ(p.buckets()[1].begin, 12);
  EXPECT_EQ(p.buckets()[1].end, 16);  // 3 elements padded to 4
  EXPECT_EQ(p.numel(), 16);
  EXPECT_EQ(p[2].grad_offset, 0);   // a
  EXPECT_EQ(p[1].grad_offset, 7);   // b
  EXPECT_EQ(p[0].grad_offset, 12);  // c
  EXPECT_EQ(p[0].value_offset, p[0].grad_offset);

  const OptimizerShard r0 = make_optimizer_shard(p, 2, 0), r1 = make_optimizer_shard(p, 2, 1);
  ASSERT_EQ(r0.pieces.size(), 2u);
  EXPECT_EQ(r0.pieces[0].param, 2);
  EXPECT_EQ(r0.pieces[0].begin, 0);
  EXPECT_EQ(r0.pieces[0].length, 6);
  EXPECT_EQ(r0.pieces[1].param, 0);
  EXPECT_EQ(r0.pieces[1].begin, 12);
  EXPECT_EQ(r0.pieces[1].length, 2);
  EXPECT_EQ(r0.pieces[1].state_offset, 6);
  EXPECT_EQ(r0.state_numel, 8);
  ASSERT_EQ(r1.pieces.size(), 3u);
  EXPECT_EQ(r1.pieces[0].param, 2);
  EXPECT_EQ(r1.pieces[0].param_offset, 6);
  EXPECT_EQ(r1.pieces[0].length, 1);
  EXPECT_EQ(r1.pieces[1].param, 1);
  EXPECT_EQ(r1.pieces[1].length, 5);
  EXPECT_EQ(r1.pieces[2].param, 0);
  EXPECT_EQ(r1.pieces[2].param_offset, 2);
  EXPECT_EQ(r1.pieces[2].length, 1);
  EXPECT_EQ(r1.state_numel, 7);  // the padding element belongs to no piece
  EXPECT_EQ(r1.bucket_slices[1], (std::pair<std::int64_t, std::int64_t>{14, 16}));
}

TEST(OptimizerShard, RanksCoverEveryElementOnce) {
  const std::vector<std::int64_t> sizes{37, 1, 64, 129, 5, 300, 2, 17};
  for (int dp : {1, 2, 3, 4, 8})
    for (std::int64_t bucket : {0, 50, 200}) {
      CpuDevice d;
      ParameterSet p = make_set(d, sizes, {.bucket_elements = bucket, .pad_to = dp});
      // Brute force: element e of the buffer belongs to the rank whose slice of e's bucket
      // contains it.
      std::vector<int> owner(static_cast<std::size_t>(p.numel()), -1);
      for (const auto& b : p.buckets()) {
        ASSERT_EQ((b.end - b.begin) % dp, 0);
        const std::int64_t part = (b.end - b.begin) / dp;
        for (std::int64_t e = b.begin; e < b.end; ++e)
          owner[static_cast<std::size_t>(e)] = static_cast<int>((e - b.begin) / part);
      }
      std::vector<int> covered(static_cast<std::size_t>(p.numel()), 0);
      std::int64_t states = 0;
      for (int r = 0; r < dp; ++r) {
        const OptimizerShard s = make_optimizer_shard(p, dp, r);
        std::int64_t expect_state = 0;
        for (const auto& piece : s.pieces) {
          const Parameter& q = p[piece.param];
          EXPECT_EQ(piece.state_offset, expect_state);
          expect_state += piece.length;
          EXPECT_EQ(piece.begin, q.grad_offset + piece.param_offset);
          EXPECT_LE(piece.param_offset + piece.length, q.local_shape.numel());
          for (std::int64_t e = piece.begin; e < piece.begin + piece.length; ++e) {
            EXPECT_EQ(owner[static_cast<std::size_t>(e)], r) << "element " << e;
            ++covered[static_cast<std::size_t>(e)];
          }
        }
        EXPECT_EQ(s.state_numel, expect_state);
        states += s.state_numel;
      }
      const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
      EXPECT_EQ(states, total) << "dp " << dp << " bucket " << bucket;
      for (const auto& q : p.all())
        for (std::int64_t e = q.grad_offset; e < q.grad_offset + q.local_shape.numel(); ++e)
          EXPECT_EQ(covered[static_cast<std::size_t>(e)], 1);
    }
}

TEST(OptimizerShard, OwnBucketIsolatesAParameter) {
  CpuDevice d;
  ParameterSet p = make_set(
      d, {10, 4, 6}, {.bucket_elements = 0, .pad_to = 4, .own_bucket = [](const ParameterSpec& s) {
                        return s.name == "p1";
                      }});
  // Buffer order p2, p1, p0: [p2] [p1 alone] [p0].
  ASSERT_EQ(p.buckets().size(), 3u);
  EXPECT_EQ(p.buckets()[1].params, std::vector<int>{1});
  EXPECT_EQ(p.buckets()[1].end - p.buckets()[1].begin, 4);
  EXPECT_EQ(p.buckets()[0].end, 8);                                    // 6 padded to 8
  EXPECT_THROW(make_optimizer_shard(p, 3, 0), std::invalid_argument);  // 8 does not divide by 3
}

// Under mixed precision a rank holds fp32 main values for its own slices only with the
// distributed optimizer (Megatron's DistributedOptimizer: shard_fp32_from_float16_groups),
// for the whole buffer without it; under fp32 the parameters are the main values.
TEST(MainValues, DistributedOptimizerHoldsOnlyItsSlices) {
  auto build = [](DType compute, MainValueShard main, CpuDevice& d) {
    ParameterSet p(1, 0);
    for (std::int64_t n : {3, 5, 7})
      p.add({"p" + std::to_string(n), Shape{n}, ShardKind::replicated, 0, 0, true, false});
    p.allocate(d, {.bucket_elements = 12, .pad_to = 2}, compute, main);
    return p;
  };
  // The header's example: buffer [0, 16), rank 1 of dp 2 owns [6, 12) and [14, 16).
  CpuDevice sharded_device;
  ParameterSet sharded = build(DType::bf16, {.dp_size = 2, .dp_rank = 1}, sharded_device);
  using Slices = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(sharded.main_slices(), (Slices{{6, 12}, {14, 16}}));
  // 16 fp32 gradients, 16 bf16 parameters, 6 + 2 fp32 main values.
  EXPECT_EQ(sharded_device.memory().live(), Bytes(16 * 4 + 16 * 2 + 8 * 4));
  EXPECT_TRUE(sharded.separate_main());
  EXPECT_FALSE(sharded.holds_all_main());
  EXPECT_EQ(sharded.main_values(14, 2).offset, 6);  // after the first slice's 6
  EXPECT_EQ(sharded.main_values(7, 5).offset, 1);
  EXPECT_THROW(sharded.main_values(0, 1), std::logic_error);   // rank 0's
  EXPECT_THROW(sharded.main_values(10, 4), std::logic_error);  // across two slices

  CpuDevice whole_device;
  ParameterSet whole = build(DType::bf16, {}, whole_device);
  EXPECT_EQ(whole_device.memory().live(), Bytes(16 * 4 + 16 * 2 + 16 * 4));
  EXPECT_TRUE(whole.holds_all_main());

  CpuDevice fp32_device;
  ParameterSet fp32 = build(DType::fp32, {.dp_size = 2, .dp_rank = 1}, fp32_device);
  EXPECT_EQ(fp32_device.memory().live(), Bytes(16 * 4 + 16 * 4));
  EXPECT_FALSE(fp32.separate_main());
  EXPECT_EQ(fp32.main_values(0, 3).storage, fp32.compute_values().storage);
}

TEST(ShardMaps, ExtractInsertAndPositionsAgree) {
  for (ShardKind kind :
       {ShardKind::replicated, ShardKind::rows, ShardKind::columns, ShardKind::qkv_rows}) {
    const ParameterSpec spec{"x", Shape{12, 4}, kind, 0, 0, true, false};
    std::vector<float> full(48);
    std::iota(full.begin(), full.end(), 0.0f);
    std::vector<float> rebuilt(48, -1.0f);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> shard;
      extract_shard(spec, 2, r, full, shard);
      const auto at = shard_positions(spec, 2, r);
      ASSERT_EQ(at.size(), shard.size());
      for (std::size_t i = 0; i < at.size(); ++i)
        EXPECT_EQ(shard[i], full[static_cast<std::size_t>(at[i])]);  // value = its index
      insert_shard(spec, 2, r, shard, rebuilt);
    }
    EXPECT_EQ(rebuilt, full) << shard_kind_name(kind);
    EXPECT_EQ(parse_shard_kind(shard_kind_name(kind)), kind);
  }
  // qkv_rows at tp 2: rank 1 holds rows 2–3, 6–7, 10–11 (its heads of q, k and v).
  const ParameterSpec qkv{"qkv", Shape{12, 1}, ShardKind::qkv_rows, 0, 0, true, false};
  EXPECT_EQ(shard_positions(qkv, 2, 1), (std::vector<std::int64_t>{2, 3, 6, 7, 10, 11}));
}

}  // namespace
}  // namespace tandem
