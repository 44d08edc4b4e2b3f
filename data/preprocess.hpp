// `tandem preprocess`: Megatron's tools/preprocess_data.py. Documents (preprocess_input.hpp)
// are tokenized with GPT-2's BPE on `workers` threads and written, in input order, to
// {output_prefix}_{key}_document.bin/.idx for each key, in the smallest dtype for the
// vocabulary (uint16 for GPT-2). A document's sentences each become a sequence (empty
// ones dropped); with append_eod the document's last sequence ends with <|endoftext|>,
// unless the document is empty. The output is the same whatever the number of workers.
// The whole input is checked before anything is written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::data {

struct PreprocessOptions {
  std::filesystem::path input;                      // --input
  std::vector<std::string> json_keys{"text"};       // --json-keys
  std::string output_prefix;                        // --output-prefix
  std::filesystem::path vocab_file;                 // --vocab-file (encoder.json)
  std::filesystem::path merge_file;                 // --merge-file (vocab.bpe)
  std::string tokenizer_type = "GPT2BPETokenizer";  // --tokenizer-type
  bool append_eod = false;                          // --append-eod
  int workers = 1;                                  // --workers (threads)
};

struct PreprocessOutput {
  std::string key;
  std::filesystem::path prefix;  // {output_prefix}_{key}_document
  std::int64_t documents = 0;
  std::int64_t sequences = 0;
  std::int64_t tokens = 0;
};

// Throws ConfigError for bad options or input, naming the flag or the file, line and key.
std::vector<PreprocessOutput> preprocess(const PreprocessOptions& options);

}  // namespace tandem::data
