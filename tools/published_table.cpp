// Reading DIR/published.csv, checking it before any simulation, and comparing its rows
// with the simulator's reports (see published_table.hpp).
#include "tools/published_table.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "sim/search/search_space.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

// A table of several sets names each row's set; a table of one set may leave it out.
const std::vector<std::string> kColumns = {"scenario", "metric", "value", "unit", "set", "source"};
const std::vector<std::string> kColumnsOneSet = {"scenario", "metric", "value", "unit", "source"};

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

// Loads and validates a scenario file and its topology; returns the problem, or "", and
// the topology's name in `topology`.
std::string check_scenario_file(const std::filesystem::path& file, std::string& topology) {
  try {
    const Scenario s = load_scenario(file);
    validate(s);
    topology = s.cluster.topology.empty() ? "dgx-a100-80g" : s.cluster.topology;
    const Topology t = load_topology(topology);
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
      {"iteration_time", "s", "iteration_seconds", 1.0, false, false},
      {"hardware_tflops_per_gpu", "TFLOP/s", "hardware_tflops_per_gpu", 1.0, false, true},
      {"model_tflops_per_gpu", "TFLOP/s", "model_tflops_per_gpu", 1.0, false, true},
      {"mfu", "%", "mfu", 100.0, false, true},
      {"tokens_per_second", "tokens/s", "tokens_per_second", 1.0, false, true},
      {"memory_per_gpu", "GiB", "max_peak_memory_bytes", 1.0 / (1024.0 * 1024.0 * 1024.0), true,
       false},
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

namespace {
// DIR/searched.csv (optional): scenario,fields,source with fields space-separated.
void read_searched_knobs(const std::filesystem::path& dir, PublishedTable& table) {
  const auto file = dir / "searched.csv";
  if (!std::filesystem::exists(file)) return;
  const std::string source = file.string();
  std::ifstream in(file);
  if (!in) throw ConfigError("searched knobs", source, "cannot be opened");
  std::stringstream buf;
  buf << in.rdbuf();
  std::vector<int> lines;
  const auto records = parse_csv(buf.str(), &lines);
  const std::vector<std::string> header{"scenario", "fields", "source"};
  if (records.empty() || records[0] != header)
    throw ConfigError("line 1, header", records.empty() ? "" : records[0].front(),
                      "the header must be exactly scenario,fields,source");
  std::vector<Violation> problems;
  for (std::size_t r = 1; r < records.size(); ++r) {
    const auto& f = records[r];
    const int line = lines[r];
    if (f.size() != 3) {
      problems.push_back({where(line, "row"), std::to_string(f.size()) + " fields",
                          "a row needs 3 fields (quote a source that holds commas)"});
      continue;
    }
    if (!table.scenario_files.count(f[0])) {
      problems.push_back({where(line, "scenario"), f[0], "is not a scenario of published.csv"});
      continue;
    }
    if (table.searched.count(f[0])) {
      problems.push_back({where(line, "scenario"), f[0], "each scenario may appear once"});
      continue;
    }
    SearchedKnobs knobs;
    knobs.source = f[2];
    std::stringstream words(f[1]);
    for (std::string w; words >> w;) {
      try {
        sim::search::SearchSpace probe;
        sim::search::only(probe, Scenario{}, {w});
        knobs.fields.push_back(w);
      } catch (const ConfigError&) {
        problems.push_back({where(line, "fields"), w,
                            "is not a field tandem search searches (tp, pp, cp, vp, mbs, "
                            "recompute, sp, distopt, overlap_grad, overlap_param, order, "
                            "schedule, precision, or the Megatron names)"});
      }
    }
    if (knobs.fields.empty() && f[1].find_first_not_of(' ') == std::string::npos)
      problems.push_back({where(line, "fields"), f[1], "names no field to search"});
    if (knobs.source.empty())
      problems.push_back({where(line, "source"), "", "must say what the publication leaves out"});
    table.searched[f[0]] = knobs;
  }
  if (!problems.empty()) throw ConfigError(std::move(problems), source);
}
}  // namespace

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
  if (records.empty() || (records[0] != kColumns && records[0] != kColumnsOneSet)) {
    std::string header;
    if (!records.empty())
      for (const auto& f : records[0]) header += (header.empty() ? "" : ",") + f;
    throw ConfigError({{"line 1, header", header,
                        "the header must be exactly scenario,metric,value,unit,set,source "
                        "(or scenario,metric,value,unit,source for a table of one set)"}},
                      source);
  }
  const bool with_set = records[0] == kColumns;
  const std::size_t columns = records[0].size();
  std::set<std::pair<std::string, std::string>> seen;
  std::map<std::string, std::string> checked;  // scenario → problem ("" = fine)
  for (std::size_t r = 1; r < records.size(); ++r) {
    const auto& f = records[r];
    const int line = lines[r];
    if (f.size() != columns) {
      problems.push_back({where(line, "row"), std::to_string(f.size()) + " fields",
                          "a row needs " + std::to_string(columns) +
                              " fields (quote a source that holds commas)"});
      continue;
    }
    PublishedRow row{line, f[0], f[1], f[3], f[columns - 1], 0};
    bool ok = true;
    if (with_set) {
      row.set = f[4];
      if (!is_plain_name(row.set)) {
        problems.push_back(
            {where(line, "set"), row.set,
             "must name the paper or table the row is from (letters, digits, - _ .)"});
        ok = false;
      }
    }
    if (!is_plain_name(row.scenario)) {
      problems.push_back({where(line, "scenario"), row.scenario,
                          "must name a scenario file in the folder (letters, digits, - _ .)"});
      ok = false;
    } else if (!checked.count(row.scenario)) {
      const auto file = dir / (row.scenario + ".json");
      std::string topology;
      checked[row.scenario] = std::filesystem::is_regular_file(file)
                                  ? check_scenario_file(file, topology)
                                  : "no such scenario: " + file.string() + " does not exist";
      table.scenario_topology[row.scenario] = topology;
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
  read_searched_knobs(dir, table);
  return table;
}

PublishedTable select_sets(const PublishedTable& table, const std::vector<std::string>& sets) {
  if (sets.empty()) return table;
  std::set<std::string> known;
  for (const auto& row : table.rows) known.insert(row.set);
  std::vector<Violation> problems;
  for (const auto& name : sets)
    if (!known.count(name)) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      problems.push_back(
          {"--set", name, "is not a set of " + table.csv.string() + " (" + names + ")"});
    }
  if (!problems.empty()) throw ConfigError(std::move(problems));
  PublishedTable out = table;
  out.rows.clear();
  out.scenario_files.clear();
  out.searched.clear();
  for (const auto& row : table.rows)
    if (std::find(sets.begin(), sets.end(), row.set) != sets.end()) {
      out.rows.push_back(row);
      out.scenario_files[row.scenario] = table.scenario_files.at(row.scenario);
      if (auto it = table.searched.find(row.scenario); it != table.searched.end())
        out.searched[row.scenario] = it->second;
    }
  return out;
}

std::map<std::string, std::vector<FittedOnSet>> fitted_parameters(const PublishedTable& table) {
  std::set<std::string> topologies;
  for (const auto& row : table.rows) {
    const auto it = table.scenario_topology.find(row.scenario);
    if (it != table.scenario_topology.end() && !it->second.empty()) topologies.insert(it->second);
  }
  std::map<std::string, std::vector<FittedOnSet>> out;
  for (const auto& name : topologies) {
    const Topology t = load_topology(name);
    for (const auto& [parameter, fitted] : t.fitted_on)
      out[fitted.set].push_back({t.name, parameter, fitted.rows});
  }
  return out;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double nearest_rank_p95(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(values.size())));
  return values[std::max<std::size_t>(rank, 1) - 1];
}

MetricSummary summarise(const std::vector<double>& errors) {
  if (errors.empty()) return {};
  std::vector<double> abs_errors(errors.size());
  std::transform(errors.begin(), errors.end(), abs_errors.begin(),
                 [](double e) { return std::abs(e); });
  return {.rows = static_cast<int>(errors.size()),
          .median_abs_error_percent = median(abs_errors),
          .p95_abs_error_percent = nearest_rank_p95(abs_errors),
          .max_abs_error_percent = *std::max_element(abs_errors.begin(), abs_errors.end()),
          .median_error_percent = median(errors),
          .below_zero = static_cast<int>(
              std::count_if(errors.begin(), errors.end(), [](double e) { return e < 0; }))};
}

nlohmann::json summary_json(const MetricSummary& s) {
  return {{"rows", s.rows},
          {"median_abs_error_percent", s.median_abs_error_percent},
          {"p95_abs_error_percent", s.p95_abs_error_percent},
          {"max_abs_error_percent", s.max_abs_error_percent},
          {"median_error_percent", s.median_error_percent},
          {"rows_below_zero", s.below_zero}};
}

ValidationResult compare_with_reports(const PublishedTable& table,
                                      const std::map<std::string, nlohmann::json>& reports,
                                      const ValidationTarget& target) {
  ValidationResult result;
  result.target = target;
  std::map<std::string, std::vector<double>> errors, set_errors;
  std::vector<double> all;
  bool target_complete = true;
  std::map<std::string, double> published_time;  // scenarios with an iteration_time row
  for (const auto& p : table.rows)
    if (p.metric == "iteration_time") published_time[p.scenario] = p.value;
  for (const auto& p : table.rows) {
    const MetricSpec& spec = *find_metric(p.metric);
    ValidationRow row{p, std::nullopt, std::nullopt, std::nullopt, spec.informational};
    const auto timed = published_time.find(p.scenario);
    row.counted = !spec.informational && !(spec.throughput && timed != published_time.end());
    const auto it = reports.find(p.scenario);
    if (it != reports.end() && it->second.contains(spec.report_key)) {
      row.predicted = it->second.at(spec.report_key).get<double>() * spec.scale;
      row.error_percent = (*row.predicted - p.value) / p.value * 100.0;
      if (spec.throughput && timed != published_time.end() && *row.predicted > 0 &&
          it->second.contains("iteration_seconds")) {
        const double predicted_time = it->second.at("iteration_seconds").get<double>();
        if (predicted_time > 0)
          row.work_ratio = p.value * timed->second / (*row.predicted * predicted_time);
      }
      errors[p.metric].push_back(*row.error_percent);
      if (!spec.informational) {
        row.time_error_percent =
            spec.throughput ? (*row.predicted > 0 ? (p.value / *row.predicted - 1) * 100.0
                                                  : std::numeric_limits<double>::infinity())
                            : *row.error_percent;
        if (row.counted) {
          set_errors[p.set].push_back(*row.time_error_percent);
          all.push_back(*row.time_error_percent);
        }
      }
    } else if (row.counted) {
      target_complete = false;
    }
    result.rows.push_back(row);
  }
  for (const auto& [metric, signed_errors] : errors)
    result.summary[metric] = summarise(signed_errors);
  bool sets_met = true;
  for (const auto& [set, signed_errors] : set_errors) {
    result.sets[set] = summarise(signed_errors);
    sets_met = sets_met &&
               result.sets[set].median_abs_error_percent <= target.set_median_abs_error_percent;
  }
  result.overall = summarise(all);
  result.target_met = target_complete && !all.empty() && sets_met &&
                      result.overall.median_abs_error_percent <= target.median_abs_error_percent &&
                      result.overall.max_abs_error_percent <= target.max_abs_error_percent;
  return result;
}

namespace {

// Columns padded to their widest cell; the first `left` columns (and the last when
// `last_left`) left-aligned, the rest right-aligned.
std::string aligned(const std::vector<std::vector<std::string>>& cells, std::size_t left,
                    bool last_left) {
  std::vector<std::size_t> width(cells.front().size(), 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  for (const auto& row : cells) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool l = c < left || (last_left && c + 1 == row.size());
      line += (c ? "  " : "") + (l ? row[c] + pad : pad + row[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  return out.str();
}

// Whether a throughput row's published work per iteration stands too far from its scenario's.
bool work_is_off(const ValidationRow& row) {
  return row.work_ratio && std::abs(*row.work_ratio - 1) > kWorkRatioTolerance;
}

// "3.0 % above" / "2.5 % below": a work ratio as the published run's difference.
std::string work_difference(double ratio) {
  return fixed(std::abs(ratio - 1) * 100, 1) + (ratio > 1 ? " % above" : " % below");
}

// A set's row of the iteration-time table: |error| median, p95 and max, then which way it
// leans (the signed median, and how many rows are predicted fast).
std::vector<std::string> summary_cells(const std::string& name, const MetricSummary& s) {
  return {name,
          std::to_string(s.rows),
          fixed(s.median_abs_error_percent, 1),
          fixed(s.p95_abs_error_percent, 1),
          fixed(s.max_abs_error_percent, 1),
          fixed(s.median_error_percent, 1),
          std::to_string(s.below_zero) + " of " + std::to_string(s.rows)};
}

// The counted rows of the sets no preset parameter was fitted on: how the model does on
// what it never saw, the figure a fit cannot flatter.
MetricSummary unfitted_sets(const ValidationResult& r,
                            const std::map<std::string, std::vector<FittedOnSet>>& fitted) {
  std::vector<double> errors;
  for (const auto& row : r.rows)
    if (row.counted && row.time_error_percent && !fitted.count(row.published.set))
      errors.push_back(*row.time_error_percent);
  return summarise(errors);
}

}  // namespace

std::string format_validation(const ValidationResult& r,
                              const std::map<std::string, std::vector<FittedOnSet>>& fitted) {
  const bool several_sets = r.sets.size() > 1;
  std::vector<std::vector<std::string>> cells{
      {"scenario", "metric", "unit", "published", "predicted", "error %", "time error %", ""}};
  if (several_sets) cells[0].insert(cells[0].begin(), "set");
  for (const auto& row : r.rows) {
    std::vector<std::string> line{row.published.scenario,
                                  row.published.metric,
                                  row.published.unit,
                                  readable(row.published.value),
                                  row.predicted ? readable(*row.predicted) : "failed",
                                  row.error_percent ? fixed(*row.error_percent, 1) : "-",
                                  row.time_error_percent ? fixed(*row.time_error_percent, 1) : "-",
                                  row.informational ? "(informational)"
                                  : row.counted     ? ""
                                                    : "(the same run as its time row)"};
    if (work_is_off(row))
      line.back() += " (its published work per iteration " + work_difference(*row.work_ratio) +
                     " the scenario's)";
    if (several_sets) line.insert(line.begin(), row.published.set);
    cells.push_back(line);
  }
  std::ostringstream out;
  out << aligned(cells, several_sets ? 4 : 3, true) << "\n";
  std::string off_rows;
  int off = 0;
  for (const auto& row : r.rows)
    if (work_is_off(row)) {
      off_rows += (off++ ? ", " : "") + row.published.scenario + " " + row.published.metric + " (" +
                  work_difference(*row.work_ratio) + ")";
    }
  if (off > 0)
    out << "throughput × time: " << off << " row(s) imply a work per iteration more than "
        << fixed(kWorkRatioTolerance * 100, 0)
        << " % from their scenario's (its dimensions or batch are not the measured run's, or "
           "the source counts FLOPs another way): "
        << off_rows << "\n";
  for (const auto& [metric, s] : r.summary)
    out << metric << ": " << s.rows << " row(s), median |error| "
        << fixed(s.median_abs_error_percent, 1) << " %, max |error| "
        << fixed(s.max_abs_error_percent, 1) << " %\n";
  out << "\nIteration time (throughputs as the time they imply), |error| % and which way it "
         "leans (the signed median; fast: rows predicted faster than measured):\n";
  std::vector<std::vector<std::string>> sets{
      {"set", "rows", "median", "p95", "max", "signed", "fast", "preset parameters fitted on it"}};
  for (const auto& [set, s] : r.sets) {
    auto line = summary_cells(set, s);
    std::string names;
    if (const auto it = fitted.find(set); it != fitted.end())
      for (const auto& f : it->second)
        names += (names.empty() ? "" : ", ") + f.topology + " " + f.parameter;
    line.push_back(names.empty() ? "none" : names);
    sets.push_back(line);
  }
  auto all = summary_cells("all sets", r.overall);
  all.push_back("");
  sets.push_back(all);
  if (const MetricSummary unseen = unfitted_sets(r, fitted);
      unseen.rows > 0 && unseen.rows < r.overall.rows) {
    auto line = summary_cells("sets nothing was fitted on", unseen);
    line.push_back("");
    sets.push_back(line);
  }
  out << aligned(sets, 1, true);
  for (const auto& [set, list] : fitted) {
    if (r.sets.count(set)) continue;
    std::string names;
    for (const auto& f : list)
      names += (names.empty() ? "" : ", ") + f.topology + " " + f.parameter;
    out << "(fitted on " << set << ", not in this table: " << names << ")\n";
  }
  auto bound = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  out << "target: median ≤ " << bound(r.target.median_abs_error_percent) << " %, max ≤ "
      << bound(r.target.max_abs_error_percent) << " % over all sets, each set's median ≤ "
      << bound(r.target.set_median_abs_error_percent) << " %: " << (r.target_met ? "met" : "MISSED")
      << "\n";
  return out.str();
}

nlohmann::json to_json(const ValidationResult& r,
                       const std::map<std::string, std::vector<FittedOnSet>>& fitted) {
  auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows)
    rows.push_back({{"scenario", row.published.scenario},
                    {"set", row.published.set},
                    {"metric", row.published.metric},
                    {"unit", row.published.unit},
                    {"published", row.published.value},
                    {"predicted", optional(row.predicted)},
                    {"error_percent", optional(row.error_percent)},
                    {"time_error_percent", optional(row.time_error_percent)},
                    {"informational", row.informational},
                    {"counted", row.counted},
                    {"work_ratio", optional(row.work_ratio)},
                    {"source", row.published.source}});
  nlohmann::json summary = nlohmann::json::object();
  for (const auto& [metric, s] : r.summary) summary[metric] = summary_json(s);
  nlohmann::json sets = nlohmann::json::object();
  for (const auto& [set, s] : r.sets) sets[set] = summary_json(s);
  nlohmann::json fitted_json = nlohmann::json::object();
  for (const auto& [set, list] : fitted)
    for (const auto& f : list)
      fitted_json[set].push_back(
          {{"topology", f.topology}, {"parameter", f.parameter}, {"rows", f.rows}});
  return {{"rows", rows},
          {"summary", summary},
          {"sets", sets},
          {"overall", summary_json(r.overall)},
          {"unfitted_sets", summary_json(unfitted_sets(r, fitted))},
          {"fitted_on", fitted_json},
          {"target",
           {{"median_abs_error_percent", r.target.median_abs_error_percent},
            {"max_abs_error_percent", r.target.max_abs_error_percent},
            {"set_median_abs_error_percent", r.target.set_median_abs_error_percent}}},
          {"target_met", r.target_met}};
}

}  // namespace tandem::cli
