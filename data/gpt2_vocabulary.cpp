// Reading encoder.json and vocab.bpe. Every entry is checked (ids dense from 0, tokens
// spelled in the byte alphabet, merges of known tokens into known tokens), so encoding
// never meets an unknown symbol.
#include "data/gpt2_vocabulary.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "data/utf8.hpp"

namespace tandem::data {
namespace {

std::string read_file(const std::filesystem::path& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(flag, path.string(),
                      "cannot be read (run scripts/fetch-data.sh to fetch the GPT-2 vocabulary)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The raw bytes a token spelled in the byte alphabet stands for, or nullopt when the
// spelling uses a character outside the alphabet.
std::optional<std::string> unspell(std::string_view spelled,
                                   const std::unordered_map<char32_t, char>& unicode_to_byte) {
  std::string bytes;
  for (std::size_t pos = 0; pos < spelled.size();) {
    const auto cp = decode_utf8(spelled, pos);
    if (!cp) return std::nullopt;
    const auto it = unicode_to_byte.find(cp->value);
    if (it == unicode_to_byte.end()) return std::nullopt;
    bytes.push_back(it->second);
    pos += cp->length;
  }
  return bytes;
}

std::unordered_map<char32_t, char> unicode_to_byte_map() {
  std::unordered_map<char32_t, char> map;
  const auto spelling = byte_to_unicode();
  for (int b = 0; b < 256; ++b) map[spelling[static_cast<std::size_t>(b)]] = static_cast<char>(b);
  return map;
}

void read_encoder(const std::filesystem::path& path, Gpt2Vocabulary& vocab,
                  std::unordered_map<std::string, std::int32_t>& ids) {
  const auto fail = [&](const std::string& field, const std::string& value, const char* rule) {
    throw ConfigError({{field, value, rule}}, path.string());
  };
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path, "--vocab-file"));
  } catch (const nlohmann::json::exception& e) {  // parse error or number overflow
    fail("encoder.json", e.what(), "must be a JSON object of token → id");
  }
  if (!json.is_object() || json.empty()) fail("encoder.json", "", "must be a non-empty object");
  const auto unicode_to_byte = unicode_to_byte_map();
  const auto n = static_cast<std::int64_t>(json.size());
  vocab.token_bytes.assign(json.size(), std::string());
  std::vector<bool> seen(json.size(), false);
  for (const auto& [spelled, id_json] : json.items()) {
    if (!id_json.is_number_integer()) fail(spelled, id_json.dump(), "id must be an integer");
    const auto id = id_json.get<std::int64_t>();
    if (id < 0 || id >= n || seen[static_cast<std::size_t>(id)])
      fail(spelled, std::to_string(id), "ids must be 0 … (entries - 1), each used once");
    const auto bytes = unspell(spelled, unicode_to_byte);
    if (!bytes) fail(spelled, "", "token uses a character outside GPT-2's byte alphabet");
    seen[static_cast<std::size_t>(id)] = true;
    vocab.token_bytes[static_cast<std::size_t>(id)] = *bytes;
    ids.emplace(*bytes, static_cast<std::int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(std::string(1, static_cast<char>(b)));
    if (it == ids.end()) fail("byte " + std::to_string(b), "", "every byte needs a token");
    vocab.byte_token[static_cast<std::size_t>(b)] = it->second;
  }
  const auto eod = json.find("<|endoftext|>");
  if (eod == json.end()) fail("<|endoftext|>", "", "the end-of-document token is missing");
  vocab.eod = eod->get<std::int32_t>();
}

void read_merges(const std::filesystem::path& path, Gpt2Vocabulary& vocab,
                 const std::unordered_map<std::string, std::int32_t>& ids) {
  const auto unicode_to_byte = unicode_to_byte_map();
  std::istringstream in(read_file(path, "--merge-file"));
  std::string line;
  std::int32_t rank = 0;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line_number == 1 && line.starts_with("#version")) continue;
    std::istringstream words(line);
    std::string left, right, extra;
    if (!(words >> left)) continue;  // blank lines (the file ends with one) carry no merge
    const auto fail = [&](const char* rule) {
      throw ConfigError({{"line " + std::to_string(line_number), line, rule}}, path.string());
    };
    if (!(words >> right) || (words >> extra)) fail("a merge is two tokens separated by a space");
    const auto l = unspell(left, unicode_to_byte), r = unspell(right, unicode_to_byte);
    if (!l || !r) fail("token uses a character outside GPT-2's byte alphabet");
    const auto li = ids.find(*l), ri = ids.find(*r), mi = ids.find(*l + *r);
    if (li == ids.end() || ri == ids.end() || mi == ids.end())
      fail("both tokens and their concatenation must be in encoder.json");
    // A repeated pair keeps its last rank, as the reference's dict(zip(merges, ranks)).
    vocab.merges[pair_key(li->second, ri->second)] = {rank++, mi->second};
  }
}

bool merges_ordered(const Gpt2Vocabulary& vocab) {
  const std::size_t n = vocab.token_bytes.size();
  std::vector<std::int32_t> last_made(n, -1);  // highest rank of a merge making the token
  std::vector<std::int32_t> first_used(n, std::numeric_limits<std::int32_t>::max());
  for (const auto& [key, merge] : vocab.merges) {
    const auto left = static_cast<std::size_t>(key >> 32),
               right = static_cast<std::size_t>(key & 0xFFFFFFFFu);
    auto& made = last_made[static_cast<std::size_t>(merge.result)];
    made = std::max(made, merge.rank);
    first_used[left] = std::min(first_used[left], merge.rank);
    first_used[right] = std::min(first_used[right], merge.rank);
  }
  for (std::size_t t = 0; t < n; ++t)
    if (last_made[t] >= first_used[t]) return false;
  return true;
}

}  // namespace

std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> spelling{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    spelling[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return spelling;
}

Gpt2Vocabulary load_gpt2_vocabulary(const std::filesystem::path& vocab_file,
                                    const std::filesystem::path& merge_file) {
  Gpt2Vocabulary vocab;
  std::unordered_map<std::string, std::int32_t> ids;  // token bytes → id
  read_encoder(vocab_file, vocab, ids);
  read_merges(merge_file, vocab, ids);
  vocab.merges_ordered = merges_ordered(vocab);
  return vocab;
}

}  // namespace tandem::data
