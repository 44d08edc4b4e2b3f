#include "train/rank_log.hpp"

#include <cstdio>
#include <iostream>
#include <stdexcept>

namespace tandem {

std::filesystem::path rank_log_file(const std::filesystem::path& dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.log", rank);
  return dir / name;
}

RankLog::RankLog(const std::filesystem::path& dir, int rank, bool reporter) : reporter_(reporter) {
  if (dir.empty()) return;
  const auto path = rank_log_file(dir, rank);
  file_.open(path);
  if (!file_) throw std::runtime_error("cannot write the log file " + path.string());
}

void RankLog::line(const std::string& text) {
  to_file(text);
  if (reporter_) std::cout << text << std::endl;
}

void RankLog::to_file(const std::string& text) {
  if (file_.is_open()) file_ << text << std::endl;
}

}  // namespace tandem
