// The documents `tandem preprocess` reads, from one of three kinds of input:
//   *.json / *.jsonl   JSON lines, one document per line (Megatron's format); each key
//                      holds a string or a list of strings (sentences, each its own
//                      sequence); blank lines are skipped;
//   a directory        every regular file below it (sorted by path, names starting with
//                      '.' skipped) is one plain-text document, taken verbatim;
//   any other file     plain text, one document per paragraph: paragraphs are separated
//                      by blank (empty or white-space-only) lines, a paragraph's lines are
//                      joined with '\n'.
// Reading validates as it goes and throws ConfigError naming the file, the line and the
// field at the first bad document, so a first pass over the input rejects bad input
// before anything is written.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace tandem::data {

struct InputDocument {
  // fields[k]: the sentences under keys[k] (a plain-text document has one key, one sentence).
  std::vector<std::vector<std::string>> fields;
};

enum class InputKind { json_lines, plain_text, directory };
InputKind input_kind(const std::filesystem::path& input);

// Calls `consume` with each document in input order. `keys` are the JSON keys to extract;
// plain text and directories take exactly one key (it only names the output).
void read_documents(const std::filesystem::path& input, const std::vector<std::string>& keys,
                    const std::function<void(InputDocument&&)>& consume);

}  // namespace tandem::data
