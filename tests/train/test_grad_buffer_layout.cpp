// Megatron-Core's gradient buffer, checked against hand-computed values of its rules
// (megatron/core/optimizer/param_layout.py, DistributedOptimizer._compute_per_buffer_
// param_layout, resolve_ddp_bucket_size): with the distributed optimizer every parameter
// starts at a multiple of 64 elements and every bucket ends at a multiple of lcm(dp, 128)
// (lcm(dp, 128, 2^16) for high NCCL bus bandwidth); the default bucket is max(40M, 1M · dp)
// elements; the tied word embedding has a bucket of its own only across pipeline stages;
// without the distributed optimizer nothing is padded. The expected offsets are worked out
// by hand in the comments, not by calling the code under test.
#include <gtest/gtest.h>

#include "exec/cpu/cpu_device.hpp"
#include "model/optimizer_shard.hpp"
#include "schedules/layout.hpp"
#include "train/grad_buckets.hpp"

namespace tandem {
namespace {

ParallelContext context(int world, int pp = 1, int ep = 1, int rank = 0) {
  return make_parallel_context(make_layout({.world_size = world, .pp = pp, .ep = ep}), rank);
}

// Replicated 1-D parameters of `sizes` in registration order (the buffer lays them out
// last first). `names` overrides the name of parameter i where given.
std::vector<Parameter> parameters(const std::vector<std::int64_t>& sizes,
                                  const std::vector<std::string>& names = {}) {
  std::vector<Parameter> out;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Parameter p;
    p.spec.name = i < names.size() ? names[i] : "p" + std::to_string(i);
    p.spec.full_shape = p.local_shape = Shape{sizes[i]};
    out.push_back(std::move(p));
  }
  return out;
}

struct Laid {
  std::vector<BufferBucket> buckets;
  std::int64_t numel = 0;
};

Laid lay(std::vector<Parameter>& params, const BufferLayout& layout) {
  Laid l;
  l.buckets = layout_buffers(params, layout, l.numel);
  return l;
}

using Range = std::pair<std::int64_t, std::int64_t>;
std::vector<Range> ranges(const Laid& l) {
  std::vector<Range> out;
  for (const auto& b : l.buckets) out.emplace_back(b.begin, b.end);
  return out;
}

Scenario distributed(std::optional<std::int64_t> bucket) {
  Scenario s;
  s.parallelism.use_distributed_optimizer = true;
  s.parallelism.overlap_grad_reduce = true;
  s.parallelism.ddp_bucket_size = bucket;
  return s;
}

TEST(GradBufferLayout, DefaultBucketSizeIsMegatronsMaxOf40MAnd1MPerDpRank) {
  EXPECT_EQ(default_ddp_bucket_size(1), 40'000'000);
  EXPECT_EQ(default_ddp_bucket_size(40), 40'000'000);
  EXPECT_EQ(default_ddp_bucket_size(41), 41'000'000);
  EXPECT_EQ(default_ddp_bucket_size(64), 64'000'000);
  // The layout takes it with overlap_grad_reduce (dp · cp ranks), else one bucket.
  EXPECT_EQ(grad_buffer_layout(distributed(std::nullopt), context(1), 0).bucket_elements,
            40'000'000);
  EXPECT_EQ(grad_buffer_layout(distributed(std::nullopt), context(64), 0).bucket_elements,
            64'000'000);
  Scenario plain = distributed(std::nullopt);
  plain.parallelism.overlap_grad_reduce = false;
  EXPECT_EQ(grad_buffer_layout(plain, context(64), 0).bucket_elements, 0);
  // --ddp-num-buckets: this rank's parameters divided among that many buckets.
  Scenario n = distributed(std::nullopt);
  n.parallelism.ddp_num_buckets = 4;
  EXPECT_EQ(grad_buffer_layout(n, context(2), 1003).bucket_elements, 250);
}

TEST(GradBufferLayout, BucketEndDivisorIsLcmOfDpAnd128AndOptionally2To16) {
  EXPECT_EQ(bucket_end_divisor(1, false), 128);
  EXPECT_EQ(bucket_end_divisor(3, false), 384);
  EXPECT_EQ(bucket_end_divisor(64, false), 128);
  EXPECT_EQ(bucket_end_divisor(96, false), 384);
  EXPECT_EQ(bucket_end_divisor(3, true), 196'608);  // 3 · 2^16
  EXPECT_EQ(bucket_end_divisor(64, true), 65'536);
}

// dp 3, bucket 500: registration a (100), b (200), c (300) → buffer order c, b, a.
//   c at 0 (ends 300); b starts at 300 aligned up to 64 → 320, ends 520; 520 − 0 ≥ 500
//   closes the bucket, its end 520 padded to a multiple of 384 → 768; a at 768 (a
//   multiple of 64 already), ends 868, the last bucket's end padded to 1152.
TEST(GradBufferLayout, DistributedOptimizerAtDp3AlignsParametersAndPadsBuckets) {
  const BufferLayout layout = grad_buffer_layout(distributed(500), context(3), 600);
  EXPECT_EQ(layout.pad_to, 384);
  EXPECT_EQ(layout.param_align, 64);
  auto params = parameters({100, 200, 300});
  const Laid l = lay(params, layout);
  EXPECT_EQ(params[2].grad_offset, 0);
  EXPECT_EQ(params[1].grad_offset, 320);
  EXPECT_EQ(params[0].grad_offset, 768);
  EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 768}, {768, 1152}}));
  EXPECT_EQ(l.numel, 1152);
}

