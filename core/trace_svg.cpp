#include "core/trace_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>

namespace tandem {
namespace {

struct Row {
  std::int64_t pid, tid;
  int process_sort = 0, thread_sort = 0;
  std::string process_name, thread_name;
  std::vector<const nlohmann::json*> slices;
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
      row.slices.push_back(&e);
      t_end = std::max(t_end, e.value("ts", 0.0) + e.value("dur", 0.0));
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

}  // namespace

std::string render_trace_svg(const nlohmann::json& trace, const SvgOptions& o) {
  double t_end = 0;
  const auto rows = collect_rows(trace.at("traceEvents"), t_end);
  if (t_end <= 0) t_end = 1;
  const int top = o.title.empty() ? 16 : 40;
  const int plot_w = o.width - o.label_width - 20;
  const int height = top + static_cast<int>(rows.size()) * o.row_height + 70;
  const double scale = plot_w / t_end;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << height
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!o.title.empty())
    svg << "<text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << escape_xml(o.title)
        << "</text>\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const int y = top + static_cast<int>(i) * o.row_height;
    svg << "<text x=\"6\" y=\"" << y + o.row_height / 2 + 4 << "\">"
        << escape_xml(row.process_name + " · " + row.thread_name) << "</text>\n";
    svg << "<rect x=\"" << o.label_width << "\" y=\"" << y + 2 << "\" width=\"" << plot_w
        << "\" height=\"" << o.row_height - 4 << "\" fill=\"#f1f1f1\"/>\n";
    for (const auto* e : row.slices) {
      const std::string name = e->value("name", "");
      const double x = o.label_width + e->value("ts", 0.0) * scale;
      const double w = std::max(0.5, e->value("dur", 0.0) * scale);
      int chunk = 0;
      if (e->contains("args") && (*e)["args"].contains("chunk")) chunk = (*e)["args"]["chunk"];
      const std::string fill = lighten(base_colour(name), std::min(0.6, 0.3 * chunk));
      svg << "<rect x=\"" << x << "\" y=\"" << y + 3 << "\" width=\"" << w << "\" height=\""
          << o.row_height - 6 << "\" fill=\"" << fill
          << "\" stroke=\"white\" stroke-width=\"0.6\"><title>" << escape_xml(name)
          << "</title></rect>\n";
      const std::string text = slice_text(name);
      if (w >= 6.0 * static_cast<double>(text.size()) + 2)
        svg << "<text x=\"" << x + w / 2 << "\" y=\"" << y + o.row_height / 2 + 4
            << "\" text-anchor=\"middle\" fill=\"white\">" << escape_xml(text) << "</text>\n";
    }
  }
  // Time axis.
  const int axis_y = top + static_cast<int>(rows.size()) * o.row_height + 6;
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
