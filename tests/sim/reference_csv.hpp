// The reference tables the simulator is held against (topology/*_reference.csv): each data
// row's first `fields` comma-separated cells (later cells, quoted quotes and URLs, are left
// unread), the header skipped. A row with fewer cells throws.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/collective_cost.hpp"

namespace tandem::sim {

inline std::vector<std::vector<std::string>> reference_rows(const std::string& path_in_repo,
                                                            std::size_t fields) {
  // A path, not string concatenation: GCC 12 warns (array-bounds, a false positive) on
  // std::string(LITERAL) + "/" + … for some lengths of the checkout's path.
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / path_in_repo);
  if (!in) throw std::runtime_error("cannot read " + path_in_repo);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (f.size() < fields && std::getline(ss, cell, ',')) f.push_back(cell);
    if (f.size() < fields) throw std::runtime_error("short reference row: " + line);
    rows.push_back(std::move(f));
  }
  return rows;
}

// A reference row's collective ("all_gather", …); throws for any other name.
inline Collective reference_collective(const std::string& name) {
  if (const auto c = collective_named(name)) return *c;
  throw std::invalid_argument("reference row: collective " + name);
}

}  // namespace tandem::sim