TEST(GradBufferLayout, HighNcclBusBandwidthPadsBucketsToLcmWith2To16) {
  Scenario s = distributed(500);
  s.parallelism.ddp_pad_buckets_for_high_nccl_busbw = true;
  const BufferLayout layout = grad_buffer_layout(s, context(3), 600);
  EXPECT_EQ(layout.pad_to, 196'608);
  auto params = parameters({100, 200, 300});
  const Laid l = lay(params, layout);
  // The same parameter starts as above within the first bucket; the second starts at the
  // first's padded end.
  EXPECT_EQ(params[1].grad_offset, 320);
  EXPECT_EQ(params[0].grad_offset, 196'608);
  EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 196'608}, {196'608, 393'216}}));
}

// Without the distributed optimizer Megatron's default layout pads nothing.
TEST(GradBufferLayout, WithoutTheDistributedOptimizerNothingIsPadded) {
  Scenario s = distributed(500);
  s.parallelism.use_distributed_optimizer = false;
  const BufferLayout layout = grad_buffer_layout(s, context(3), 600);
  auto params = parameters({100, 200, 300});
  const Laid l = lay(params, layout);
  EXPECT_EQ(params[2].grad_offset, 0);
  EXPECT_EQ(params[1].grad_offset, 300);
  EXPECT_EQ(params[0].grad_offset, 500);  // 300 + 200 = 500 ≥ 500 closed the first bucket
  EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 500}, {500, 600}}));
}

// Four 25M-element parameters at the default bucket size.
//   dp 1 (40M, pad 128): p3 [0, 25M), p2 [25M, 50M): 50M ≥ 40M closes [0, 50M) (a multiple
//   of 128); p1, p0 fill [50M, 100M).
//   dp 64 (64M, pad 128): p3, p2 span 50M < 64M; p1 takes it to 75M ≥ 64M: the bucket ends
//   at 75,000,000 padded to 128 → 75,000,064; p0 [75,000,064, 100,000,064), padded to
//   100,000,128.
TEST(GradBufferLayout, BucketBoundariesAtTheDefaultSizeForDp1AndDp64) {
  const std::int64_t m25 = 25'000'000;
  {
    auto params = parameters({m25, m25, m25, m25});
    const Laid l = lay(params, grad_buffer_layout(distributed(std::nullopt), context(1), 0));
    EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 50'000'000}, {50'000'000, 100'000'000}}));
  }
  {
    auto params = parameters({m25, m25, m25, m25});
    const Laid l = lay(params, grad_buffer_layout(distributed(std::nullopt), context(64), 0));
    EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 75'000'064}, {75'000'064, 100'000'128}}));
    EXPECT_EQ(params[0].grad_offset, 75'000'064);
  }
}

