// Runs the tandem binary (TANDEM_BINARY, set by CMake) with arguments, capturing its exit
// code and its stdout and stderr together: what the CLI tests assert on.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tandem::testing {

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr together
};

inline Result run(const std::string& args) {
  const std::string cmd = std::string(TANDEM_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace tandem::testing
