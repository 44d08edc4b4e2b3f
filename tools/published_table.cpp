// Reading DIR/published.csv, checking it before any simulation, and comparing its rows
// with the simulator's reports (see published_table.hpp).
#include "tools/published_table.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

const std::vector<std::string> kColumns = {"scenario", "metric", "value", "unit", "source"};

std::string where(int line, const std::string& column) {
  return "line " + std::to_string(line) + ", " + column;
}

std::optional<double> parse_number(const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

bool is_plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

const MetricSpec* find_metric(const std::string& name) {
  for (const auto& m : published_metrics())
    if (m.name == name) return &m;
  return nullptr;
}

std::string metric_names() {
  std::string out;
  for (const auto& m : published_metrics()) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

// Loads and validates a scenario file and its topology; returns the problem, or "".
std::string check_scenario_file(const std::filesystem::path& file) {
  try {
    const Scenario s = load_scenario(file);
    validate(s);
    const Topology t =
        load_topology(s.cluster.topology.empty() ? "dgx-a100-80g" : s.cluster.topology);
    if (t.node.gpus_per_node != s.cluster.gpus_per_node)
      return "cluster.gpus_per_node = " + std::to_string(s.cluster.gpus_per_node) +
             " but the topology " + t.name + " has " + std::to_string(t.node.gpus_per_node);
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// About four significant digits without an exponent: 0.03381, 1.375, 18.93, 152.5.
std::string readable(double v) {
  const double a = std::abs(v);
  return fixed(v, a >= 100 ? 1 : a >= 10 ? 2 : a >= 1 ? 3 : a >= 0.01 ? 5 : 7);
}

}  // namespace

const std::vector<MetricSpec>& published_metrics() {
  static const std::vector<MetricSpec> metrics = {
      {"iteration_time", "s", "iteration_seconds", 1.0, false},
      {"hardware_tflops_per_gpu", "TFLOP/s", "hardware_tflops_per_gpu", 1.0, false},
      {"model_tflops_per_gpu", "TFLOP/s", "model_tflops_per_gpu", 1.0, false},
      {"mfu", "%", "mfu", 100.0, false},
      {"tokens_per_second", "tokens/s", "tokens_per_second", 1.0, false},
      {"memory_per_gpu", "GiB", "max_peak_memory_bytes", 1.0 / (1024.0 * 1024.0 * 1024.0), true},
  };
  return metrics;
}

std::vector<std::vector<std::string>> parse_csv(std::string_view text, std::vector<int>* lines) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, field_started = false;
  int line = 1, record_line = 1;
  auto end_record = [&] {
    record.push_back(field);
    const bool blank = record.size() == 1 && record[0].empty() && !field_started;
    if (!blank) {
      records.push_back(record);
      if (lines) lines->push_back(record_line);
    }
    record.clear();
    field.clear();
    field_started = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      field_started = true;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
      field_started = true;
    } else if (c == '\r') {
      continue;
    } else if (c == '\n') {
      end_record();
      record_line = ++line;
    } else {
      field += c;
      field_started = true;
    }
  }
  if (!field.empty() || !record.empty() || field_started) end_record();
  return records;
}

PublishedTable read_published_table(const std::filesystem::path& dir) {
  PublishedTable table;
  table.csv = dir / "published.csv";
  const std::string source = table.csv.string();
  std::ifstream in(table.csv);
  if (!in) throw ConfigError("published table", source, "cannot be opened");
  std::stringstream buf;
  buf << in.rdbuf();
  std::vector<int> lines;
  const auto records = parse_csv(buf.str(), &lines);
  std::vector<Violation> problems;
  if (records.empty() || records[0] != kColumns) {
    std::string header;
    if (!records.empty())
      for (const auto& f : records[0]) header += (header.empty() ? "" : ",") + f;
    throw ConfigError({{"line 1, header", header,
                        "the header must be exactly scenario,metric,value,unit,source"}},
                      source);
  }
  std::set<std::pair<std::string, std::string>> seen;
  std::map<std::string, std::string> checked;  // scenario → problem ("" = fine)
  for (std::size_t r = 1; r < records.size(); ++r) {
    const auto& f = records[r];
    const int line = lines[r];
    if (f.size() != kColumns.size()) {
      problems.push_back({where(line, "row"), std::to_string(f.size()) + " fields",
                          "a row needs 5 fields (quote a source that holds commas)"});
      continue;
    }
    PublishedRow row{line, f[0], f[1], f[3], f[4], 0};
    bool ok = true;
    if (!is_plain_name(row.scenario)) {
      problems.push_back({where(line, "scenario"), row.scenario,
                          "must name a scenario file in the folder (letters, digits, - _ .)"});
      ok = false;
    } else if (!checked.count(row.scenario)) {
      const auto file = dir / (row.scenario + ".json");
      checked[row.scenario] = std::filesystem::is_regular_file(file)
                                  ? check_scenario_file(file)
                                  : "no such scenario: " + file.string() + " does not exist";
      table.scenario_files[row.scenario] = file;
    }
    if (ok && !checked[row.scenario].empty()) {
      problems.push_back({where(line, "scenario"), row.scenario, checked[row.scenario]});
      ok = false;
    }
    const MetricSpec* spec = find_metric(row.metric);
    if (!spec) {
      problems.push_back({where(line, "metric"), row.metric, "must be one of " + metric_names()});
      ok = false;
    } else if (row.unit != spec->unit) {
      problems.push_back(
          {where(line, "unit"), row.unit, "the unit of " + spec->name + " must be " + spec->unit});
      ok = false;
    }
    const auto value = parse_number(f[2]);
    if (!value || *value <= 0) {
      problems.push_back({where(line, "value"), f[2], "must be a positive number"});
      ok = false;
    } else {
      row.value = *value;
    }
    if (!seen.insert({row.scenario, row.metric}).second) {
      problems.push_back({where(line, "metric"), row.scenario + " " + row.metric,
                          "each (scenario, metric) may appear once"});
      ok = false;
    }
    if (ok) table.rows.push_back(row);
  }
  if (problems.empty() && table.rows.empty())
    problems.push_back({"rows", "", "the table has no rows below its header"});
  if (!problems.empty()) throw ConfigError(std::move(problems), source);
  return table;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

ValidationResult compare_with_reports(const PublishedTable& table,
                                      const std::map<std::string, nlohmann::json>& reports,
                                      const ValidationTarget& target) {
  ValidationResult result;
  result.target = target;
  std::map<std::string, std::vector<double>> errors;
  bool target_complete = true;
  for (const auto& p : table.rows) {
    const MetricSpec& spec = *find_metric(p.metric);
    ValidationRow row{p, std::nullopt, std::nullopt, spec.informational};
    const auto it = reports.find(p.scenario);
    if (it != reports.end() && it->second.contains(spec.report_key)) {
      row.predicted = it->second.at(spec.report_key).get<double>() * spec.scale;
      row.error_percent = (*row.predicted - p.value) / p.value * 100.0;
      errors[p.metric].push_back(std::abs(*row.error_percent));
    } else if (p.metric == result.target.metric) {
      target_complete = false;
    }
    result.rows.push_back(row);
  }
  for (const auto& [metric, abs_errors] : errors)
    result.summary[metric] = {static_cast<int>(abs_errors.size()), median(abs_errors),
                              *std::max_element(abs_errors.begin(), abs_errors.end())};
  const auto t = result.summary.find(result.target.metric);
  result.target_met =
      target_complete && t != result.summary.end() &&
      t->second.median_abs_error_percent <= result.target.median_abs_error_percent &&
      t->second.max_abs_error_percent <= result.target.max_abs_error_percent;
  return result;
}

std::string format_validation(const ValidationResult& r) {
  std::vector<std::vector<std::string>> cells{
      {"scenario", "metric", "unit", "published", "predicted", "error %", ""}};
  for (const auto& row : r.rows)
    cells.push_back({row.published.scenario, row.published.metric, row.published.unit,
                     readable(row.published.value),
                     row.predicted ? readable(*row.predicted) : "failed",
                     row.error_percent ? fixed(*row.error_percent, 1) : "-",
                     row.informational ? "(informational)" : ""});
  std::vector<std::size_t> width(cells.front().size(), 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  for (const auto& row : cells) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool left = c < 3 || c == 6;  // names left-aligned, numbers right-aligned
      line += (c ? "  " : "") + (left ? row[c] + pad : pad + row[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  out << "\n";
  for (const auto& [metric, s] : r.summary) {
    const bool target = metric == r.target.metric;
    out << metric << ": " << s.rows << " row(s), median |error| "
        << fixed(s.median_abs_error_percent, 1) << " %, max |error| "
        << fixed(s.max_abs_error_percent, 1) << " %";
    if (target)
      out << " — target median ≤ " << fixed(r.target.median_abs_error_percent, 0) << " %, max ≤ "
          << fixed(r.target.max_abs_error_percent, 0)
          << " %: " << (r.target_met ? "met" : "MISSED");
    else
      out << " (no target)";
    out << "\n";
  }
  if (!r.summary.count(r.target.metric))
    out << r.target.metric << ": no prediction — target MISSED\n";
  return out.str();
}

nlohmann::json to_json(const ValidationResult& r) {
  auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows)
    rows.push_back({{"scenario", row.published.scenario},
                    {"metric", row.published.metric},
                    {"unit", row.published.unit},
                    {"published", row.published.value},
                    {"predicted", optional(row.predicted)},
                    {"error_percent", optional(row.error_percent)},
                    {"informational", row.informational},
                    {"source", row.published.source}});
  nlohmann::json summary = nlohmann::json::object();
  for (const auto& [metric, s] : r.summary)
    summary[metric] = {{"rows", s.rows},
                       {"median_abs_error_percent", s.median_abs_error_percent},
                       {"max_abs_error_percent", s.max_abs_error_percent}};
  return {{"rows", rows},
          {"summary", summary},
          {"target",
           {{"metric", r.target.metric},
            {"median_abs_error_percent", r.target.median_abs_error_percent},
            {"max_abs_error_percent", r.target.max_abs_error_percent}}},
          {"target_met", r.target_met}};
}

}  // namespace tandem::cli