// The tied word embedding on a pipeline's first or last stage (Megatron's shared_embedding)
// is put in a bucket of its own: the bucket before it closes at its (aligned) start.
//   pp 2, dp 2 (pad 128), one bucket otherwise; registration word (1000), x (10), y (30)
//   → y [0, 30), x at 64 [64, 74); the word embedding closes [0, 74) → [0, 128) and gets
//   [128, 1128) → [128, 1152).
TEST(GradBufferLayout, TiedEmbeddingAcrossStagesHasABucketOfItsOwn) {
  const std::vector<std::string> names{"embedding.word_embeddings.weight", "x", "y"};
  Scenario s = distributed(std::nullopt);
  s.parallelism.overlap_grad_reduce = false;
  s.parallelism.pipeline_model_parallel_size = 2;
  {
    auto params = parameters({1000, 10, 30}, names);
    const Laid l = lay(params, grad_buffer_layout(s, context(4, 2), 0));
    EXPECT_EQ(params[1].grad_offset, 64);
    EXPECT_EQ(params[0].grad_offset, 128);
    EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 128}, {128, 1152}}));
  }
  // Untied (no shared_embedding), pp 1 (the same stage holds both uses) or without the
  // distributed optimizer: one bucket.
  Scenario untied = s;
  untied.model.untie_embeddings_and_output_weights = true;
  Scenario plain = s;
  plain.parallelism.use_distributed_optimizer = false;
  for (const auto& [scenario, ctx] : {std::pair{untied, context(4, 2)}, std::pair{s, context(2)},
                                      std::pair{plain, context(4, 2)}}) {
    auto params = parameters({1000, 10, 30}, names);
    const Laid l = lay(params, grad_buffer_layout(scenario, ctx, 0));
    EXPECT_EQ(l.buckets.size(), 1u);
  }
}

// Megatron-Core buckets only the first model chunk of the first pipeline stage
// (per_chunk_bucket_sizes); every chunk is a buffer of its own. Bucket 500, dp 2 (pad
// 128); registration chunk 0: a (300), b (300); chunk 1: c (300), d (300) → d, c, b, a.
//   chunk 1 (one bucket): d [0, 300), c [320, 620) → [0, 640); chunk 0 (500): b [640,
//   940), a at 960, 1260 − 640 ≥ 500 → [640, 1280). Off the first stage chunk 0 is one
//   bucket too — the same ranges here, as both chunks fit — and with a bucket of 200 the
//   first stage cuts chunk 0 after b: [640, 1024), then a [1024, 1324) → [1024, 1408).
TEST(GradBufferLayout, OnlyTheFirstChunkOfTheFirstStageIsBucketed) {
  auto chunked = [] {
    auto params = parameters({300, 300, 300, 300});
    params[2].chunk = params[3].chunk = 1;
    return params;
  };
  Scenario s = distributed(500);
  s.parallelism.pipeline_model_parallel_size = 2;
  s.model.untie_embeddings_and_output_weights = true;
  {
    auto params = chunked();
    const Laid l = lay(params, grad_buffer_layout(s, context(4, 2), 0));
    EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 640}, {640, 1280}}));
    EXPECT_EQ(params[0].grad_offset, 960);
  }
  s.parallelism.ddp_bucket_size = 200;
  {
    auto params = chunked();
    const Laid l = lay(params, grad_buffer_layout(s, context(4, 2), 0));
    EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 640}, {640, 1024}, {1024, 1408}}));
  }
  {
    const ParallelContext second_stage = context(4, 2, 1, 2);
    ASSERT_EQ(second_stage.coords.pp, 1);
    EXPECT_EQ(grad_buffer_layout(s, second_stage, 0).bucket_elements, 0);
    auto params = chunked();
    const Laid l = lay(params, grad_buffer_layout(s, second_stage, 0));
    EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 640}, {640, 1280}}));
  }
}

