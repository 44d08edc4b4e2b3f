// Shared helpers of the data tests: a temporary directory, the cached GPT-2 vocabulary
// (a test that needs it fails, never skips, when scripts/fetch-data.sh has not run),
// an in-memory token source, and file byte access.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "data/data_dir.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "data/gpt2_vocabulary.hpp"
#include "data/token_source.hpp"

namespace tandem::data::testing {

inline std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(TANDEM_SOURCE_DIR) / "tests" / "data" / "fixtures" / name;
}

// A fresh directory, removed with its contents when the object goes.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tandem-data-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The GPT-2 tokenizer from the data cache; records a failure saying how to get the
// vocabulary when it is not there.
inline std::optional<Gpt2Tokenizer> load_gpt2() {
  const auto files = default_gpt2_vocab_files();
  if (!std::filesystem::exists(files.vocab_file) || !std::filesystem::exists(files.merge_file)) {
    ADD_FAILURE() << "the GPT-2 vocabulary is not in " << files.vocab_file.parent_path()
                  << ": run scripts/fetch-data.sh (or set TANDEM_DATA_DIR to its cache)";
    return std::nullopt;
  }
  return Gpt2Tokenizer::from_files(files.vocab_file, files.merge_file);
}

inline std::optional<Gpt2Vocabulary> load_gpt2_vocabulary_or_fail() {
  const auto files = default_gpt2_vocab_files();
  if (!std::filesystem::exists(files.vocab_file) || !std::filesystem::exists(files.merge_file)) {
    ADD_FAILURE() << "the GPT-2 vocabulary is not in " << files.vocab_file.parent_path()
                  << ": run scripts/fetch-data.sh (or set TANDEM_DATA_DIR to its cache)";
    return std::nullopt;
  }
  return load_gpt2_vocabulary(files.vocab_file, files.merge_file);
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Sequences held in memory.
class MemoryTokenSource : public TokenSource {
 public:
  explicit MemoryTokenSource(std::vector<std::vector<std::int32_t>> sequences)
      : sequences_(std::move(sequences)) {
    for (const auto& s : sequences_) lengths_.push_back(static_cast<std::int32_t>(s.size()));
  }
  std::span<const std::int32_t> sequence_lengths() const override { return lengths_; }
  void read_tokens(std::int64_t sequence, std::int64_t offset,
                   std::span<std::int32_t> out) const override {
    const auto& s = sequences_.at(static_cast<std::size_t>(sequence));
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = s.at(static_cast<std::size_t>(offset) + i);
  }
  std::string name() const override { return "memory"; }
  const std::vector<std::int32_t>& sequence(std::int64_t i) const {
    return sequences_[static_cast<std::size_t>(i)];
  }

 private:
  std::vector<std::vector<std::int32_t>> sequences_;
  std::vector<std::int32_t> lengths_;
};

}  // namespace tandem::data::testing
