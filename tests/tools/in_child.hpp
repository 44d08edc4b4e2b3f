// Runs a test's body in a forked child and hands back the JSON it produced. SimGrid's
// engine is one per process and cannot be restarted, so every test that simulates (or
// builds a platform) does so in a child of its own. A child that throws answers
// {"error": what}; one that dies answers {"error": "child produced nothing (status …)"}.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace tandem::testing {

inline nlohmann::json in_child(const std::function<nlohmann::json()>& body) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    try {
      out = body().dump();
    } catch (const std::exception& e) {
      out = nlohmann::json{{"error", e.what()}}.dump();
    }
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (text.empty())
    return {{"error", "child produced nothing (status " + std::to_string(status) + ")"}};
  return nlohmann::json::parse(text);
}

}  // namespace tandem::testing