// The experts' buckets pad to the expert-data-parallel size: world 8, ep 4 → expert dp 2,
// lcm(2, 128) = 128, dense lcm(8, 128) = 128; with busbw both 2^16. A dense 100 [0, 100)
// → [0, 128); the expert weight 10 [128, 138) → [128, 256).
TEST(GradBufferLayout, ExpertBucketsPadToTheExpertDataParallelSize) {
  const BufferLayout layout = grad_buffer_layout(distributed(std::nullopt), context(8, 1, 4), 0);
  EXPECT_EQ(layout.expert_pad_to, 128);
  auto params = parameters({10, 100});
  params[0].spec.expert = true;
  const Laid l = lay(params, layout);
  EXPECT_EQ(ranges(l), (std::vector<Range>{{0, 128}, {128, 256}}));
  EXPECT_TRUE(l.buckets[1].expert);
}

// The shard the distributed optimizer cuts from the dp-3 layout above: a third of each
// bucket per rank; rank 1 owns [256, 512) of [0, 768) — c's [256, 300) and b's [320, 512),
// the gap [300, 320) in no piece — and (1152 − 768) / 3 = 128 elements of the second,
// [896, 1024), past a's end at 868: padding only, no piece.
TEST(GradBufferLayout, Dp3ShardsCutEqualSlicesAcrossAlignmentGaps) {
  CpuDevice d;
  ParameterSet set(1, 0);
  for (auto& p : parameters({100, 200, 300})) set.add(p.spec);
  set.allocate(d, grad_buffer_layout(distributed(500), context(3), 600));
  EXPECT_EQ(set.numel(), 1152);
  const OptimizerShard r1 = make_optimizer_shard(set, 3, 1);
  EXPECT_EQ(r1.bucket_slices, (std::vector<Range>{{256, 512}, {896, 1024}}));
  ASSERT_EQ(r1.pieces.size(), 2u);
  EXPECT_EQ(r1.pieces[0].param, 2);  // c
  EXPECT_EQ(r1.pieces[0].begin, 256);
  EXPECT_EQ(r1.pieces[0].length, 44);
  EXPECT_EQ(r1.pieces[1].param, 1);  // b
  EXPECT_EQ(r1.pieces[1].begin, 320);
  EXPECT_EQ(r1.pieces[1].length, 192);
  // Every element of every parameter is owned by exactly one rank.
  std::int64_t owned = 0;
  for (int r = 0; r < 3; ++r) owned += make_optimizer_shard(set, 3, r).state_numel;
  EXPECT_EQ(owned, 600);
}

TEST(GradBufferLayout, ReduceDtypeFollowsMegatronsPrecisionFlags) {
  TrainingConfig t;
  EXPECT_EQ(grad_reduce_dtype(t), DType::fp32);
  t.grad_reduce_in_bf16 = true;  // read only under bf16
  EXPECT_EQ(grad_reduce_dtype(t), DType::fp32);
  t.bf16 = true;
  EXPECT_EQ(grad_reduce_dtype(t), DType::bf16);
  t.accumulate_allreduce_grads_in_fp32 = true;  // Megatron: grad_reduce_in_bf16 wins
  EXPECT_EQ(grad_reduce_dtype(t), DType::bf16);
  t.grad_reduce_in_bf16 = false;
  EXPECT_EQ(grad_reduce_dtype(t), DType::fp32);
  t.bf16 = false;
  t.fp16 = true;
  EXPECT_EQ(grad_reduce_dtype(t), DType::fp32);
  t.accumulate_allreduce_grads_in_fp32 = false;
  EXPECT_EQ(grad_reduce_dtype(t), DType::fp16);
}

}  // namespace
}  // namespace tandem
