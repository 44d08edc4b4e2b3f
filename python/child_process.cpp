// run_in_children: fork, run, write "ok\n<json>" (or the error) to a temporary file, _exit.
// _exit, not exit: the child is a copy of the Python interpreter, whose atexit handlers and
// buffered streams belong to the parent.
#include "python/child_process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include "core/error.hpp"

namespace tandem::python {
namespace {

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string text;
  if (::lseek(fd, 0, SEEK_SET) < 0) return text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

[[noreturn]] void child_main(const std::function<nlohmann::json()>& work, int fd) {
  std::string out;
  try {
    out = "ok\n" + work().dump();
  } catch (const ConfigError& e) {
    nlohmann::json v = nlohmann::json::array();
    for (const auto& x : e.violations())
      v.push_back({{"field", x.field}, {"value", x.value}, {"rule", x.rule}});
    out = "ConfigError\n" + nlohmann::json{{"violations", v}, {"source", e.source()}}.dump();
  } catch (const ScheduleError& e) {
    out = std::string("ScheduleError\n") + e.what();
  } catch (const std::exception& e) {
    out = std::string("error\n") + e.what();
  } catch (...) {
    out = "error\nan unknown exception";
  }
  write_all(fd, out);
  std::fflush(nullptr);
  ::_exit(0);
}

ChildOutcome read_outcome(int fd, int status) {
  ChildOutcome r;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    r.kind = "crash";
    r.message = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                    : "exited with status " + std::to_string(WEXITSTATUS(status));
    return r;
  }
  const std::string text = read_all(fd);
  const auto nl = text.find('\n');
  if (nl == std::string::npos) {
    r.kind = "crash";
    r.message = "exited without a result";
    return r;
  }
  r.kind = text.substr(0, nl);
  const std::string body = text.substr(nl + 1);
  if (r.kind == "ok" || r.kind == "ConfigError") {
    try {
      r.value = nlohmann::json::parse(body);
    } catch (const nlohmann::json::exception& e) {
      r.kind = "crash";
      r.message = std::string("its result is unreadable: ") + e.what();
      return r;
    }
    r.ok = r.kind == "ok";
  } else {
    r.message = body;
  }
  return r;
}

struct Running {
  std::size_t index;
  std::FILE* file;
};

}  // namespace

std::vector<ChildOutcome> run_in_children(const std::vector<std::function<nlohmann::json()>>& work,
                                          int jobs, const std::function<bool()>& interrupted) {
  if (jobs < 1) jobs = 1;
  std::vector<ChildOutcome> outcomes(work.size());
  std::map<pid_t, Running> running;
  std::size_t next = 0;
  auto stop_all = [&] {
    for (auto& [pid, r] : running) {
      ::kill(pid, SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      std::fclose(r.file);
    }
    running.clear();
    for (auto& o : outcomes)
      if (!o.ok && o.kind.empty()) o = {false, {}, "interrupted", "interrupted"};
  };
  while (next < work.size() || !running.empty()) {
    while (next < work.size() && static_cast<int>(running.size()) < jobs) {
      std::FILE* file = std::tmpfile();
      if (!file) {
        stop_all();
        throw std::runtime_error(std::string("cannot create a temporary file: ") +
                                 std::strerror(errno));
      }
      std::fflush(nullptr);  // nothing buffered is written twice
      const pid_t pid = ::fork();
      if (pid < 0) {
        std::fclose(file);
        stop_all();
        throw std::runtime_error(std::string("cannot fork a child: ") + std::strerror(errno));
      }
      if (pid == 0) child_main(work[next], fileno(file));
      running[pid] = {next, file};
      ++next;
    }
    // Only our own children are waited for (waitpid(-1) would reap the interpreter's other
    // subprocesses): poll each, 20 ms apart, and look at Ctrl-C in between.
    bool reaped = false;
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t pid = ::waitpid(it->first, &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) {
        ++it;
        continue;
      }
      if (pid < 0) {
        outcomes[it->second.index] = {
            false, {}, "crash", std::string("lost: ") + std::strerror(errno)};
      } else {
        outcomes[it->second.index] = read_outcome(fileno(it->second.file), status);
      }
      std::fclose(it->second.file);
      it = running.erase(it);
      reaped = true;
    }
    if (interrupted && interrupted()) {
      stop_all();
      return outcomes;
    }
    if (!reaped) ::usleep(20000);
  }
  return outcomes;
}

}  // namespace tandem::python
