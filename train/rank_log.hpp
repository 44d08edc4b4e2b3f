// Per-rank log files for `tandem train --log-dir DIR`: every rank writes its own messages
// (its Megatron log lines with its own loss and grad norm, validation, checkpoints, the error
// that ended it) to DIR/rank_{R:05d}.log, each line flushed as written, so a job that dies
// leaves every rank's last words. The reporting rank (Megatron's print_rank_last) also
// prints every line to stdout, as without --log-dir.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace tandem {

std::filesystem::path rank_log_file(const std::filesystem::path& dir, int rank);

class RankLog {
 public:
  // `dir` empty: no file, only the reporter's stdout. The directory must exist.
  RankLog(const std::filesystem::path& dir, int rank, bool reporter);

  void line(const std::string& text);     // to the file and, on the reporter, stdout
  void to_file(const std::string& text);  // to the file only (what stderr reports anyway)
  bool reporter() const { return reporter_; }

 private:
  std::ofstream file_;
  bool reporter_;
};

}  // namespace tandem
