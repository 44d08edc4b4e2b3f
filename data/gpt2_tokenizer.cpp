// Encoding: pieces → bytes → BPE merges by rank → ids, memoised per piece; decoding:
// ids → the bytes they stand for.
#include "data/gpt2_tokenizer.hpp"

#include <stdexcept>

#include "data/bpe_merge.hpp"
#include "data/gpt2_vocabulary.hpp"
#include "data/pretokenize.hpp"

namespace tandem::data {
namespace {

// Pieces are mostly words, so a corpus has few distinct ones; the bound only keeps a
// pathological input (every piece new) from growing the memo without limit.
constexpr std::size_t kMemoLimit = 1 << 17;

// Pieces longer than this merge through the queue (when the merges allow it): for words
// the rounds are faster, for long runs without spaces the queue avoids O(n²).
constexpr std::size_t kLongPiece = 64;

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocabulary> vocab)
    : vocab_(std::move(vocab)) {}

Gpt2Tokenizer Gpt2Tokenizer::from_files(const std::filesystem::path& vocab_file,
                                        const std::filesystem::path& merge_file) {
  return Gpt2Tokenizer(
      std::make_shared<const Gpt2Vocabulary>(load_gpt2_vocabulary(vocab_file, merge_file)));
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view text) {
  std::vector<std::int32_t> ids;
  encode_append(text, ids);
  return ids;
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<std::int32_t>& out) {
  for (const std::string_view piece : split_gpt2_pieces(text)) encode_piece(piece, out);
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) {
  const std::string key(piece);  // heterogeneous lookup needs C++20 hash traits: copy
  if (const auto it = memo_.find(key); it != memo_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<std::int32_t> word;
  word.reserve(piece.size());
  for (const char c : piece) word.push_back(vocab_->byte_token[static_cast<unsigned char>(c)]);
  if (word.size() > kLongPiece && vocab_->merges_ordered)
    merge_by_queue(*vocab_, word);
  else
    merge_in_rounds(*vocab_, word);
  out.insert(out.end(), word.begin(), word.end());
  if (piece.size() > kLongPiece) return;  // long pieces rarely repeat: not worth keeping
  if (memo_.size() >= kMemoLimit) memo_.clear();
  memo_.emplace(key, std::move(word));
}

std::string Gpt2Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string text;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size()) + ")");
    text += vocab_->token_bytes[static_cast<std::size_t>(id)];
  }
  return text;
}

std::int32_t Gpt2Tokenizer::eod() const {
  return vocab_->eod;
}

std::int64_t Gpt2Tokenizer::vocab_size() const {
  return static_cast<std::int64_t>(vocab_->token_bytes.size());
}

}  // namespace tandem::data
