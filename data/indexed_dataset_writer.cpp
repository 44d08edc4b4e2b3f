// Writing Megatron's indexed dataset: tokens go to PREFIX.bin as documents arrive (in the
// chosen dtype, range-checked), and finalize() writes PREFIX.idx from the lengths kept
// in memory, as Megatron's IndexedDatasetBuilder does.
#include <cstring>
#include <limits>
#include <stdexcept>

#include "data/dtype_dispatch.hpp"
#include "data/indexed_dataset.hpp"

namespace tandem::data {
namespace {

std::filesystem::path temporary(const std::filesystem::path& path) {
  return path.string() + ".tmp";
}

template <typename T>
void append_bytes(std::vector<char>& out, const T& value) {
  const auto old = out.size();
  out.resize(old + sizeof(T));
  std::memcpy(out.data() + old, &value, sizeof(T));
}

// Appends `tokens` in the dtype's encoding; throws std::out_of_range for a token the
// dtype cannot hold (a vocabulary too large for uint16, say).
void encode_tokens(TokenDType dtype, std::span<const std::int32_t> tokens, std::vector<char>& out) {
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    for (const std::int32_t token : tokens) {
      if constexpr (std::numeric_limits<T>::is_integer && sizeof(T) < sizeof(std::int32_t)) {
        if (token < std::numeric_limits<T>::min() || token > std::numeric_limits<T>::max())
          throw std::out_of_range("token " + std::to_string(token) + " does not fit dtype " +
                                  std::string(dtype_name(dtype)));
      }
      append_bytes(out, static_cast<T>(token));
    }
  });
}

void write_or_throw(std::ofstream& out, const std::vector<char>& bytes,
                    const std::filesystem::path& path) {
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(std::filesystem::path prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), document_indices_{0} {
  if (dtype_ == TokenDType::float32 || dtype_ == TokenDType::float64)
    throw std::invalid_argument("an indexed dataset of tokens needs an integer dtype, not " +
                                std::string(dtype_name(dtype_)));
  bin_.open(temporary(bin_path(prefix_)), std::ios::binary | std::ios::trunc);
  if (!bin_) throw std::runtime_error("cannot create " + temporary(bin_path(prefix_)).string());
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finalized_) return;
  bin_.close();
  std::error_code ignored;
  std::filesystem::remove(temporary(bin_path(prefix_)), ignored);
  std::filesystem::remove(temporary(idx_path(prefix_)), ignored);
}

void IndexedDatasetWriter::add_document(std::span<const std::int32_t> tokens) {
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw std::length_error("a sequence's length must fit int32");
  const std::int32_t length = static_cast<std::int32_t>(tokens.size());
  add_document(tokens, std::span<const std::int32_t>(&length, 1));
}

void IndexedDatasetWriter::add_document(std::span<const std::int32_t> tokens,
                                        std::span<const std::int32_t> sequence_lengths) {
  if (finalized_) throw std::logic_error("add_document after finalize");
  std::int64_t total = 0;
  for (const std::int32_t length : sequence_lengths) {
    if (length < 0) throw std::invalid_argument("a sequence length must be ≥ 0");
    total += length;
  }
  if (total != static_cast<std::int64_t>(tokens.size()))
    throw std::invalid_argument("sequence lengths sum to " + std::to_string(total) + ", not to " +
                                std::to_string(tokens.size()) + " tokens");
  buffer_.clear();
  encode_tokens(dtype_, tokens, buffer_);
  write_or_throw(bin_, buffer_, temporary(bin_path(prefix_)));
  sequence_lengths_.insert(sequence_lengths_.end(), sequence_lengths.begin(),
                           sequence_lengths.end());
  document_indices_.push_back(static_cast<std::int64_t>(sequence_lengths_.size()));
}

void IndexedDatasetWriter::finalize() {
  if (finalized_) throw std::logic_error("finalize called twice");
  bin_.close();
  if (!bin_) throw std::runtime_error("cannot write " + temporary(bin_path(prefix_)).string());

  std::vector<char> idx(kIndexMagic.begin(), kIndexMagic.end());
  append_bytes(idx, kIndexVersion);
  append_bytes(idx, static_cast<std::uint8_t>(dtype_));
  append_bytes(idx, static_cast<std::uint64_t>(sequence_lengths_.size()));
  append_bytes(idx, static_cast<std::uint64_t>(document_indices_.size()));
  for (const std::int32_t size : sequence_lengths_) append_bytes(idx, size);
  std::int64_t pointer = 0;  // byte offset of each sequence in .bin
  const auto itemsize = static_cast<std::int64_t>(dtype_size(dtype_));
  for (const std::int32_t size : sequence_lengths_) {
    append_bytes(idx, pointer);
    pointer += size * itemsize;
  }
  for (const std::int64_t index : document_indices_) append_bytes(idx, index);

  const auto idx_tmp = temporary(idx_path(prefix_));
  std::ofstream out(idx_tmp, std::ios::binary | std::ios::trunc);
  write_or_throw(out, idx, idx_tmp);
  out.close();
  if (!out) throw std::runtime_error("cannot write " + idx_tmp.string());
  std::filesystem::rename(temporary(bin_path(prefix_)), bin_path(prefix_));
  std::filesystem::rename(idx_tmp, idx_path(prefix_));
  finalized_ = true;
}

}  // namespace tandem::data
