// The dtype table and the reader of Megatron's indexed dataset: every count, size,
// pointer and document index is checked against the files before anything is read.
#include "data/indexed_dataset.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "core/error.hpp"
#include "data/dtype_dispatch.hpp"

namespace tandem::data {

static_assert(std::endian::native == std::endian::little,
              "the .idx/.bin formats are little-endian and read by memcpy");

std::optional<TokenDType> token_dtype_from_code(std::uint8_t code) {
  if (code < 1 || code > 8) return std::nullopt;
  return static_cast<TokenDType>(code);
}

std::size_t dtype_size(TokenDType dtype) {
  return visit_dtype(dtype, [](auto v) { return sizeof(v); });
}

std::string_view dtype_name(TokenDType dtype) {
  static constexpr std::string_view names[] = {"",      "uint8",   "int8",    "int16", "int32",
                                               "int64", "float64", "float32", "uint16"};
  return names[static_cast<std::size_t>(dtype)];
}

TokenDType optimal_token_dtype(std::int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::uint16 : TokenDType::int32;
}

std::filesystem::path idx_path(const std::filesystem::path& prefix) {
  return prefix.string() + ".idx";
}
std::filesystem::path bin_path(const std::filesystem::path& prefix) {
  return prefix.string() + ".bin";
}

namespace {

template <typename T>
T read_scalar(std::span<const std::byte> bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
std::vector<T> read_array(std::span<const std::byte> bytes, std::size_t offset, std::size_t n) {
  std::vector<T> values(n);
  if (n > 0) std::memcpy(values.data(), bytes.data() + offset, n * sizeof(T));
  return values;
}

std::string escape_bytes(std::span<const std::byte> bytes) {
  std::string out;
  for (const std::byte b : bytes) {
    const auto c = static_cast<unsigned char>(b);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

[[noreturn]] void reject(const std::filesystem::path& file, std::string field, std::string value,
                         std::string rule) {
  throw ConfigError({{std::move(field), std::move(value), std::move(rule)}}, file.string());
}

MappedFile map_or_reject(const std::filesystem::path& path, const char* what) {
  if (!std::filesystem::is_regular_file(path))
    reject(path, what, "", "missing: no such file (an indexed dataset is PREFIX.idx + PREFIX.bin)");
  try {
    return MappedFile(path);
  } catch (const std::system_error& e) {
    reject(path, what, "", std::string("cannot be read: ") + e.what());
  }
}

}  // namespace

IndexedDataset::IndexedDataset(std::filesystem::path prefix) : prefix_(std::move(prefix)) {
  const auto idx_file = idx_path(prefix_);
  const MappedFile idx = map_or_reject(idx_file, ".idx file");
  const auto bytes = idx.bytes();
  if (bytes.size() < kIndexHeaderBytes)
    reject(idx_file, "file size", std::to_string(bytes.size()) + " bytes",
           "truncated: the header alone is 34 bytes");
  if (std::string_view(reinterpret_cast<const char*>(bytes.data()), kIndexMagic.size()) !=
      kIndexMagic)
    reject(idx_file, "magic", escape_bytes(bytes.first(kIndexMagic.size())),
           "expected MMIDIDX\\x00\\x00: not a Megatron indexed dataset index");
  if (const auto version = read_scalar<std::uint64_t>(bytes, 9); version != kIndexVersion)
    reject(idx_file, "version", std::to_string(version), "expected 1");
  const auto code = read_scalar<std::uint8_t>(bytes, 17);
  const auto dtype = token_dtype_from_code(code);
  if (!dtype)
    reject(idx_file, "dtype code", std::to_string(code),
           "expected a Megatron DType code 1 … 8 (4 = int32, 8 = uint16)");
  if (*dtype == TokenDType::float32 || *dtype == TokenDType::float64)
    reject(idx_file, "dtype code",
           std::to_string(code) + " (" + std::string(dtype_name(*dtype)) + ")",
           "tokens must have an integer dtype");
  dtype_ = *dtype;
  const auto n = read_scalar<std::uint64_t>(bytes, 18);
  const auto d = read_scalar<std::uint64_t>(bytes, 26);
  // Counts beyond the file's size would overflow the size formula: compare them first.
  const auto expected = [&]() -> std::optional<std::uint64_t> {
    if (n > bytes.size() || d > bytes.size()) return std::nullopt;
    return kIndexHeaderBytes + n * (4 + 8) + d * 8;
  }();
  if (!expected || *expected != bytes.size())
    reject(idx_file, "file size", std::to_string(bytes.size()) + " bytes",
           "sequence count " + std::to_string(n) + " and document count " + std::to_string(d) +
               " need 34 + 12 × " + std::to_string(n) + " + 8 × " + std::to_string(d) + " = " +
               (expected ? std::to_string(*expected) : std::string("more")) + " bytes (" +
               (!expected || *expected > bytes.size() ? "truncated" : "trailing bytes") + ")");
  if (d == 0) reject(idx_file, "document count", "0", "expected at least 1 (indices start with 0)");
  sizes_ = read_array<std::int32_t>(bytes, kIndexHeaderBytes, n);
  pointers_ = read_array<std::int64_t>(bytes, kIndexHeaderBytes + 4 * n, n);
  document_indices_ = read_array<std::int64_t>(bytes, kIndexHeaderBytes + 12 * n, d);

  if (document_indices_.front() != 0)
    reject(idx_file, "document_indices[0]", std::to_string(document_indices_.front()),
           "expected 0");
  for (std::size_t i = 1; i < document_indices_.size(); ++i)
    if (document_indices_[i] < document_indices_[i - 1])
      reject(idx_file, "document_indices[" + std::to_string(i) + "]",
             std::to_string(document_indices_[i]),
             "not monotonic: smaller than document_indices[" + std::to_string(i - 1) +
                 "] = " + std::to_string(document_indices_[i - 1]));
  if (static_cast<std::uint64_t>(document_indices_.back()) != n)
    reject(idx_file, "document_indices[" + std::to_string(d - 1) + "]",
           std::to_string(document_indices_.back()),
           "expected the sequence count " + std::to_string(n));

  const auto bin_file = bin_path(prefix_);
  bin_ = map_or_reject(bin_file, ".bin file");
  const auto bin_size = static_cast<std::int64_t>(bin_.size());
  const auto itemsize = static_cast<std::int64_t>(dtype_size(dtype_));
  for (std::size_t i = 0; i < n; ++i) {
    if (sizes_[i] < 0)
      reject(idx_file, "sizes[" + std::to_string(i) + "]", std::to_string(sizes_[i]),
             "expected a token count ≥ 0");
    const std::int64_t begin = pointers_[i];
    if (begin < 0 || begin > bin_size || sizes_[i] > (bin_size - begin) / itemsize)
      reject(idx_file, "pointers[" + std::to_string(i) + "]",
             std::to_string(begin) + " with sizes[" + std::to_string(i) + "] = " +
                 std::to_string(sizes_[i]) + " tokens of " + std::to_string(itemsize) + " bytes",
             "runs past the end of " + bin_file.string() + " (" + std::to_string(bin_size) +
                 " bytes)");
  }
}

std::int64_t IndexedDataset::document_count() const {
  return static_cast<std::int64_t>(document_indices_.size()) - 1;
}

std::int32_t IndexedDataset::sequence_length(std::int64_t sequence) const {
  return sizes_.at(static_cast<std::size_t>(sequence));
}

void IndexedDataset::read_tokens(std::int64_t sequence, std::int64_t offset,
                                 std::span<std::int32_t> out) const {
  const std::int64_t length = sequence_length(sequence);
  const auto count = static_cast<std::int64_t>(out.size());
  if (offset < 0 || offset > length || count > length - offset)
    throw std::out_of_range("tokens [" + std::to_string(offset) + ", " +
                            std::to_string(offset + count) + ") of sequence " +
                            std::to_string(sequence) + " (" + std::to_string(length) +
                            " tokens) in " + name());
  const std::byte* base = bin_.bytes().data() + pointers_[static_cast<std::size_t>(sequence)];
  visit_dtype(dtype_, [&](auto zero) {
    using T = decltype(zero);
    const std::byte* p = base + static_cast<std::size_t>(offset) * sizeof(T);
    for (std::size_t i = 0; i < out.size(); ++i) {
      T value;
      std::memcpy(&value, p + i * sizeof(T), sizeof(T));
      if constexpr (sizeof(T) > sizeof(std::int32_t)) {
        if (value < std::numeric_limits<std::int32_t>::min() ||
            value > std::numeric_limits<std::int32_t>::max())
          throw std::out_of_range("token " + std::to_string(value) + " in " + name() +
                                  " does not fit int32");
      }
      out[i] = static_cast<std::int32_t>(value);
    }
  });
}

std::vector<std::int32_t> IndexedDataset::get(std::int64_t sequence) const {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(sequence_length(sequence)));
  read_tokens(sequence, 0, tokens);
  return tokens;
}

}  // namespace tandem::data
