// Megatron's indexed dataset: the bytes we write are the bytes Megatron writes (spelled
// out by hand below from the format, not produced by our code), what we write reads
// back, and every kind of malformed file is rejected with a message naming the file and
// the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.hpp"
#include "data/indexed_dataset.hpp"
#include "tests/data/data_test_util.hpp"

namespace tandem::data {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::string u64(std::uint64_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 8);
}
std::string i64(std::int64_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 8);
}
std::string i32(std::int32_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

// Documents {1, 2, 3}, {65535}, {} and {4, 5 | 6} (two sequences) in uint16.
void write_tiny(const std::filesystem::path& prefix, TokenDType dtype = TokenDType::uint16) {
  IndexedDatasetWriter writer(prefix, dtype);
  writer.add_document(std::vector<std::int32_t>{1, 2, 3});
  writer.add_document(std::vector<std::int32_t>{65535});
  writer.add_document(std::vector<std::int32_t>{}, std::vector<std::int32_t>{});
  writer.add_document(std::vector<std::int32_t>{4, 5, 6}, std::vector<std::int32_t>{2, 1});
  writer.finalize();
}

TEST(IndexedDataset, WritesMegatronsBytes) {
  TempDir dir;
  write_tiny(dir / "tiny");
  // .bin: the tokens as little-endian uint16.
  const std::string bin("\x01\x00\x02\x00\x03\x00\xff\xff\x04\x00\x05\x00\x06\x00", 14);
  EXPECT_EQ(read_bytes(dir / "tiny.bin"), bin);
  // .idx: header, then sizes (tokens per sequence), pointers (bytes), document indices.
  const std::string idx = std::string("MMIDIDX\0\0", 9) + u64(1) + std::string("\x08", 1) + u64(4) +
                          u64(5) +                                     // 4 sequences, 4 + 1 indices
                          i32(3) + i32(1) + i32(2) + i32(1) +          // sizes
                          i64(0) + i64(6) + i64(8) + i64(12) +         // pointers
                          i64(0) + i64(1) + i64(2) + i64(2) + i64(4);  // document indices
  ASSERT_EQ(idx.size(), 34u + 4 * 4 + 4 * 8 + 5 * 8);
  EXPECT_EQ(read_bytes(dir / "tiny.idx"), idx);
  EXPECT_FALSE(std::filesystem::exists(dir / "tiny.bin.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "tiny.idx.tmp"));
}

TEST(IndexedDataset, WritesInt32ForLargeVocabularies) {
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::int32);
  TempDir dir;
  IndexedDatasetWriter writer(dir / "big", TokenDType::int32);
  writer.add_document(std::vector<std::int32_t>{70000, 7});
  writer.finalize();
  EXPECT_EQ(read_bytes(dir / "big.bin"), std::string("\x70\x11\x01\x00\x07\x00\x00\x00", 8));
  const std::string idx = read_bytes(dir / "big.idx");
  EXPECT_EQ(idx[17], '\x04');
  EXPECT_EQ(idx.substr(34), i32(2) + i64(0) + i64(0) + i64(1));
}

TEST(IndexedDataset, RejectsTokensTheDtypeCannotHold) {
  TempDir dir;
  IndexedDatasetWriter writer(dir / "x", TokenDType::uint16);
  EXPECT_THROW(writer.add_document(std::vector<std::int32_t>{65536}), std::out_of_range);
}

TEST(IndexedDataset, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  {
    IndexedDatasetWriter writer(dir / "x", TokenDType::uint16);
    writer.add_document(std::vector<std::int32_t>{1, 2});
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(IndexedDataset, ReadsBackWhatWasWritten) {
  TempDir dir;
  write_tiny(dir / "tiny");
  const IndexedDataset ds(dir / "tiny");
  EXPECT_EQ(ds.dtype(), TokenDType::uint16);
  EXPECT_EQ(ds.sequence_count(), 4);
  EXPECT_EQ(ds.document_count(), 4);
  EXPECT_EQ(std::vector<std::int64_t>(ds.document_indices().begin(), ds.document_indices().end()),
            (std::vector<std::int64_t>{0, 1, 2, 2, 4}));
  EXPECT_EQ(ds.get(0), (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(ds.get(1), (std::vector<std::int32_t>{65535}));
  EXPECT_EQ(ds.get(2), (std::vector<std::int32_t>{4, 5}));
  EXPECT_EQ(ds.get(3), (std::vector<std::int32_t>{6}));
  std::vector<std::int32_t> part(2);
  ds.read_tokens(0, 1, part);
  EXPECT_EQ(part, (std::vector<std::int32_t>{2, 3}));
  EXPECT_THROW(ds.read_tokens(0, 2, part), std::out_of_range);
}

TEST(IndexedDataset, RoundTripsRandomDocumentsInEveryIntegerDtype) {
  std::mt19937 rng(7);
  for (const auto dtype : {TokenDType::uint8, TokenDType::int8, TokenDType::int16,
                           TokenDType::uint16, TokenDType::int32, TokenDType::int64}) {
    TempDir dir;
    std::vector<std::vector<std::int32_t>> docs(50);
    {
      IndexedDatasetWriter writer(dir / "r", dtype);
      for (auto& doc : docs) {
        doc.resize(rng() % 40);
        for (auto& t : doc) t = static_cast<std::int32_t>(rng() % 100);
        writer.add_document(doc);
      }
      writer.finalize();
    }
    const IndexedDataset ds(dir / "r");
    ASSERT_EQ(ds.sequence_count(), 50);
    for (std::int64_t i = 0; i < 50; ++i)
      EXPECT_EQ(ds.get(i), docs[static_cast<std::size_t>(i)]) << dtype_name(dtype);
  }
}

// A corrupted copy of the tiny dataset must be rejected with all of `needles` (and the
// file's path) in the message.
class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny(prefix_);
    idx_ = read_bytes(dir_ / "tiny.idx");
  }
  void expect_rejected(const std::vector<std::string>& needles,
                       const std::filesystem::path& named = {}) {
    try {
      IndexedDataset ds(prefix_);
      ADD_FAILURE() << "accepted a corrupt dataset";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      const auto file = named.empty() ? dir_ / "tiny.idx" : named;
      EXPECT_NE(what.find(file.string()), std::string::npos) << what;
      for (const auto& needle : needles)
        EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    }
  }
  void write_idx(const std::string& bytes) { write_bytes(dir_ / "tiny.idx", bytes); }
  void patch(std::size_t offset, const std::string& bytes) {
    std::string copy = idx_;
    copy.replace(offset, bytes.size(), bytes);
    write_idx(copy);
  }
  static constexpr std::size_t kPointers = 34 + 4 * 4, kDocIndices = kPointers + 4 * 8;
  TempDir dir_;
  std::filesystem::path prefix_ = dir_ / "tiny";
  std::string idx_;
};

TEST_F(CorruptIndex, WrongMagic) {
  patch(0, "XMIDIDX");
  expect_rejected({"magic = XMIDIDX\\x00\\x00", "expected MMIDIDX"});
}
TEST_F(CorruptIndex, WrongVersion) {
  patch(9, u64(2));
  expect_rejected({"version = 2", "expected 1"});
}
TEST_F(CorruptIndex, UnknownDtypeCode) {
  patch(17, "\x09");
  expect_rejected({"dtype code = 9", "1 … 8"});
}
TEST_F(CorruptIndex, FloatDtype) {
  patch(17, "\x06");
  expect_rejected({"dtype code = 6 (float64)", "integer"});
}
TEST_F(CorruptIndex, TruncatedHeader) {
  write_idx(idx_.substr(0, 20));
  expect_rejected({"file size = 20 bytes", "truncated"});
}
TEST_F(CorruptIndex, TruncatedArrays) {
  write_idx(idx_.substr(0, idx_.size() - 8));
  expect_rejected({"file size = 114 bytes", "= 122 bytes", "truncated"});
}
TEST_F(CorruptIndex, TrailingBytes) {
  write_idx(idx_ + "xyz");
  expect_rejected({"file size = 125 bytes", "trailing bytes"});
}
TEST_F(CorruptIndex, SequenceCountInconsistentWithSize) {
  patch(18, u64(std::uint64_t{1} << 60));
  expect_rejected({"sequence count 1152921504606846976", "truncated"});
}
TEST_F(CorruptIndex, DocumentCountInconsistentWithSize) {
  patch(26, u64(4));
  expect_rejected({"document count 4", "trailing bytes"});
}
TEST_F(CorruptIndex, PointerPastTheBin) {
  patch(kPointers + 3 * 8, i64(14));
  expect_rejected({"pointers[3] = 14", "runs past the end", "tiny.bin (14 bytes)"});
}
TEST_F(CorruptIndex, SizePastTheBin) {
  patch(34, i32(8));
  expect_rejected({"pointers[0] = 0 with sizes[0] = 8", "runs past the end"});
}
TEST_F(CorruptIndex, NegativeSize) {
  patch(34 + 4, i32(-1));
  expect_rejected({"sizes[1] = -1"});
}
TEST_F(CorruptIndex, TruncatedBin) {
  write_bytes(dir_ / "tiny.bin", read_bytes(dir_ / "tiny.bin").substr(0, 13));
  expect_rejected({"pointers[3] = 12", "runs past the end", "(13 bytes)"});
}
TEST_F(CorruptIndex, DocumentIndicesNotMonotonic) {
  patch(kDocIndices + 2 * 8, i64(3));  // 0 1 3 2 4
  expect_rejected({"document_indices[3] = 2", "not monotonic"});
}
TEST_F(CorruptIndex, DocumentIndicesNotStartingAtZero) {
  patch(kDocIndices, i64(1));
  expect_rejected({"document_indices[0] = 1", "expected 0"});
}
TEST_F(CorruptIndex, DocumentIndicesNotEndingAtSequenceCount) {
  patch(kDocIndices + 4 * 8, i64(3));
  expect_rejected({"document_indices[4] = 3", "expected the sequence count 4"});
}
TEST_F(CorruptIndex, MissingIdx) {
  std::filesystem::remove(dir_ / "tiny.idx");
  expect_rejected({".idx file", "missing"});
}
TEST_F(CorruptIndex, MissingBin) {
  std::filesystem::remove(dir_ / "tiny.bin");
  expect_rejected({".bin file", "missing"}, dir_ / "tiny.bin");
}

}  // namespace
}  // namespace tandem::data
