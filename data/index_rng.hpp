// The random source of dataset indices. Megatron shuffles with numpy's RandomState
// seeded with --seed; tandem uses std::mt19937_64 seeded with the same number, in the
// same order of draws (document index, then shuffle index), and its own Fisher–Yates
// (j = draw mod (i + 1), the form of Megatron's helpers.cpp), so indices are the same on
// every platform, though not numpy's. std::shuffle is not used: its draws are
// implementation-defined.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace tandem::data {

class IndexRng {
 public:
  explicit IndexRng(std::uint64_t seed) : engine_(seed) {}

  // Fisher–Yates from the back: for i = n … 2, swap values[i - 1] with values[draw % i].
  // The draws do not depend on the values, so a batch of them is drawn first and the
  // elements they pick are prefetched while the batch's swaps run in order: the same
  // permutation, without waiting on memory for every swap of a large index.
  template <typename T>
  void shuffle(std::span<T> values) {
    constexpr std::size_t kBatch = 32;
    std::size_t picks[kBatch];
    std::size_t i = values.size();
    while (i > 1) {
      const std::size_t batch = std::min(kBatch, i - 1);
      for (std::size_t b = 0; b < batch; ++b) {
        picks[b] = static_cast<std::size_t>(engine_() % (i - b));  // uniform in [0, i - b - 1]
        __builtin_prefetch(&values[picks[b]], 1);
      }
      for (std::size_t b = 0; b < batch; ++b, --i) std::swap(values[i - 1], values[picks[b]]);
    }
  }

  std::uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace tandem::data
