// `tandem preprocess`'s library half: the ids it writes are the tokenizer's, Megatron's
// sentence and EOD rules hold, the bytes do not depend on the worker count, and bad input
// is rejected, naming the file, line and key, before any output exists.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/indexed_dataset.hpp"
#include "data/preprocess.hpp"
#include "tests/data/data_test_util.hpp"

namespace tandem::data {
namespace {

using testing::fixture;
using testing::load_gpt2;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

PreprocessOptions options_for(const std::filesystem::path& input, const TempDir& out,
                              const std::string& name, int workers) {
  const auto vocab = default_gpt2_vocab_files();
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = (out / name).string();
  o.vocab_file = vocab.vocab_file;
  o.merge_file = vocab.merge_file;
  o.workers = workers;
  return o;
}

std::vector<nlohmann::json> fixture_lines() {
  std::ifstream in(fixture("preprocess_small.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(Preprocess, WritesTheTokenizersIdsWithMegatronsSentenceAndEodRules) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  TempDir out;
  auto o = options_for(fixture("preprocess_small.jsonl"), out, "small", 1);
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  const auto outputs = preprocess(o);
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].prefix, out / "small_text_document");
  EXPECT_EQ(outputs[1].prefix, out / "small_title_document");

  const auto lines = fixture_lines();
  for (std::size_t k = 0; k < 2; ++k) {
    const IndexedDataset ds(outputs[k].prefix);
    ASSERT_EQ(ds.document_count(), static_cast<std::int64_t>(lines.size()));
    EXPECT_EQ(ds.dtype(), TokenDType::uint16);
    for (std::size_t d = 0; d < lines.size(); ++d) {
      const auto& field = lines[d].at(o.json_keys[k]);
      const auto sentences = field.is_string() ? std::vector<std::string>{field.get<std::string>()}
                                               : field.get<std::vector<std::string>>();
      // Expected: one sequence per non-empty sentence, EOD on the last, nothing if empty.
      std::vector<std::vector<std::int32_t>> expected;
      for (const auto& s : sentences)
        if (auto ids = tokenizer->encode(s); !ids.empty()) expected.push_back(ids);
      if (!expected.empty()) expected.back().push_back(50256);
      const auto first = ds.document_indices()[d], last = ds.document_indices()[d + 1];
      ASSERT_EQ(last - first, static_cast<std::int64_t>(expected.size())) << "document " << d;
      for (std::int64_t s = first; s < last; ++s)
        EXPECT_EQ(ds.get(s), expected[static_cast<std::size_t>(s - first)]) << "document " << d;
    }
  }
}

TEST(Preprocess, SameBytesWithOneOrThreeWorkers) {
  TempDir out;
  auto one = options_for(fixture("preprocess_small.jsonl"), out, "one", 1);
  auto three = options_for(fixture("preprocess_small.jsonl"), out, "three", 3);
  one.append_eod = three.append_eod = true;
  ASSERT_TRUE(load_gpt2());
  preprocess(one);
  preprocess(three);
  for (const char* ext : {".bin", ".idx"}) {
    const auto a = read_bytes(out / (std::string("one_text_document") + ext));
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, read_bytes(out / (std::string("three_text_document") + ext))) << ext;
  }
}

TEST(Preprocess, PlainTextIsOneDocumentPerParagraph) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  TempDir out;
  write_bytes(out / "in.txt", "First line\nsecond line.\n\n  \nNext paragraph.\n\n\nLast.");
  const auto outputs = preprocess(options_for(out / "in.txt", out, "txt", 2));
  const IndexedDataset ds(outputs[0].prefix);
  ASSERT_EQ(ds.document_count(), 3);
  EXPECT_EQ(ds.get(0), tokenizer->encode("First line\nsecond line."));
  EXPECT_EQ(ds.get(1), tokenizer->encode("Next paragraph."));
  EXPECT_EQ(ds.get(2), tokenizer->encode("Last."));
}

TEST(Preprocess, DirectoryIsOneDocumentPerFileInPathOrder) {
  auto tokenizer = load_gpt2();
  ASSERT_TRUE(tokenizer);
  TempDir in, out;
  std::filesystem::create_directories(in / "sub");
  write_bytes(in / "b.txt", "Bee.\n\nStill bee.\n");
  write_bytes(in / "a.txt", "Ay.");
  write_bytes(in / "sub" / "c.txt", "Sea.");
  write_bytes(in / ".hidden", "not read");
  const auto outputs = preprocess(options_for(in.path(), out, "dir", 1));
  const IndexedDataset ds(outputs[0].prefix);
  ASSERT_EQ(ds.document_count(), 3);
  EXPECT_EQ(ds.get(0), tokenizer->encode("Ay."));
  EXPECT_EQ(ds.get(1), tokenizer->encode("Bee.\n\nStill bee.\n"));
  EXPECT_EQ(ds.get(2), tokenizer->encode("Sea."));
}

// Bad input: rejected with every needle in the message, and no output file written.
void expect_rejected(const PreprocessOptions& o, const TempDir& out,
                     const std::vector<std::string>& needles) {
  try {
    preprocess(o);
    ADD_FAILURE() << "accepted bad input";
  } catch (const ConfigError& e) {
    for (const auto& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << needle << "' not in: " << e.what();
  }
  for (const auto& entry : std::filesystem::directory_iterator(out.path()))
    EXPECT_EQ(entry.path().string().find("bad_"), std::string::npos) << "wrote " << entry.path();
}

TEST(Preprocess, RejectsBadInputBeforeWriting) {
  ASSERT_TRUE(load_gpt2());
  TempDir out;
  const auto in = out / "in.jsonl";
  expect_rejected(options_for(out / "missing.jsonl", out, "bad_missing", 1), out,
                  {"missing.jsonl", "no such file"});

  write_bytes(in, "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": oops}\n");
  expect_rejected(options_for(in, out, "bad_json", 1), out,
                  {"in.jsonl", "line 3", "not valid JSON"});

  write_bytes(in, "{\"text\": \"ok\"}\n{\"body\": \"no text\", \"id\": 1}\n");
  expect_rejected(options_for(in, out, "bad_key", 1), out,
                  {"in.jsonl", "line 2", "key 'text' is missing", "keys present: body, id"});

  write_bytes(in, "{\"text\": 42}\n");
  expect_rejected(options_for(in, out, "bad_type", 1), out,
                  {"line 1 key 'text' = number", "string or a list of strings"});

  write_bytes(in, "[1, 2]\n");
  expect_rejected(options_for(in, out, "bad_array", 1), out, {"line 1", "JSON object"});

  write_bytes(in, "{\"text\": \"bad \xff byte\"}\n");
  expect_rejected(options_for(in, out, "bad_utf8_json", 1), out, {"line 1", "not valid JSON"});

  write_bytes(out / "in.txt", "fine\nalso fine\nbad \xc3 here\n");
  expect_rejected(options_for(out / "in.txt", out, "bad_utf8", 1), out,
                  {"in.txt", "line 3 = byte 5", "UTF-8"});

  auto tokenizer_type = options_for(fixture("preprocess_small.jsonl"), out, "bad_tok", 1);
  tokenizer_type.tokenizer_type = "SentencePieceTokenizer";
  expect_rejected(tokenizer_type, out, {"--tokenizer-type", "GPT2BPETokenizer"});

  auto no_dir = options_for(fixture("preprocess_small.jsonl"), out, "x", 1);
  no_dir.output_prefix = (out / "no" / "such" / "bad_dir").string();
  expect_rejected(no_dir, out, {"--output-prefix", "does not exist"});
}

}  // namespace
}  // namespace tandem::data
