// Vocab-parallel cross entropy: the phases run over 1–4 shards of the vocabulary and
// combined by hand (max, then sums) give the unsharded loss and gradient of a double
// reference; the reference gradient matches central differences; in-place backward.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/cross_entropy.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;
using testing::random_ids;

// Loss per row, -log softmax(target), in double.
Doubles reference_loss(std::int64_t rows, std::int64_t V, const Doubles& logits,
                       const std::vector<std::int32_t>& targets) {
  Doubles loss(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    double max = -1e300, sum = 0;
    for (std::int64_t j = 0; j < V; ++j) max = std::max(max, logits[r * V + j]);
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(logits[r * V + j] - max);
    loss[r] = std::log(sum) + max - logits[r * V + targets[r]];
  }
  return loss;
}

// d (Σ_r dloss_r · loss_r) / d logits.
Doubles reference_grad(std::int64_t rows, std::int64_t V, const Doubles& logits,
                       const std::vector<std::int32_t>& targets, const Doubles& dloss) {
  Doubles g(logits.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double max = -1e300, sum = 0;
    for (std::int64_t j = 0; j < V; ++j) max = std::max(max, logits[r * V + j]);
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(logits[r * V + j] - max);
    for (std::int64_t j = 0; j < V; ++j)
      g[r * V + j] =
          (std::exp(logits[r * V + j] - max) / sum - (j == targets[r] ? 1.0 : 0.0)) * dloss[r];
  }
  return g;
}

TEST(CrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  const std::int64_t rows = 3, V = 11;
  const Doubles logits = testing::to_double(random_floats(rows * V, 1, -3.0f, 3.0f));
  const auto targets = random_ids(rows, V, 2);
  const Doubles dloss = testing::to_double(random_floats(rows, 3));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& x) {
        return testing::weighted_sum(reference_loss(rows, V, x, targets), dloss);
      },
      logits, reference_grad(rows, V, logits, targets, dloss)));
}

// Runs the three phases over `shards` column blocks of (rows, V) logits, doing the
// all-reduces (max, then sum) by hand; returns per-row loss and the full gradient.
struct Sharded {
  Floats loss, grad;
};

Sharded run_sharded(std::int64_t rows, std::int64_t V, std::int64_t shards, const Floats& logits,
                    const std::vector<std::int32_t>& targets, const Floats& dloss) {
  std::vector<Floats> local(shards);
  std::vector<CrossEntropyShape> shape(shards);
  for (std::int64_t s = 0; s < shards; ++s) {
    const std::int64_t begin = V * s / shards, end = V * (s + 1) / shards;
    shape[s] = {.rows = rows, .local_vocab = end - begin, .vocab_begin = begin};
    for (std::int64_t r = 0; r < rows; ++r)
      local[s].insert(local[s].end(), logits.begin() + r * V + begin, logits.begin() + r * V + end);
  }
  Floats max(rows, -INFINITY), sum(rows, 0.0f), target(rows, 0.0f);
  for (std::int64_t s = 0; s < shards; ++s) {  // phase (a), all-reduce MAX
    Floats m(rows);
    cross_entropy_max(shape[s], local[s].data(), m.data());
    for (std::int64_t r = 0; r < rows; ++r) max[r] = std::max(max[r], m[r]);
  }
  for (std::int64_t s = 0; s < shards; ++s) {  // phase (b), all-reduce SUM of both
    Floats se(rows), tl(rows);
    cross_entropy_sums(shape[s], local[s].data(), targets.data(), max.data(), se.data(), tl.data());
    for (std::int64_t r = 0; r < rows; ++r) {
      sum[r] += se[r];
      target[r] += tl[r];
    }
  }
  Sharded out{Floats(rows), Floats(logits.size())};
  cross_entropy_loss(rows, max.data(), sum.data(), target.data(), out.loss.data());
  for (std::int64_t s = 0; s < shards; ++s) {  // phase (c), in place as llm.c does
    cross_entropy_backward(shape[s], local[s].data(), targets.data(), max.data(), sum.data(),
                           dloss.data(), local[s].data());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < shape[s].local_vocab; ++j)
        out.grad[r * V + shape[s].vocab_begin + j] = local[s][r * shape[s].local_vocab + j];
  }
  return out;
}

TEST(CrossEntropy, ShardedPhasesMatchUnshardedReference) {
  for (const auto& [rows, V] :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 5}, {65, 130}, {64, 5003}}) {
    const Floats logits = random_floats(rows * V, 4, -8.0f, 8.0f);
    const auto targets = random_ids(rows, V, 5);
    const Floats dloss = random_floats(rows, 6);
    const Doubles ld = testing::to_double(logits);
    const Doubles loss_ref = reference_loss(rows, V, ld, targets);
    const Doubles grad_ref = reference_grad(rows, V, ld, targets, testing::to_double(dloss));
    Floats first_grad;
    for (std::int64_t shards = 1; shards <= std::min<std::int64_t>(4, V); ++shards) {
      const Sharded got = run_sharded(rows, V, shards, logits, targets, dloss);
      EXPECT_TRUE(all_close(got.loss, loss_ref, 1e-5, Doubles(rows, 1.0)))
          << rows << "x" << V << " / " << shards;
      Doubles scale(grad_ref.size());
      for (std::size_t i = 0; i < scale.size(); ++i)
        scale[i] = std::fabs(dloss[i / V]) / static_cast<double>(V);
      EXPECT_TRUE(all_close(got.grad, grad_ref, 1e-5, scale))
          << rows << "x" << V << " / " << shards;
    }
  }
}

TEST(CrossEntropy, BackwardIntoSeparateBufferEqualsInPlace) {
  const std::int64_t rows = 9, V = 300;
  const Floats logits = random_floats(rows * V, 7, -5.0f, 5.0f);
  const auto targets = random_ids(rows, V, 8);
  const Floats dloss(rows, 1.0f / rows);
  const CrossEntropyShape s{.rows = rows, .local_vocab = V};
  Floats max(rows), sum(rows), target(rows);
  cross_entropy_max(s, logits.data(), max.data());
  cross_entropy_sums(s, logits.data(), targets.data(), max.data(), sum.data(), target.data());
  Floats separate(logits.size()), inplace = logits;
  cross_entropy_backward(s, logits.data(), targets.data(), max.data(), sum.data(), dloss.data(),
                         separate.data());
  cross_entropy_backward(s, inplace.data(), targets.data(), max.data(), sum.data(), dloss.data(),
                         inplace.data());
  EXPECT_TRUE(testing::bitwise_equal(separate, inplace));
}

}  // namespace
}  // namespace tandem::kernels::cpu
