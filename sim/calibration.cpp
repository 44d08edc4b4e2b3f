// Calibration tables: JSON decoding with every broken rule collected, encoding, and the
// file round trip (written atomically through a temporary name).
#include "sim/calibration.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "sim/calibration_check.hpp"

namespace tandem::sim {
namespace {

using nlohmann::json;
using Violations = std::vector<Violation>;

std::string shown(const json& v) {
  std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16", "int32", "int64"};
  return names;
}

std::string unknown_key_rule(const std::string& key, const std::vector<std::string>& known) {
  const std::string best = closest_match(key, known);
  return best.empty() ? "unknown key" : "unknown key; did you mean \"" + best + "\"?";
}

// Reads a non-negative integer field of a row; `min` is 0 for sizes and 1 for batch.
std::int64_t read_size(const json& row, const std::string& where, const char* key, std::int64_t min,
                       std::int64_t fallback, Violations& out) {
  const auto it = row.find(key);
  if (it == row.end()) return fallback;
  const std::string field = where + "." + key;
  if (!it->is_number_integer()) {
    out.push_back({field, shown(*it), "must be an integer"});
    return fallback;
  }
  const auto v = it->get<std::int64_t>();
  if (v < min) out.push_back({field, shown(*it), "must be ≥ " + std::to_string(min)});
  return v;
}

CalibrationRow read_row(const json& row, const std::string& where, Violations& out) {
  CalibrationRow r;
  if (!row.is_object()) {
    out.push_back({where, shown(row),
                   "must be a JSON object {op, dtype, m, n, k, batch, seconds, flops, bytes}"});
    return r;
  }
  static const std::vector<std::string> keys = {
      "op",      "dtype", "m",     "n",           "k",           "batch",
      "seconds", "flops", "bytes", "min_seconds", "max_seconds", "repetitions"};
  for (const auto& [key, value] : row.items())
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      out.push_back({where + "." + key, shown(value), unknown_key_rule(key, keys)});

  if (const auto it = row.find("op"); it == row.end()) {
    out.push_back({where + ".op", "", "is required"});
  } else if (!it->is_string()) {
    out.push_back({where + ".op", shown(*it), "must be a string naming a Device op"});
  } else {
    r.op = it->get<std::string>();
    const auto& ops = device_op_names();
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) {
      const std::string best = closest_match(r.op, ops);
      out.push_back({where + ".op", r.op,
                     best.empty() ? "is not a Device op"
                                  : "is not a Device op; did you mean \"" + best + "\"?"});
    }
  }
  if (const auto it = row.find("dtype"); it != row.end()) {
    const auto& names = dtype_names();
    if (!it->is_string() ||
        std::find(names.begin(), names.end(), it->get<std::string>()) == names.end())
      out.push_back(
          {where + ".dtype", shown(*it), "must be one of fp32 | bf16 | fp16 | int32 | int64"});
    else
      r.dtype = parse_dtype(it->get<std::string>());
  }
  r.m = read_size(row, where, "m", 0, 0, out);
  r.n = read_size(row, where, "n", 0, 0, out);
  r.k = read_size(row, where, "k", 0, 0, out);
  r.batch = read_size(row, where, "batch", 1, 1, out);
  if (const auto it = row.find("seconds"); it == row.end()) {
    out.push_back({where + ".seconds", "", "is required"});
  } else if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
    out.push_back({where + ".seconds", shown(*it), "must be a finite number > 0"});
  } else {
    r.seconds = it->get<double>();
  }
  for (const char* key : {"flops", "bytes"}) {
    const auto it = row.find(key);
    if (it == row.end()) continue;
    if (!it->is_number() || !(it->get<double>() >= 0) || !std::isfinite(it->get<double>()))
      out.push_back({where + "." + key, shown(*it), "must be a finite number ≥ 0"});
    else
      (std::string_view(key) == "flops" ? r.flops : r.bytes) = it->get<double>();
  }
  // The spread of the repetitions, when the table records it: min ≤ seconds ≤ max.
  r.repetitions = read_size(row, where, "repetitions", 1, 0, out);
  for (const char* key : {"min_seconds", "max_seconds"}) {
    const auto it = row.find(key);
    if (it == row.end()) continue;
    const bool is_min = std::string_view(key) == "min_seconds";
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>()))
      out.push_back({where + "." + key, shown(*it), "must be a finite number > 0"});
    else if (r.seconds > 0 &&
             (is_min ? it->get<double>() > r.seconds : it->get<double>() < r.seconds))
      out.push_back({where + "." + key, shown(*it),
                     is_min ? "must be ≤ seconds (the median)" : "must be ≥ seconds (the median)"});
    else
      (is_min ? r.min_seconds : r.max_seconds) = it->get<double>();
  }
  return r;
}

}  // namespace

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::fp32, DType::bf16, DType::fp16, DType::int32, DType::int64})
    if (dtype_name(t) == name) return t;
  throw std::invalid_argument("unknown dtype \"" + std::string(name) + "\"");
}

