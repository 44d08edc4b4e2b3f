// Where scripts/fetch-data.sh caches downloaded data (never inside the repository):
// $TANDEM_DATA_DIR when set, else $HOME/.cache/tandem. The CLI's defaults and the tests
// find the GPT-2 vocabulary and the Brown corpus here.
#pragma once

#include <filesystem>

namespace tandem::data {

std::filesystem::path default_data_dir();

struct Gpt2VocabFiles {
  std::filesystem::path vocab_file;  // encoder.json
  std::filesystem::path merge_file;  // vocab.bpe
};

// <data dir>/gpt2/encoder.json and <data dir>/gpt2/vocab.bpe (they may not exist yet).
Gpt2VocabFiles default_gpt2_vocab_files();

}  // namespace tandem::data
