#include "core/trace_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>

namespace tandem {
namespace {

struct Slice {
  double ts = 0, dur = 0;  // us
  std::string name;
  int chunk = 0;  // virtual pipeline chunk (lighter shades for later ones)
  bool operator==(const Slice&) const = default;
};

struct Row {
  std::int64_t pid, tid;
  int process_sort = 0, thread_sort = 0;
  std::string process_name, thread_name;
  std::vector<Slice> slices;
};

// Ranks whose rows are identical up to the rank id (the same threads, the same slices at
// the same times), drawn once: `rows` are the first rank's, `pids` every rank it stands for.
struct RankGroup {
  std::vector<std::int64_t> pids;
  std::vector<const Row*> rows;
  std::string process_name;  // the first rank's
};

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Mixes `hex` (#rrggbb) towards white by `t` in [0, 1].
std::string lighten(const std::string& hex, double t) {
  unsigned r = 0, g = 0, b = 0;
  std::sscanf(hex.c_str(), "#%02x%02x%02x", &r, &g, &b);
  auto mix = [t](unsigned c) { return static_cast<unsigned>(c + (255 - c) * t); };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", mix(r), mix(g), mix(b));
  return buf;
}

std::string base_colour(const std::string& name) {
  if (name.empty()) return "#9e9e9e";
  if (name[0] == 'F') return "#3b6fb6";  // forward: blue
  if (name[0] == 'B') return "#e8772e";  // backward: orange
  if (name[0] == 'W') return "#4a9e5c";  // weight-gradient: green
  if (name.rfind("send", 0) == 0 || name.rfind("recv", 0) == 0) return "#8c8c8c";
  if (name.find("reduce") != std::string::npos || name.find("gather") != std::string::npos)
    return "#8e5bb5";  // collectives: purple
  return "#9e9e9e";
}

// The text drawn inside a slice: the microbatch (and chunk) of F/B ops, else the name.
std::string slice_text(const std::string& name) {
  if (name.size() > 1 && (name[0] == 'F' || name[0] == 'B' || name[0] == 'W') &&
      std::isdigit(static_cast<unsigned char>(name[1])))
    return name.substr(1);
  return name;
}

double nice_step(double span, int target_ticks) {
  const double raw = span / target_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string format_time_us(double us) {
  char buf[32];
  if (us >= 1e6)
    std::snprintf(buf, sizeof buf, "%g s", us / 1e6);
  else if (us >= 1e3)
    std::snprintf(buf, sizeof buf, "%g ms", us / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%g us", us);
  return buf;
}

std::vector<Row> collect_rows(const nlohmann::json& events, double& t_end) {
  std::map<std::pair<std::int64_t, std::int64_t>, Row> rows;
  std::map<std::int64_t, std::pair<std::string, int>> processes;
  for (const auto& e : events) {
    const std::string ph = e.value("ph", "");
    const auto pid = e.value("pid", std::int64_t{0}), tid = e.value("tid", std::int64_t{0});
    if (ph == "M") {
      const std::string n = e.value("name", "");
      const auto& a = e["args"];
      if (n == "process_name") processes[pid].first = a.value("name", "");
      if (n == "process_sort_index") processes[pid].second = a.value("sort_index", 0);
      auto& row = rows[{pid, tid}];
      if (n == "thread_name") row.thread_name = a.value("name", "");
      if (n == "thread_sort_index") row.thread_sort = a.value("sort_index", 0);
    } else if (ph == "X" && e.value("dur", 0.0) > 0) {
      auto& row = rows[{pid, tid}];
      Slice s{e.value("ts", 0.0), e.value("dur", 0.0), e.value("name", ""), 0};
      if (e.contains("args") && e["args"].contains("chunk") && e["args"]["chunk"].is_number())
        s.chunk = e["args"]["chunk"].get<int>();
      t_end = std::max(t_end, s.ts + s.dur);
      row.slices.push_back(std::move(s));
    }
  }
  std::vector<Row> out;
  for (auto& [key, row] : rows) {
    if (row.slices.empty()) continue;
    row.pid = key.first;
    row.tid = key.second;
    row.process_name = processes[key.first].first;
    row.process_sort = processes[key.first].second;
    if (row.process_name.empty()) row.process_name = "pid " + std::to_string(key.first);
    if (row.thread_name.empty()) row.thread_name = "tid " + std::to_string(key.second);
    out.push_back(std::move(row));
  }
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) {
    return std::tie(a.process_sort, a.pid, a.thread_sort, a.tid) <
           std::tie(b.process_sort, b.pid, b.thread_sort, b.tid);
  });
  return out;
}

// FNV-1a over what makes a rank's rows look the way they do (not its id or name).
std::uint64_t signature(const std::vector<const Row*>& rows) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const Row* row : rows) {
    mix(&row->tid, sizeof row->tid);
    mix(row->thread_name.data(), row->thread_name.size());
    for (const auto& s : row->slices) {
      mix(&s.ts, sizeof s.ts);
      mix(&s.dur, sizeof s.dur);
      mix(&s.chunk, sizeof s.chunk);
      mix(s.name.data(), s.name.size());
    }
  }
  return h;
}

bool same_rows(const std::vector<const Row*>& a, const std::vector<const Row*>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i]->tid != b[i]->tid || a[i]->thread_name != b[i]->thread_name ||
        a[i]->slices != b[i]->slices)
      return false;
  return true;
}

