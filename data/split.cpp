// Parsing and normalising --split, with Megatron's float arithmetic step for step so the
// same string gives the same sequence ranges.
#include "data/split.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace tandem::data {

std::string_view split_name(Split split) {
  switch (split) {
    case Split::train:
      return "train";
    case Split::valid:
      return "valid";
    case Split::test:
      return "test";
  }
  return "?";
}

std::array<double, 3> parse_split(std::string_view split) {
  const auto fail = [&](const std::string& rule) {
    throw ConfigError("--split", std::string(split), rule);
  };
  std::vector<double> numbers;
  for (std::size_t i = 0; i < split.size();) {
    const auto is_number_char = [](char c) { return (c >= '0' && c <= '9') || c == '.'; };
    if (!is_number_char(split[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < split.size() && is_number_char(split[j])) ++j;
    const std::string word(split.substr(i, j - i));
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(word.c_str(), &end);
    if (end != word.c_str() + word.size() || errno != 0) fail("'" + word + "' is not a number");
    numbers.push_back(value);
    i = j;
  }
  if (numbers.empty()) fail("expected up to three weights such as 969,30,1");
  if (numbers.size() > 3) fail("expected at most three weights (train, valid, test)");
  numbers.resize(3, 0.0);
  const double sum = (numbers[0] + numbers[1]) + numbers[2];
  if (!(sum > 0)) fail("the weights must not all be zero");
  return {numbers[0] / sum, numbers[1] / sum, numbers[2] / sum};
}

std::array<std::optional<Bookends>, 3> split_matrix(const std::array<double, 3>& fractions) {
  std::array<std::optional<Bookends>, 3> matrix;
  double begin = 0.0;
  for (std::size_t i = 0; i < 3; ++i) {
    const double end = begin + fractions[i];  // cumulative, in Megatron's order
    if (end > begin) matrix[i] = Bookends{begin, end};
    begin = end;
  }
  return matrix;
}

SequenceRange split_range(const Bookends& bookends, std::int64_t num_sequences) {
  const double n = static_cast<double>(num_sequences);
  // nearbyint under the default rounding mode rounds half to even, as Python's round().
  return {static_cast<std::int64_t>(std::nearbyint(bookends.begin * n)),
          static_cast<std::int64_t>(std::nearbyint(bookends.end * n))};
}

}  // namespace tandem::data
