// Vocab-parallel word embedding and position embedding, forward and backward, against
// double references: shards of the table sum to the unsharded lookup; gradients of
// repeated tokens accumulate; determinism.
#include <gtest/gtest.h>

#include "kernels/cpu/embedding.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace tandem::kernels::cpu {
namespace {

using testing::all_close;
using testing::Doubles;
using testing::Floats;
using testing::random_floats;
using testing::random_ids;

// out(r, :) = table(tokens[r], :) + position(r % T, :), in double.
Doubles reference_forward(const Doubles& table, const Doubles& position,
                          const std::vector<std::int32_t>& tokens, std::int64_t T, std::int64_t C) {
  Doubles out(tokens.size() * C);
  for (std::size_t r = 0; r < tokens.size(); ++r)
    for (std::int64_t c = 0; c < C; ++c)
      out[r * C + c] = table[tokens[r] * C + c] + position[(r % T) * C + c];
  return out;
}

TEST(Embedding, ReferenceGradientsMatchFiniteDifferences) {
  const std::int64_t B = 2, T = 3, C = 2, vocab = 4;
  const std::vector<std::int32_t> tokens = {1, 3, 1, 0, 1, 2};  // token 1 repeats
  const Doubles table = testing::to_double(random_floats(vocab * C, 13));
  const Doubles position = testing::to_double(random_floats(T * C, 14));
  const Doubles w = testing::to_double(random_floats(B * T * C, 15));
  Doubles dtable(vocab * C, 0.0), dposition(T * C, 0.0);
  for (std::int64_t r = 0; r < B * T; ++r)
    for (std::int64_t c = 0; c < C; ++c) {
      dtable[tokens[r] * C + c] += w[r * C + c];
      dposition[(r % T) * C + c] += w[r * C + c];
    }
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& x) {
        return testing::weighted_sum(reference_forward(x, position, tokens, T, C), w);
      },
      table, dtable));
  EXPECT_TRUE(testing::matches_finite_differences(
      [&](const Doubles& x) {
        return testing::weighted_sum(reference_forward(table, x, tokens, T, C), w);
      },
      position, dposition));
}

TEST(Embedding, ShardsSumToTheFullLookupAndGradient) {
  for (const auto& [rows, C, vocab] :
       {std::tuple<std::int64_t, std::int64_t, std::int32_t>{1, 1, 1},
        {7, 5, 3},
        {65, 130, 50},
        {512, 96, 11}}) {
    const std::size_t n = static_cast<std::size_t>(rows * C);
    const Floats table = random_floats(static_cast<std::size_t>(vocab * C), 1);
    const auto tokens = random_ids(static_cast<std::size_t>(rows), vocab, 2);
    const Floats dout = random_floats(n, 3);
    Doubles sum_out(n, 0.0);
    Floats dtable(static_cast<std::size_t>(vocab * C), 0.0f);
    const std::int64_t shards = std::min<std::int64_t>(3, vocab);
    for (std::int64_t s = 0; s < shards; ++s) {  // uneven shards cover [0, vocab)
      const VocabShard shard{.begin = vocab * s / shards,
                             .size = vocab * (s + 1) / shards - vocab * s / shards};
      Floats out(n, 7.0f);
      embedding_forward(tokens.data(), table.data() + shard.begin * C, shard, rows, C, out.data());
      for (std::size_t i = 0; i < n; ++i) sum_out[i] += out[i];
      embedding_backward(tokens.data(), dout.data(), shard, rows, C,
                         dtable.data() + shard.begin * C);
    }
    Doubles ref_out(n), ref_dtable(dtable.size(), 0.0), scale(dtable.size(), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < C; ++c) {
        ref_out[r * C + c] = table[tokens[r] * C + c];
        ref_dtable[tokens[r] * C + c] += dout[r * C + c];
        scale[tokens[r] * C + c] += std::fabs(dout[r * C + c]);
      }
    }
    EXPECT_TRUE(all_close(testing::Floats(sum_out.begin(), sum_out.end()), ref_out, 0.0));
    EXPECT_TRUE(all_close(dtable, ref_dtable, 1e-6, scale)) << rows << " " << C << " " << vocab;
  }
}

TEST(Embedding, PositionForwardAndBackward) {
  const std::int64_t B = 3, T = 65, C = 7;
  const std::size_t n = static_cast<std::size_t>(B * T * C);
  const Floats pos = random_floats(T * C, 4), x = random_floats(n, 5), dout = random_floats(n, 6);
  Floats out = x;
  position_embedding_forward(pos.data(), B, T, C, out.data());
  Floats dpos(T * C, 1.0f);
  position_embedding_backward(dout.data(), B, T, C, dpos.data());
  Doubles ref_out(n), ref_dpos(T * C, 1.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < T * C; ++i) {
      ref_out[b * T * C + i] = static_cast<double>(x[b * T * C + i]) + pos[i];
      ref_dpos[i] += dout[b * T * C + i];
    }
  EXPECT_TRUE(all_close(out, ref_out, 1e-7, Doubles(n, 2.0)));
  EXPECT_TRUE(all_close(dpos, ref_dpos, 1e-6, Doubles(T * C, 4.0)));
}

TEST(Embedding, BackwardIsBitwiseRepeatable) {
  const std::int64_t rows = 2048, C = 96;
  const auto tokens = random_ids(rows, 5, 7);  // many repeats per token
  const Floats dout = random_floats(static_cast<std::size_t>(rows * C), 8);
  Floats g1(5 * C, 0.0f), g2(5 * C, 0.0f);
  embedding_backward(tokens.data(), dout.data(), {.begin = 0, .size = 5}, rows, C, g1.data());
  embedding_backward(tokens.data(), dout.data(), {.begin = 0, .size = 5}, rows, C, g2.data());
  EXPECT_TRUE(testing::bitwise_equal(g1, g2));
}

}  // namespace
}  // namespace tandem::kernels::cpu
