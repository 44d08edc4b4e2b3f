#include "exec/mpi/collective_checks.hpp"

#include <stdexcept>

namespace tandem::collective_checks {

std::string describe(const CallSite& where) {
  return std::string(where.op) + " on group " + std::string(where.group) + " (size " +
         std::to_string(where.group_size) + ")";
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.has_data() || !b.has_data() || a.storage->data() != b.storage->data()) return false;
  const std::int64_t a_begin = a.offset * dtype_size(a.dtype).value;
  const std::int64_t b_begin = b.offset * dtype_size(b.dtype).value;
  return a_begin < b_begin + b.bytes().value && b_begin < a_begin + a.bytes().value;
}

void check_same_dtype(const Tensor& input, const Tensor& output, const CallSite& where) {
  if (input.dtype != output.dtype)
    throw std::invalid_argument(describe(where) + ": input is " +
                                std::string(dtype_name(input.dtype)) + " but output is " +
                                std::string(dtype_name(output.dtype)));
}

void check_disjoint(const Tensor& input, const Tensor& output, const CallSite& where) {
  if (overlaps(input, output))
    throw std::invalid_argument(describe(where) + ": input and output share memory");
}

void check_multiple(std::int64_t have, std::string_view have_what, int size, std::int64_t block,
                    std::string_view block_what, const CallSite& where) {
  if (have != size * block)
    throw std::invalid_argument(describe(where) + ": " + std::string(have_what) + " holds " +
                                std::to_string(have) + " elements, expected size × " +
                                std::string(block_what) + " = " + std::to_string(size) + " × " +
                                std::to_string(block) + " = " + std::to_string(size * block));
}

void check_gathered_counts(std::size_t mine, std::size_t all, int size, const CallSite& where) {
  if (all != mine * static_cast<std::size_t>(size))
    throw std::invalid_argument(describe(where) + ": " + std::to_string(all) + " places for " +
                                std::to_string(size) + " members' " + std::to_string(mine) +
                                " counts");
}

void check_split_counts(std::span<const std::int64_t> counts, std::string_view counts_what,
                        std::int64_t total, std::string_view tensor_what, int size,
                        const CallSite& where) {
  const std::string name(counts_what);
  if (counts.size() != static_cast<std::size_t>(size))
    throw std::invalid_argument(describe(where) + ": " + name + " holds " +
                                std::to_string(counts.size()) +
                                " counts, expected one per rank = " + std::to_string(size));
  std::int64_t sum = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] < 0)
      throw std::invalid_argument(describe(where) + ": " + name + "[" + std::to_string(p) +
                                  "] = " + std::to_string(counts[p]) + " is negative");
    sum += counts[p];
  }
  if (sum != total)
    throw std::invalid_argument(describe(where) + ": " + name + " sum to " + std::to_string(sum) +
                                " elements but " + std::string(tensor_what) + " holds " +
                                std::to_string(total));
}

void check_rank(int r, std::string_view what, int size, const CallSite& where) {
  if (r < 0 || r >= size)
    throw std::invalid_argument(describe(where) + ": " + std::string(what) + " " +
                                std::to_string(r) + " is outside the group's ranks [0, " +
                                std::to_string(size) + ")");
}

}  // namespace tandem::collective_checks
