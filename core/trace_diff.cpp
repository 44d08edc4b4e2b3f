// summarize_trace / diff_traces: op-class totals of two Chrome traces side by side.
#include "core/trace_diff.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.hpp"

namespace tandem {
namespace {

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '.';
}

bool all_number_chars(std::string_view word) {
  return !word.empty() && std::all_of(word.begin(), word.end(), is_number_char);
}

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) words.push_back(s.substr(i, j - i));
    i = j;
  }
  return words;
}

std::optional<double> ratio(double b, double a) {
  if (a == 0) return std::nullopt;
  return b / a;
}

nlohmann::json stats_json(const OpClassStats& s) {
  return {{"count", s.count}, {"total_ms", s.total_ms}, {"mean_ms", s.mean_ms()}};
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string ratio_text(const std::optional<double>& v) {
  return v ? fixed(*v, 3) : "-";
}

}  // namespace

std::string op_class(std::string_view slice_name) {
  const auto words = split_words(slice_name);
  if (words.empty()) return std::string(slice_name);
  std::string_view head = words.front();
  while (!head.empty() && is_number_char(head.back())) head.remove_suffix(1);
  if (head.empty()) return std::string(slice_name);
  std::string out(head);
  for (std::size_t i = 1; i < words.size(); ++i) {
    if (all_number_chars(words[i])) continue;
    out += ' ';
    out += words[i];
  }
  return out;
}

TraceSummary summarize_trace(const nlohmann::json& trace, std::string_view source) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw ConfigError({{"traceEvents", "", "the document needs a traceEvents array"}},
                      std::string(source));
  TraceSummary s;
  std::vector<Violation> problems;
  std::set<std::int64_t> pids;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  const auto& events = trace["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const std::string field = "traceEvents[" + std::to_string(i) + "]";
    if (!e.contains("name") || !e["name"].is_string() || !e.contains("ts") ||
        !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) {
      problems.push_back({field, e.dump(), "an X event needs a string name and numeric ts, dur"});
      continue;
    }
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();  // µs
    if (dur < 0) {
      problems.push_back({field, e.dump(), "dur must be ≥ 0"});
      continue;
    }
    auto& c = s.classes[op_class(e["name"].get<std::string>())];
    c.count += 1;
    c.total_ms += dur / 1000.0;
    s.slices += 1;
    first = std::min(first, ts);
    last = std::max(last, ts + dur);
    if (e.contains("pid") && e["pid"].is_number_integer())
      pids.insert(e["pid"].get<std::int64_t>());
  }
  if (!problems.empty()) throw ConfigError(std::move(problems), std::string(source));
  s.span_ms = s.slices ? (last - first) / 1000.0 : 0.0;
  s.processes = static_cast<int>(pids.size());
  return s;
}

TraceDiff diff_traces(const TraceSummary& a, const TraceSummary& b) {
  TraceDiff d{a, b, {}};
  std::set<std::string> names;
  for (const auto& [name, stats] : a.classes) names.insert(name);
  for (const auto& [name, stats] : b.classes) names.insert(name);
  for (const auto& name : names) {
    TraceDiffRow row{name, {}, {}, std::nullopt, std::nullopt};
    if (auto it = a.classes.find(name); it != a.classes.end()) row.a = it->second;
    if (auto it = b.classes.find(name); it != b.classes.end()) row.b = it->second;
    row.total_ratio = ratio(row.b.total_ms, row.a.total_ms);
    if (row.a.count) row.mean_ratio = ratio(row.b.mean_ms(), row.a.mean_ms());
    d.rows.push_back(row);
  }
  return d;
}

nlohmann::json to_json(const TraceDiff& d) {
  auto summary = [](const TraceSummary& s) {
    return nlohmann::json{{"span_ms", s.span_ms}, {"processes", s.processes}, {"slices", s.slices}};
  };
  nlohmann::json classes = nlohmann::json::array();
  for (const auto& r : d.rows)
    classes.push_back({{"class", r.op_class},
                       {"a", stats_json(r.a)},
                       {"b", stats_json(r.b)},
                       {"total_ratio", optional_json(r.total_ratio)},
                       {"mean_ratio", optional_json(r.mean_ratio)}});
  return {{"a", summary(d.a)},
          {"b", summary(d.b)},
          {"span_ratio", optional_json(ratio(d.b.span_ms, d.a.span_ms))},
          {"classes", classes}};
}

std::string format_trace_diff(const TraceDiff& d, std::string_view name_a,
                              std::string_view name_b) {
  std::vector<std::vector<std::string>> cells{{"class", "count A", "total A ms", "mean A ms",
                                               "count B", "total B ms", "mean B ms", "total B/A",
                                               "mean B/A"}};
  for (const auto& r : d.rows)
    cells.push_back({r.op_class, std::to_string(r.a.count), fixed(r.a.total_ms, 3),
                     fixed(r.a.mean_ms(), 3), std::to_string(r.b.count), fixed(r.b.total_ms, 3),
                     fixed(r.b.mean_ms(), 3), ratio_text(r.total_ratio), ratio_text(r.mean_ratio)});
  std::vector<std::size_t> width(cells.front().size(), 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  out << "A = " << name_a << "\nB = " << name_b << "\n";
  for (const auto& row : cells) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::size_t pad = width[c] - row[c].size();
      if (c == 0)
        out << row[c] << std::string(pad, ' ');
      else
        out << "  " << std::string(pad, ' ') << row[c];
    }
    out << "\n";
  }
  out << "span A " << fixed(d.a.span_ms, 3) << " ms (" << d.a.processes << " ranks, " << d.a.slices
      << " slices), B " << fixed(d.b.span_ms, 3) << " ms (" << d.b.processes << " ranks, "
      << d.b.slices << " slices), B/A " << ratio_text(ratio(d.b.span_ms, d.a.span_ms)) << "\n";
  return out.str();
}

}  // namespace tandem
