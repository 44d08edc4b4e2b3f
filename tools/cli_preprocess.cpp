// `tandem preprocess`: Megatron's tools/preprocess_data.py — text or JSON lines in,
// {output-prefix}_{key}_document.bin/.idx out, tokenized with GPT-2's BPE. The vocabulary
// defaults to the one scripts/fetch-data.sh caches.
#include <iostream>

#include "data/data_dir.hpp"
#include "data/preprocess.hpp"
#include "tools/cli.hpp"

namespace tandem::cli {

void add_preprocess_command(CLI::App& app) {
  auto opts = std::make_shared<data::PreprocessOptions>();
  const auto defaults = data::default_gpt2_vocab_files();
  opts->vocab_file = defaults.vocab_file;
  opts->merge_file = defaults.merge_file;
  auto* cmd = app.add_subcommand(
      "preprocess",
      "Tokenize text into Megatron's indexed dataset (.bin + .idx), as Megatron's "
      "tools/preprocess_data.py");
  cmd->add_option("--input", opts->input,
                  "JSON lines (*.json, *.jsonl: one document per line), a plain-text file (one "
                  "document per blank-line-separated paragraph) or a directory (one document per "
                  "file)")
      ->required();
  cmd->add_option("--json-keys", opts->json_keys,
                  "Keys to extract from each JSON line; each gets its own output (default text)");
  cmd->add_option("--output-prefix", opts->output_prefix,
                  "Writes {prefix}_{key}_document.bin and .idx")
      ->required();
  cmd->add_option("--vocab-file", opts->vocab_file, "GPT-2 encoder.json")->capture_default_str();
  cmd->add_option("--merge-file", opts->merge_file, "GPT-2 vocab.bpe")->capture_default_str();
  cmd->add_option("--tokenizer-type", opts->tokenizer_type, "Only GPT2BPETokenizer")
      ->capture_default_str();
  cmd->add_flag("--append-eod", opts->append_eod,
                "End each non-empty document with <|endoftext|> (50256)");
  cmd->add_option("--workers", opts->workers,
                  "Tokenizer threads; the output does not depend on it (default 1)")
      ->check(positive());
  cmd->callback([opts] {
    for (const auto& out : data::preprocess(*opts))
      std::cout << out.prefix.string() << ".bin/.idx: " << out.documents << " documents, "
                << out.sequences << " sequences, " << out.tokens << " tokens (key '" << out.key
                << "')\n";
  });
}

}  // namespace tandem::cli
