// check_trace: the structural rules of the Chrome trace format that Perfetto and
// chrome://tracing rely on, so tests can assert that what tandem writes will open.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/trace.hpp"

namespace tandem {
namespace {

constexpr double kEpsilonUs = 1e-3;

struct Span {
  double begin, end;
  std::string name;
};
using ThreadKey = std::pair<std::int64_t, std::int64_t>;

std::string label(std::size_t i, const nlohmann::json& e) {
  return "event " + std::to_string(i) + " (" + (e.contains("name") ? e["name"].dump() : "?") + ")";
}

void check_nesting(const std::map<ThreadKey, std::vector<Span>>& threads,
                   std::vector<std::string>& problems) {
  for (const auto& [key, spans] : threads) {
    std::vector<Span> sorted = spans;
    std::stable_sort(sorted.begin(), sorted.end(), [](const Span& a, const Span& b) {
      return a.begin < b.begin || (a.begin == b.begin && a.end > b.end);
    });
    std::vector<Span> open;
    for (const auto& s : sorted) {
      while (!open.empty() && open.back().end <= s.begin + kEpsilonUs) open.pop_back();
      if (!open.empty() && s.end > open.back().end + kEpsilonUs)
        problems.push_back("pid " + std::to_string(key.first) + " tid " +
                           std::to_string(key.second) + ": slice " + s.name + " overlaps slice " +
                           open.back().name + " without nesting in it");
      open.push_back(s);
    }
  }
}

bool inside_some_slice(const std::vector<Span>& spans, double ts) {
  return std::any_of(spans.begin(), spans.end(), [&](const Span& s) {
    return ts >= s.begin - kEpsilonUs && ts <= s.end + kEpsilonUs;
  });
}

}  // namespace

std::vector<std::string> check_trace(const nlohmann::json& trace) {
  std::vector<std::string> problems;
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    return {"the document has no traceEvents array"};
  const auto& events = trace["traceEvents"];
  std::map<ThreadKey, std::vector<Span>> slices;
  std::map<std::int64_t, std::vector<std::size_t>> flow_starts, flow_ends;
  std::set<std::int64_t> named_processes;
  std::set<std::int64_t> pids;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    for (const char* key : {"name", "ph", "pid", "tid"})
      if (!e.contains(key)) problems.push_back(label(i, e) + " has no \"" + key + "\"");
    if (!e.contains("ph") || !e.contains("pid") || !e.contains("tid")) continue;
    const std::string ph = e["ph"].get<std::string>();
    const ThreadKey key{e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()};
    if (ph == "M") {
      if (e.value("name", "") == "process_name") named_processes.insert(key.first);
      if (!e.contains("args") || !e["args"].is_object())
        problems.push_back(label(i, e) + ": metadata event without args");
      continue;
    }
    pids.insert(key.first);
    if (!e.contains("ts") || !e["ts"].is_number()) {
      problems.push_back(label(i, e) + " has no numeric \"ts\"");
      continue;
    }
    const double ts = e["ts"].get<double>();
    if (ts < 0) problems.push_back(label(i, e) + " starts before 0");
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
        problems.push_back(label(i, e) + ": X event needs a non-negative \"dur\"");
        continue;
      }
      slices[key].push_back({ts, ts + e["dur"].get<double>(), label(i, e)});
    } else if (ph == "s" || ph == "f") {
      if (!e.contains("id")) {
        problems.push_back(label(i, e) + ": flow event without \"id\"");
        continue;
      }
      if (ph == "f" && e.value("bp", "") != "e")
        problems.push_back(label(i, e) + ": flow end without \"bp\":\"e\"");
      (ph == "s" ? flow_starts : flow_ends)[e["id"].get<std::int64_t>()].push_back(i);
    } else if (ph != "C" && ph != "i" && ph != "I") {
      problems.push_back(label(i, e) + ": unexpected phase \"" + ph + "\"");
    }
  }
  check_nesting(slices, problems);
  for (const auto& [id, starts] : flow_starts) {
    const auto it = flow_ends.find(id);
    if (starts.size() != 1 || it == flow_ends.end() || it->second.size() != 1) {
      problems.push_back("flow id " + std::to_string(id) +
                         " does not have exactly one start and one end");
      continue;
    }
    for (std::size_t idx : {starts[0], it->second[0]}) {
      const auto& e = events[idx];
      const ThreadKey key{e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()};
      if (!inside_some_slice(slices[key], e["ts"].get<double>()))
        problems.push_back(label(idx, e) + ": flow end point lies in no slice of its thread");
    }
  }
  for (const auto& [id, ends] : flow_ends)
    if (!flow_starts.count(id))
      problems.push_back("flow id " + std::to_string(id) + " has no start");
  for (auto pid : pids)
    if (!named_processes.count(pid))
      problems.push_back("pid " + std::to_string(pid) + " has no process_name metadata");
  return problems;
}

}  // namespace tandem
