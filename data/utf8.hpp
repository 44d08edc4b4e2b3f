// UTF-8 decoding and encoding, one code point at a time. The tokenizer walks its input
// as code points (the pre-tokenisation rules are about Unicode letters, numbers and
// spaces) while keeping byte offsets, so pieces stay views into the caller's text.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::data {

struct CodePoint {
  char32_t value;
  std::size_t length;  // bytes it occupies in the UTF-8 text (1 to 4)
};

// The code point starting at byte `pos` of `text`, or nullopt when the bytes there are
// not well-formed UTF-8 (overlong forms, surrogates and values past U+10FFFF included).
std::optional<CodePoint> decode_utf8(std::string_view text, std::size_t pos);

// The byte offset of the first ill-formed sequence, or nullopt when `text` is valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

// Appends the UTF-8 encoding of `cp` (which must be a Unicode scalar value) to `out`.
void append_utf8(std::string& out, char32_t cp);

}  // namespace tandem::data
