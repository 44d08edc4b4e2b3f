// run_child_simulations: posix_spawn this binary (or fork this process) once per scenario,
// keep at most `jobs` children alive, and read back each one's JSON report or its log.
#include "tools/child_simulation.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

pid_t spawn_child(const ChildSimulation& sim) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, sim.log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> argv_text{"tandem"};
  argv_text.insert(argv_text.end(), sim.args.begin(), sim.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw std::runtime_error("cannot start a child simulation for " + sim.name + ": " +
                             std::strerror(rc));
  return pid;
}

// A fork of this process with the child's stdin, stdout and stderr as spawn_child's, which
// runs `run(args)` and exits with its code without running this process's exit handlers.
pid_t fork_child(const ChildSimulation& sim, const ChildRunner& run) {
  std::cout << std::flush;
  std::cerr << std::flush;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error("cannot fork a child simulation for " + sim.name + ": " +
                             std::strerror(errno));
  if (pid > 0) return pid;
  int rc = 1;
  const int null_in = open("/dev/null", O_RDONLY);
  const int log = open(sim.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (null_in >= 0 && log >= 0 && dup2(null_in, STDIN_FILENO) >= 0 &&
      dup2(log, STDOUT_FILENO) >= 0 && dup2(log, STDERR_FILENO) >= 0) {
    close(null_in);
    close(log);
    try {
      std::vector<std::string> args{"tandem"};
      args.insert(args.end(), sim.args.begin(), sim.args.end());
      rc = run(args);
    } catch (const std::exception& e) {
      std::cerr << "tandem: error: " << e.what() << "\n";
    }
  }
  std::cout << std::flush;
  std::cerr << std::flush;
  std::fflush(nullptr);
  _exit(rc);
}

std::string tail_of(const std::filesystem::path& path, std::size_t max_chars) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.size() > max_chars ? "…" + text.substr(text.size() - max_chars) : text;
}

ChildResult read_result(const ChildSimulation& sim, int status) {
  ChildResult r;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::ifstream in(sim.json);
    try {
      r.report = nlohmann::json::parse(in);
      r.ok = true;
      return r;
    } catch (const nlohmann::json::exception& e) {
      r.error = "its report " + sim.json.string() + " is unreadable: " + e.what();
      return r;
    }
  }
  r.error = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                              : "killed by signal " + std::to_string(WTERMSIG(status));
  const std::string log = tail_of(sim.log, 600);
  if (!log.empty()) r.error += ": " + log;
  return r;
}

}  // namespace

std::vector<ChildResult> run_child_simulations(
    const std::vector<ChildSimulation>& sims, int jobs,
    const std::function<void(std::size_t, const ChildResult&)>& on_done,
    const ChildRunner& in_fork) {
  std::vector<ChildResult> results(sims.size());
  std::map<std::filesystem::path, std::size_t> index_of;  // each child's report file
  std::size_t next = 0;
  run_pulled_simulations(
      jobs,
      [&]() -> std::optional<ChildSimulation> {
        if (next == sims.size()) return std::nullopt;
        if (!index_of.emplace(sims[next].json, next).second)
          throw std::logic_error("two child simulations write the same report " +
                                 sims[next].json.string());
        return sims[next++];
      },
      [&](const ChildSimulation& sim, const ChildResult& result) {
        const std::size_t index = index_of.at(sim.json);
        results[index] = result;
        if (on_done) on_done(index, results[index]);
      },
      in_fork);
  return results;
}

void run_pulled_simulations(
    int jobs, const std::function<std::optional<ChildSimulation>()>& next,
    const std::function<void(const ChildSimulation&, const ChildResult&)>& on_done,
    const ChildRunner& in_fork) {
  if (jobs < 1) jobs = 1;
  std::map<pid_t, std::pair<ChildSimulation, Clock::time_point>> running;
  bool exhausted = false;
  while (true) {
    while (!exhausted && static_cast<int>(running.size()) < jobs) {
      std::optional<ChildSimulation> sim = next();
      if (!sim) {
        exhausted = true;
        break;
      }
      const pid_t pid = in_fork ? fork_child(*sim, in_fork) : spawn_child(*sim);
      running.emplace(pid, std::make_pair(std::move(*sim), Clock::now()));
    }
    if (running.empty()) return;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("waiting for child simulations: ") +
                               std::strerror(errno));
    }
    const auto it = running.find(pid);
    if (it == running.end()) continue;  // not one of ours
    const auto [sim, started] = std::move(it->second);
    running.erase(it);
    ChildResult result = read_result(sim, status);
    result.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
    on_done(sim, result);
  }
}

}  // namespace tandem::cli
