// The tables of GPT-2's byte-level BPE, read from encoder.json and vocab.bpe. Tokens are
// kept as the raw bytes they stand for (GPT-2's files spell bytes with printable
// characters: byte_to_unicode below), so BPE runs on bytes and token ids, not strings.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem::data {

struct Gpt2Merge {
  std::int32_t rank;    // line order in vocab.bpe: lower merges first
  std::int32_t result;  // id of the merged token
};

struct Gpt2Vocabulary {
  std::vector<std::string> token_bytes;                 // (vocab_size,) id → bytes
  std::array<std::int32_t, 256> byte_token{};           // byte → id of its one-byte token
  std::unordered_map<std::uint64_t, Gpt2Merge> merges;  // pair_key(left, right) → merge
  std::int32_t eod = -1;                                // id of <|endoftext|>
  // Every token is made by merges ranked before any merge that uses it (true of GPT-2's
  // trained merge list). Then applying merges one at a time, lowest rank and leftmost
  // first, equals the reference's rounds, which lets long pieces merge in O(n log n).
  bool merges_ordered = false;
};

constexpr std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

// GPT-2's printable spelling of each byte: bytes 33–126, 161–172 and 174–255 stand for
// themselves, the other 68 bytes take the code points 256, 257, … in byte order.
std::array<char32_t, 256> byte_to_unicode();

// Throws ConfigError naming the file and the offending entry.
Gpt2Vocabulary load_gpt2_vocabulary(const std::filesystem::path& vocab_file,
                                    const std::filesystem::path& merge_file);

}  // namespace tandem::data
