// The GPT-2 tokenizer against ids made by an independent implementation (the npm package
// gpt-3-encoder's JavaScript, fixtures/make_tokenizer_reference.js), plus the properties
// that hold for any text: pieces tile the text, decode inverts encode.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.hpp"
#include "data/bpe_merge.hpp"
#include "data/gpt2_vocabulary.hpp"
#include "data/pretokenize.hpp"
#include "tests/data/data_test_util.hpp"

namespace tandem::data {
namespace {

using testing::fixture;
using testing::load_gpt2;

nlohmann::json reference_cases() {
  std::ifstream in(fixture("tokenizer_reference.json"));
  return nlohmann::json::parse(in).at("cases");
}

TEST(Tokenizer, EncodesAsTheReferenceEncoder) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  const auto cases = reference_cases();
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    const auto text = c.at("text").get<std::string>();
    EXPECT_EQ(tokenizer->encode(text), c.at("ids").get<std::vector<std::int32_t>>())
        << "text: " << nlohmann::json(text).dump();
  }
}

TEST(Tokenizer, DecodeInvertsEncode) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  for (const auto& c : reference_cases()) {
    const auto text = c.at("text").get<std::string>();
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  }
}

TEST(Tokenizer, VocabularyIsGpt2s) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->eod(), 50256);
  EXPECT_EQ(tokenizer->decode(std::vector<std::int32_t>{50256}), "<|endoftext|>");
  EXPECT_EQ(tokenizer->encode("Hello world"), (std::vector<std::int32_t>{15496, 995}));
  EXPECT_THROW(tokenizer->decode(std::vector<std::int32_t>{50257}), std::out_of_range);
}

TEST(Tokenizer, CopiesShareTheVocabularyAndGiveTheSameIds) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  Gpt2Tokenizer copy = *tokenizer;
  const std::string text = "The quick brown fox jumps over the lazy dog's back.";
  EXPECT_EQ(copy.encode(text), tokenizer->encode(text));
  EXPECT_EQ(copy.encode(text), tokenizer->encode(text));  // from the memo this time
}

TEST(Tokenizer, RejectsInvalidUtf8NamingTheOffset) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  try {
    tokenizer->encode("ab\xff");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MissingVocabularySaysHowToFetchIt) {
  try {
    Gpt2Tokenizer::from_files("/nonexistent/encoder.json", "/nonexistent/vocab.bpe");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/encoder.json"), std::string::npos) << what;
    EXPECT_NE(what.find("scripts/fetch-data.sh"), std::string::npos) << what;
  }
}

TEST(Tokenizer, MalformedMergeLineIsNamed) {
  auto files = default_gpt2_vocab_files();
  ASSERT_TRUE(std::filesystem::exists(files.vocab_file)) << "run scripts/fetch-data.sh";
  testing::TempDir dir;
  testing::write_bytes(dir / "vocab.bpe", "#version: 0.2\nĠ t\nthree words here\n");
  try {
    Gpt2Tokenizer::from_files(files.vocab_file, dir / "vocab.bpe");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

// The queue merge (long pieces) against the reference's rounds, on random byte strings
// drawn from small alphabets (so merges happen) and from all bytes.
TEST(BpeMerge, QueueGivesTheRoundsResult) {
  const auto vocab = testing::load_gpt2_vocabulary_or_fail();
  ASSERT_TRUE(vocab);
  ASSERT_TRUE(vocab->merges_ordered);
  const std::vector<std::string> alphabets = {"ab",         "abcde ",  "etaoinshrdlu",
                                              "0123456789", ".,-_=!?", "Ġthe"};
  std::mt19937 rng(4);
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = 1 + rng() % 300;
    std::vector<std::int32_t> word;
    const std::string& alphabet = alphabets[rng() % alphabets.size()];
    for (std::size_t i = 0; i < n; ++i) {
      const auto byte = trial % 7 == 0
                            ? static_cast<unsigned char>(rng() % 256)
                            : static_cast<unsigned char>(alphabet[rng() % alphabet.size()]);
      word.push_back(vocab->byte_token[byte]);
    }
    auto rounds = word, queue = word;
    merge_in_rounds(*vocab, rounds);
    merge_by_queue(*vocab, queue);
    ASSERT_EQ(queue, rounds) << "trial " << trial;
  }
}

TEST(Tokenizer, LongPiecesTakeNearLinearTime) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  std::mt19937 rng(8);
  std::string blob;  // 200k letters without a space: one piece (O(n²) merging would take hours)
  for (int i = 0; i < 200000; ++i) blob.push_back(static_cast<char>('a' + rng() % 26));
  const auto ids = tokenizer->encode(blob);
  EXPECT_GT(ids.size(), 20000u);
  EXPECT_EQ(tokenizer->decode(ids), blob);
}

TEST(Pretokenize, PiecesTileTheText) {
  for (const auto& c : reference_cases()) {
    const auto text = c.at("text").get<std::string>();
    std::string joined;
    for (const auto piece : split_gpt2_pieces(text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(Pretokenize, FollowsTheRegexBranches) {
  using P = std::vector<std::string_view>;
  EXPECT_EQ(split_gpt2_pieces("I'm here"), (P{"I", "'m", " here"}));
  EXPECT_EQ(split_gpt2_pieces("IT'S"), (P{"IT", "'", "S"}));    // contractions are lower-case
  EXPECT_EQ(split_gpt2_pieces("a   b"), (P{"a", "  ", " b"}));  // last space leads the word
  EXPECT_EQ(split_gpt2_pieces("a \n"), (P{"a", " \n"}));        // trailing spaces stay whole
  EXPECT_EQ(split_gpt2_pieces("x\ty"), (P{"x", "\t", "y"}));    // only U+0020 leads a piece
  EXPECT_EQ(split_gpt2_pieces("v2.0!!"), (P{"v", "2", ".", "0", "!!"}));
  EXPECT_EQ(split_gpt2_pieces(" ?!x"), (P{" ?!", "x"}));
  EXPECT_EQ(split_gpt2_pieces(""), P{});
}

TEST(ByteToUnicode, PrintableBytesStandForThemselves) {
  const auto spelling = byte_to_unicode();
  EXPECT_EQ(spelling['!'], U'!');
  EXPECT_EQ(spelling[' '], U'\u0120');  // Ġ, the space that leads GPT-2's words
  EXPECT_EQ(spelling['\n'], U'\u010a');
  EXPECT_EQ(spelling[0], U'\u0100');
  EXPECT_EQ(spelling[173], U'\u0143');  // the soft hyphen is the last remapped byte
}

}  // namespace
}  // namespace tandem::data
