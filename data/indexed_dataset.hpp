// Megatron's indexed dataset, byte-compatible: PREFIX.bin is the raw token stream and
// PREFIX.idx its index (little-endian, no padding):
//   magic "MMIDIDX\0\0" (9 bytes) | u64 version = 1 | u8 dtype code |
//   u64 sequence count N | u64 document count D |
//   int32 sizes[N] (tokens) | int64 pointers[N] (byte offsets into .bin) |
//   int64 document_indices[D] (D = documents + 1; starts at 0, ends at N)
// A document is the sequences [document_indices[d], document_indices[d + 1]); preprocess
// writes one sequence per document. The arrays start at byte 34, unaligned, so they are
// copied out with memcpy; the .bin stays memory-mapped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/mapped_file.hpp"
#include "data/token_source.hpp"

namespace tandem::data {

// Megatron's DType codes.
enum class TokenDType : std::uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8,
};

std::optional<TokenDType> token_dtype_from_code(std::uint8_t code);
std::size_t dtype_size(TokenDType dtype);  // bytes per token
std::string_view dtype_name(TokenDType dtype);
// Megatron's DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500
// entries, else int32.
TokenDType optimal_token_dtype(std::int64_t vocab_size);

inline constexpr std::string_view kIndexMagic{"MMIDIDX\0\0", 9};
inline constexpr std::uint64_t kIndexVersion = 1;
inline constexpr std::size_t kIndexHeaderBytes = 34;  // 9 + 8 + 1 + 8 + 8

std::filesystem::path idx_path(const std::filesystem::path& prefix);  // PREFIX.idx
std::filesystem::path bin_path(const std::filesystem::path& prefix);  // PREFIX.bin

// Writes PREFIX.bin and PREFIX.idx (Megatron's IndexedDatasetBuilder). Both are written
// under temporary names and renamed by finalize(), so a reader never sees half a dataset;
// a writer destroyed without finalize() removes its temporaries.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::filesystem::path prefix, TokenDType dtype);
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;
  ~IndexedDatasetWriter();

  // A document of one sequence.
  void add_document(std::span<const std::int32_t> tokens);
  // A document of several sequences (sentences): `sequence_lengths` sum to tokens.size().
  // An empty document (no sequences) is allowed, as in Megatron.
  void add_document(std::span<const std::int32_t> tokens,
                    std::span<const std::int32_t> sequence_lengths);
  void finalize();

 private:
  std::filesystem::path prefix_;
  TokenDType dtype_;
  std::ofstream bin_;
  std::vector<std::int32_t> sequence_lengths_;  // (N,)
  std::vector<std::int64_t> document_indices_;  // (D,) starts with 0
  std::vector<char> buffer_;                    // one document's tokens in dtype_
  bool finalized_ = false;
};

// Reads PREFIX.idx and maps PREFIX.bin, after checking that they are consistent: a
// malformed file is rejected with a ConfigError naming the file, the field, what was
// found and what was expected.
class IndexedDataset : public TokenSource {
 public:
  explicit IndexedDataset(std::filesystem::path prefix);

  TokenDType dtype() const { return dtype_; }
  std::int64_t document_count() const;  // documents, i.e. document_indices().size() - 1
  std::span<const std::int32_t> sequence_lengths() const override { return sizes_; }  // (N,)
  std::span<const std::int64_t> sequence_pointers() const { return pointers_; }       // (N,) bytes
  std::span<const std::int64_t> document_indices() const { return document_indices_; }  // (D,)

  std::int32_t sequence_length(std::int64_t sequence) const;  // tokens
  void read_tokens(std::int64_t sequence, std::int64_t offset,
                   std::span<std::int32_t> out) const override;
  std::string name() const override { return prefix_.string(); }
  // The whole sequence.
  std::vector<std::int32_t> get(std::int64_t sequence) const;

 private:
  std::filesystem::path prefix_;
  TokenDType dtype_ = TokenDType::uint16;
  std::vector<std::int32_t> sizes_;
  std::vector<std::int64_t> pointers_;
  std::vector<std::int64_t> document_indices_;
  MappedFile bin_;
};

}  // namespace tandem::data
