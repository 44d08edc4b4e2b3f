// The data cache's location, from the environment.
#include "data/data_dir.hpp"

#include <cstdlib>

namespace tandem::data {

std::filesystem::path default_data_dir() {
  if (const char* dir = std::getenv("TANDEM_DATA_DIR"); dir && *dir) return dir;
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "tandem";
  return std::filesystem::path(".cache") / "tandem";
}

Gpt2VocabFiles default_gpt2_vocab_files() {
  const auto dir = default_data_dir() / "gpt2";
  return {dir / "encoder.json", dir / "vocab.bpe"};
}

}  // namespace tandem::data