// Sorted rows → one group per distinct rank timeline, in the order of their first rank.
std::vector<RankGroup> group_ranks(const std::vector<Row>& rows) {
  std::vector<RankGroup> ranks;  // one per pid, in row order
  for (const auto& row : rows) {
    if (ranks.empty() || ranks.back().pids.front() != row.pid)
      ranks.push_back({{row.pid}, {}, row.process_name});
    ranks.back().rows.push_back(&row);
  }
  std::vector<RankGroup> groups;
  std::map<std::uint64_t, std::vector<std::size_t>> by_signature;  // → indices in groups
  for (auto& rank : ranks) {
    auto& candidates = by_signature[signature(rank.rows)];
    auto same = std::find_if(candidates.begin(), candidates.end(),
                             [&](std::size_t g) { return same_rows(groups[g].rows, rank.rows); });
    if (same != candidates.end()) {
      groups[*same].pids.push_back(rank.pids.front());
      continue;
    }
    candidates.push_back(groups.size());
    groups.push_back(std::move(rank));
  }
  return groups;
}

// "0-3, 8, 12-15": consecutive ids as ranges.
std::string id_ranges(std::vector<std::int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ids[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

// The row label of a group: its rank's name alone, or the ranks it stands for.
std::string group_label(const RankGroup& g) {
  if (g.pids.size() == 1) return g.process_name;
  std::string ids = id_ranges(g.pids);
  if (const auto cut = ids.rfind(", ", 15); ids.size() > 18 && cut != std::string::npos)
    ids = ids.substr(0, cut) + ", …";  // the whole list is the label's hover title
  return "ranks " + ids + " (" + std::to_string(g.pids.size()) + ")";
}

// Draws one row's slices. A slice at least kMinWidth px wide is a rectangle with its name
// as a hover title; narrower ones (thousands per row in a large run) are binned per pixel
// column and each run of columns drawn as one rectangle in the colour that covers most of
// it, so the drawing's size is bounded by its width, not by the trace's slice count.
void draw_slices(std::ostringstream& svg, const Row& row, int y, int x0, double scale, int plot_w,
                 const SvgOptions& o) {
  constexpr double kMinWidth = 2.0;                    // px
  std::vector<std::map<std::string, double>> columns;  // per pixel column: colour → us
  std::vector<int> merged_per_column;
  auto fill_of = [](const Slice& s) {
    return lighten(base_colour(s.name), std::min(0.6, 0.3 * s.chunk));
  };
  for (const auto& s : row.slices) {
    const double x = x0 + s.ts * scale, w = s.dur * scale;
    if (w < kMinWidth) {
      if (columns.empty()) {
        columns.resize(static_cast<std::size_t>(plot_w) + 1);
        merged_per_column.resize(columns.size());
      }
      const auto c =
          static_cast<std::size_t>(std::clamp(static_cast<int>((x + w / 2) - x0), 0, plot_w));
      columns[c][fill_of(s)] += s.dur;
      ++merged_per_column[c];
      continue;
    }
    svg << "<rect x=\"" << x << "\" y=\"" << y + 3 << "\" width=\"" << w << "\" height=\""
        << o.row_height - 6 << "\" fill=\"" << fill_of(s)
        << "\" stroke=\"white\" stroke-width=\"0.6\"><title>" << escape_xml(s.name)
        << "</title></rect>\n";
    const std::string text = slice_text(s.name);
    if (w >= 6.0 * static_cast<double>(text.size()) + 2)
      svg << "<text x=\"" << x + w / 2 << "\" y=\"" << y + o.row_height / 2 + 4
          << "\" text-anchor=\"middle\" fill=\"white\">" << escape_xml(text) << "</text>\n";
  }
  auto dominant = [&](std::size_t c) {
    const auto& m = columns[c];
    return std::max_element(m.begin(), m.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  };
  for (std::size_t c = 0; c < columns.size();) {
    if (columns[c].empty()) {
      ++c;
      continue;
    }
    const std::string fill = dominant(c);
    std::size_t end = c;
    int merged = 0;
    while (end < columns.size() && !columns[end].empty() && dominant(end) == fill)
      merged += merged_per_column[end++];
    svg << "<rect x=\"" << x0 + static_cast<double>(c) << "\" y=\"" << y + 3 << "\" width=\""
        << end - c << "\" height=\"" << o.row_height - 6 << "\" fill=\"" << fill << "\"><title>"
        << merged << " slices narrower than " << kMinWidth << " px</title></rect>\n";
    c = end;
  }
}

}  // namespace

std::string render_trace_svg(const nlohmann::json& trace, const SvgOptions& o) {
  double t_end = 0;
  const auto rows = collect_rows(trace.at("traceEvents"), t_end);
  if (t_end <= 0) t_end = 1;
  const auto groups = group_ranks(rows);
  std::size_t drawn_rows = 0, ranks = 0;
  for (const auto& g : groups) {
    drawn_rows += g.rows.size();
    ranks += g.pids.size();
  }
  const bool collapsed = groups.size() < ranks;
  const int top = (o.title.empty() ? 16 : 40) + (collapsed ? 18 : 0);
  const int plot_w = o.width - o.label_width - 20;
  const int height = top + static_cast<int>(drawn_rows) * o.row_height + 70;
  const double scale = plot_w / t_end;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << height
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!o.title.empty())
    svg << "<text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << escape_xml(o.title)
        << "</text>\n";
  if (collapsed)
    svg << "<text x=\"10\" y=\"" << top - 8 << "\">" << ranks << " ranks drawn as " << groups.size()
        << " distinct timelines: ranks whose rows are identical up to the rank id share one "
           "row, labelled with the ranks it stands for</text>\n";
  std::size_t i = 0;
  for (const auto& g : groups) {
    const std::string label = group_label(g);
    for (const Row* row : g.rows) {
      const int y = top + static_cast<int>(i++) * o.row_height;
      svg << "<text x=\"6\" y=\"" << y + o.row_height / 2 + 4 << "\">"
          << escape_xml(label + " · " + row->thread_name);
      if (g.pids.size() > 1) svg << "<title>ranks " << id_ranges(g.pids) << "</title>";
      svg << "</text>\n";
      svg << "<rect x=\"" << o.label_width << "\" y=\"" << y + 2 << "\" width=\"" << plot_w
          << "\" height=\"" << o.row_height - 4 << "\" fill=\"#f1f1f1\"/>\n";
      draw_slices(svg, *row, y, o.label_width, scale, plot_w, o);
    }
  }
  // Time axis.
  const int axis_y = top + static_cast<int>(drawn_rows) * o.row_height + 6;
  svg << "<line x1=\"" << o.label_width << "\" y1=\"" << axis_y << "\" x2=\""
      << o.label_width + plot_w << "\" y2=\"" << axis_y << "\" stroke=\"#444\"/>\n";
  const double step = nice_step(t_end, 10);
  for (double t = 0; t <= t_end * 1.0001; t += step) {
    const double x = o.label_width + t * scale;
    svg << "<line x1=\"" << x << "\" y1=\"" << axis_y << "\" x2=\"" << x << "\" y2=\"" << axis_y + 5
        << "\" stroke=\"#444\"/><text x=\"" << x << "\" y=\"" << axis_y + 17
        << "\" text-anchor=\"middle\">" << format_time_us(t) << "</text>\n";
  }
  // Legend.
  const int ly = axis_y + 38;
  int lx = o.label_width;
  for (const auto& [label, colour] : std::vector<std::pair<std::string, std::string>>{
           {"forward", base_colour("F")},
           {"backward", base_colour("B")},
           {"weight gradients (split backward's W)", base_colour("W")},
           {"later chunks: lighter", lighten(base_colour("F"), 0.3)},
           {"communication", base_colour("reduce")},
           {"idle (bubble)", "#f1f1f1"}}) {
    svg << "<rect x=\"" << lx << "\" y=\"" << ly - 10 << "\" width=\"14\" height=\"12\" fill=\""
        << colour << "\" stroke=\"#bbb\"/><text x=\"" << lx + 19 << "\" y=\"" << ly << "\">"
        << escape_xml(label) << "</text>\n";
    lx += 30 + 7 * static_cast<int>(label.size());
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace tandem
