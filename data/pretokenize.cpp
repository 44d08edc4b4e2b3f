// The regex's alternatives, tried in order at each position, collapse to three cases:
// a contraction; a run of one class (letters, numbers, or "other": neither space, letter
// nor number), optionally led by one U+0020; or a run of spaces, which gives its last
// space to the next piece when a non-space follows (`\s+(?!\S)` backtracks by one).
#include "data/pretokenize.hpp"

#include <unicode/uchar.h>

#include <stdexcept>
#include <string>

#include "data/utf8.hpp"

namespace tandem::data {
namespace {

enum class CharClass { letter, number, space, other };

// ECMAScript's \s: WhiteSpace (TAB, VT, FF, ZWNBSP and category Zs) and LineTerminator
// (LF, CR, LS, PS).
bool is_js_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x2028 || c == 0x2029 || c == 0xFEFF) return true;
  return u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

CharClass classify(char32_t c) {
  if (is_js_space(c)) return CharClass::space;
  const auto category = static_cast<UCharCategory>(u_charType(static_cast<UChar32>(c)));
  switch (category) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::letter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::number;
    default:
      return CharClass::other;
  }
}

struct Char {
  std::size_t offset;  // byte offset in the text
  char32_t value;
  CharClass cls;
};

std::vector<Char> decode_all(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const auto cp = decode_utf8(text, pos);
    if (!cp)
      throw std::invalid_argument("text is not valid UTF-8 at byte offset " + std::to_string(pos));
    chars.push_back({pos, cp->value, classify(cp->value)});
    pos += cp->length;
  }
  return chars;
}

// Length in code points of the contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
std::size_t contraction_at(const std::vector<Char>& c, std::size_t i) {
  if (c[i].value != U'\'' || i + 1 >= c.size()) return 0;
  const char32_t a = c[i + 1].value;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= c.size()) return 0;
  const char32_t b = c[i + 2].value;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

// One past the end of the piece starting at code point `i`.
std::size_t piece_end(const std::vector<Char>& c, std::size_t i) {
  const std::size_t n = c.size();
  if (const std::size_t k = contraction_at(c, i)) return i + k;
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the optional lead is U+0020 only.
  const std::size_t j = (c[i].value == U' ' && i + 1 < n) ? i + 1 : i;
  if (c[j].cls != CharClass::space) {
    std::size_t k = j + 1;
    while (k < n && c[k].cls == c[j].cls) ++k;
    return k;
  }
  std::size_t k = i + 1;
  while (k < n && c[k].cls == CharClass::space) ++k;
  if (k == n) return k;         // `\s+(?!\S)` at the end of the text
  if (k - 1 > i) return k - 1;  // leave the last space to lead the next piece
  return k;                     // a single space before a non-space: `\s+`
}

}  // namespace

std::vector<std::string_view> split_gpt2_pieces(std::string_view text) {
  const std::vector<Char> chars = decode_all(text);
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0; i < chars.size();) {
    const std::size_t end = piece_end(chars, i);
    const std::size_t begin_byte = chars[i].offset;
    const std::size_t end_byte = end < chars.size() ? chars[end].offset : text.size();
    pieces.push_back(text.substr(begin_byte, end_byte - begin_byte));
    i = end;
  }
  return pieces;
}

}  // namespace tandem::data
