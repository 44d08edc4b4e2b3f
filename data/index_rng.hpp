// The random source of dataset indices. Megatron shuffles with numpy's RandomState
// seeded with --seed; tandem uses std::mt19937_64 seeded with the same number, in the
// same order of draws (document index, then shuffle index), and its own Fisher–Yates
// (j = draw mod (i + 1), the form of Megatron's helpers.cpp), so indices are the same on
// every platform, though not numpy's. std::shuffle is not used: its draws are
// implementation-defined.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace tandem::data {

class IndexRng {
 public:
  explicit IndexRng(std::uint64_t seed) : engine_(seed) {}

  template <typename T>
  void shuffle(std::span<T> values) {
    for (std::size_t i = values.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(engine_() % i);  // uniform in [0, i - 1]
      std::swap(values[i - 1], values[j]);
    }
  }

  std::uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace tandem::data
