// The train/valid/test split of one dataset, as Megatron's --split "969,30,1": the
// numbers are normalised to fractions, laid end to end over [0, 1], and each split takes
// the sequences whose index falls in its interval, rounded half to even as Python's
// round(). Worked example, 1000 sequences and "969,30,1": train [0, 969), valid
// [969, 999), test [999, 1000). A split with weight 0 does not exist (nullopt).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem::data {

enum class Split { train = 0, valid = 1, test = 2 };
inline constexpr std::array<Split, 3> kSplits{Split::train, Split::valid, Split::test};
std::string_view split_name(Split split);

// "969,30,1" → {0.969, 0.030, 0.001}. Numbers are the runs of digits and dots (any other
// character separates them); fewer than three are padded with zeros. Throws ConfigError
// naming --split when there are more than three, none, or they sum to zero.
std::array<double, 3> parse_split(std::string_view split);

struct Bookends {
  double begin, end;  // fractions of the dataset, begin < end
};

// Megatron's convert_split_vector_to_split_matrix for one vector.
std::array<std::optional<Bookends>, 3> split_matrix(const std::array<double, 3>& fractions);

struct SequenceRange {
  std::int64_t begin = 0, end = 0;  // sequence ids [begin, end)
  std::int64_t size() const { return end - begin; }
};

// [round(begin × n), round(end × n)), rounding half to even.
SequenceRange split_range(const Bookends& bookends, std::int64_t num_sequences);

}  // namespace tandem::data
