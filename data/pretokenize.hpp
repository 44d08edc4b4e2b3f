// GPT-2's pre-tokenisation: the text is cut into pieces before byte-level BPE runs on
// each piece, by the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// implemented by hand over code points (Unicode letter and number categories from ICU),
// so no regex engine is needed. `\s` is JavaScript's white space (the reference encoder
// we test against is the npm gpt-3-encoder): it includes U+FEFF and excludes U+0085,
// where Python's `regex` module (OpenAI's encoder) does the opposite.
#pragma once

#include <string_view>
#include <vector>

namespace tandem::data {

// The pieces of `text`, in order; they concatenate back to `text`. Throws
// std::invalid_argument naming the byte offset when `text` is not valid UTF-8.
std::vector<std::string_view> split_gpt2_pieces(std::string_view text);

}  // namespace tandem::data
