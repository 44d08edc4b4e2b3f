#include "core/trace.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>
#include <utility>

namespace tandem {
namespace {
double to_us(Seconds t) {
  return t.value * 1e6;
}
}  // namespace

void Trace::name_process(int pid, const std::string& name, int sort_index) {
  metadata_events_.push_back({{"name", "process_name"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", 0},
                              {"args", {{"name", name}}}});
  metadata_events_.push_back({{"name", "process_sort_index"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", 0},
                              {"args", {{"sort_index", sort_index}}}});
}

void Trace::name_thread(int pid, int tid, const std::string& name, int sort_index) {
  metadata_events_.push_back({{"name", "thread_name"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", tid},
                              {"args", {{"name", name}}}});
  metadata_events_.push_back({{"name", "thread_sort_index"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", tid},
                              {"args", {{"sort_index", sort_index}}}});
}

void Trace::add_slice(TraceSlice slice) {
  slices_.push_back(std::move(slice));
}

void Trace::add_flow(const std::string& name, int pid_from, int tid_from, Seconds from, int pid_to,
                     int tid_to, Seconds to) {
  const auto id = next_flow_id_++;
  other_events_.push_back({{"name", name},
                           {"cat", "flow"},
                           {"ph", "s"},
                           {"id", id},
                           {"pid", pid_from},
                           {"tid", tid_from},
                           {"ts", to_us(from)}});
  other_events_.push_back({{"name", name},
                           {"cat", "flow"},
                           {"ph", "f"},
                           {"bp", "e"},
                           {"id", id},
                           {"pid", pid_to},
                           {"tid", tid_to},
                           {"ts", to_us(to)}});
}

void Trace::add_counter(const std::string& name, int pid, Seconds at,
                        const nlohmann::json& values) {
  other_events_.push_back(
      {{"name", name}, {"ph", "C"}, {"pid", pid}, {"tid", 0}, {"ts", to_us(at)}, {"args", values}});
}

void Trace::set_metadata(const std::string& key, nlohmann::json value) {
  metadata_[key] = std::move(value);
}

nlohmann::json Trace::to_json() const {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& m : metadata_events_) events.push_back(m);
  // Sorted by start so viewers (and check_trace) see each thread's slices in order.
  std::vector<const TraceSlice*> sorted;
  for (const auto& s : slices_) sorted.push_back(&s);
  std::stable_sort(sorted.begin(), sorted.end(), [](const TraceSlice* a, const TraceSlice* b) {
    return std::tie(a->pid, a->tid, a->start.value) < std::tie(b->pid, b->tid, b->start.value);
  });
  for (const auto* s : sorted)
    events.push_back({{"name", s->name},
                      {"cat", s->category},
                      {"ph", "X"},
                      {"pid", s->pid},
                      {"tid", s->tid},
                      {"ts", to_us(s->start)},
                      {"dur", to_us(s->duration)},
                      {"args", s->args}});
  for (const auto& e : other_events_) events.push_back(e);
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", metadata_}};
}

void Trace::write(const std::filesystem::path& path) const {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write trace to " + path.string());
    out << to_json().dump() << '\n';
    if (!out) throw std::runtime_error("writing trace to " + path.string() + " failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace tandem
