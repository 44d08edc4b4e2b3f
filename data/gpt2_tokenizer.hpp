// GPT-2's byte-level BPE tokenizer, as Megatron's GPT2BPETokenizer: text is cut into
// pieces (pretokenize.hpp), each piece's UTF-8 bytes become one symbol per byte, and
// adjacent symbols are merged by the rank of their pair in vocab.bpe until no ranked
// pair is left; encoder.json gives each resulting symbol its id. <|endoftext|> (50256)
// is the end-of-document token; like the reference encoders, encode() treats its text as
// ordinary text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::data {

struct Gpt2Vocabulary;  // the immutable tables, shared between copies of a tokenizer

class Gpt2Tokenizer {
 public:
  // Reads encoder.json (token → id, tokens written in GPT-2's byte-to-unicode alphabet)
  // and vocab.bpe (one merge "a b" per line, in rank order, after a #version line).
  // Throws ConfigError naming the file, the entry and what is wrong with it.
  static Gpt2Tokenizer from_files(const std::filesystem::path& vocab_file,
                                  const std::filesystem::path& merge_file);

  // The ids of `text`. Throws std::invalid_argument if `text` is not valid UTF-8.
  // Not const: it memoises pieces it has seen. A tokenizer is not thread-safe; copies
  // are cheap (they share the tables, each has its own memo), so give each thread one.
  std::vector<std::int32_t> encode(std::string_view text);
  void encode_append(std::string_view text, std::vector<std::int32_t>& out);

  // The bytes the ids stand for (not necessarily valid UTF-8 when a multi-byte character
  // is cut between ids). Throws std::out_of_range for an id outside the vocabulary.
  std::string decode(std::span<const std::int32_t> ids) const;

  std::int32_t eod() const;         // the id of <|endoftext|>
  std::int64_t vocab_size() const;  // entries in encoder.json (50257 for GPT-2)

 private:
  explicit Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocabulary> vocab);
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out);

  std::shared_ptr<const Gpt2Vocabulary> vocab_;
  std::unordered_map<std::string, std::vector<std::int32_t>> memo_;  // piece bytes → ids
};

}  // namespace tandem::data