CalibrationTable parse_calibration(const nlohmann::json& j, std::string_view source) {
  Violations out;
  CalibrationTable t;
  if (!j.is_object())
    throw ConfigError({{"calibration", shown(j), "must be a JSON object {gpu, source, rows}"}},
                      std::string(source));
  static const std::vector<std::string> keys = {"gpu", "source", "rows"};
  for (const auto& [key, value] : j.items())
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      out.push_back({key, shown(value), unknown_key_rule(key, keys)});
  for (const char* key : {"gpu", "source"}) {
    if (!j.contains(key)) continue;
    if (!j.at(key).is_string())
      out.push_back({key, shown(j.at(key)), "must be a string"});
    else
      (std::string_view(key) == "gpu" ? t.gpu : t.source) = j.at(key).get<std::string>();
  }
  if (!j.contains("rows")) {
    out.push_back({"rows", "", "is required (a list of measured ops)"});
  } else if (!j.at("rows").is_array()) {
    out.push_back(
        {"rows", shown(j.at("rows")), "must be a list of {op, dtype, m, n, k, batch, seconds}"});
  } else {
    const json& rows = j.at("rows");
    for (std::size_t i = 0; i < rows.size(); ++i)
      t.rows.push_back(read_row(rows[i], "rows[" + std::to_string(i) + "]", out));
  }
  if (!out.empty()) throw ConfigError(std::move(out), std::string(source));
  check_calibration_bounds(t, source);  // physical bounds (calibration_check.hpp)
  return t;
}

nlohmann::json to_json(const CalibrationTable& t) {
  json rows = json::array();
  for (const auto& r : t.rows) {
    rows.push_back({{"op", r.op},
                    {"dtype", std::string(dtype_name(r.dtype))},
                    {"m", r.m},
                    {"n", r.n},
                    {"k", r.k},
                    {"batch", r.batch},
                    {"seconds", r.seconds}});
    if (r.flops > 0) rows.back()["flops"] = r.flops;
    if (r.bytes > 0) rows.back()["bytes"] = r.bytes;
    if (r.min_seconds > 0) rows.back()["min_seconds"] = r.min_seconds;
    if (r.max_seconds > 0) rows.back()["max_seconds"] = r.max_seconds;
    if (r.repetitions > 0) rows.back()["repetitions"] = r.repetitions;
  }
  json j = {{"rows", rows}};
  if (!t.gpu.empty()) j["gpu"] = t.gpu;
  if (!t.source.empty()) j["source"] = t.source;
  return j;
}

CalibrationTable load_calibration(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw ConfigError(where, "", "no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(where, "", std::string("cannot be read: ") + std::strerror(errno));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError(where, "byte " + std::to_string(e.byte),
                      std::string("is not valid JSON: ") + e.what());
  } catch (const json::out_of_range& e) {  // a number beyond double, as 1e309
    throw ConfigError(where, "", std::string("is not valid JSON: ") + e.what());
  }
  return parse_calibration(j, where);
}

void save_calibration(const CalibrationTable& t, const std::filesystem::path& path) {
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw std::runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
    out << to_json(t).dump(2) << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace tandem::sim
