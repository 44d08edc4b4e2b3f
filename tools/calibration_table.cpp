// OpDesc → OpShape, OpTiming → CalibrationRow and trace op slices → OpTiming; see
// calibration_table.hpp.
#include "tools/calibration_table.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.hpp"
#include "exec/calibrate/measure_op.hpp"

namespace tandem::cli {

calibrate::OpShape op_shape_of(const sim::OpDesc& op) {
  return {.op = std::string(op.op),
          .dtype = op.dtype,
          .m = op.m,
          .n = op.n,
          .k = op.k,
          .batch = op.batch,
          .flops = op.flops,
          .bytes = op.bytes};
}

std::vector<calibrate::OpShape> op_shapes_of(std::span<const sim::IssuedOp> ops) {
  std::vector<calibrate::OpShape> out;
  out.reserve(ops.size());
  for (const auto& issued : ops) out.push_back(op_shape_of(issued.op));
  return out;
}

sim::CalibrationTable calibration_table_of(std::span<const calibrate::OpTiming> timings,
                                           std::string gpu, std::string source) {
  sim::CalibrationTable table{.gpu = std::move(gpu), .source = std::move(source), .rows = {}};
  table.rows.reserve(timings.size());
  for (const auto& t : timings)
    table.rows.push_back({.op = t.shape.op,
                          .dtype = t.shape.dtype,
                          .m = t.shape.m,
                          .n = t.shape.n,
                          .k = t.shape.k,
                          .batch = t.shape.batch,
                          .seconds = t.seconds,
                          .flops = t.shape.flops,
                          .bytes = t.shape.bytes,
                          .min_seconds = t.min_seconds,
                          .max_seconds = t.max_seconds,
                          .repetitions = t.repetitions});
  return table;
}

namespace {

[[noreturn]] void reject(std::string field, std::string value, std::string rule,
                         std::string_view source) {
  throw ConfigError({{std::move(field), std::move(value), std::move(rule)}}, std::string(source));
}

std::int64_t size_arg(const nlohmann::json& args, const char* key, std::int64_t fallback,
                      const std::string& where, std::string_view source) {
  const auto it = args.find(key);
  if (it == args.end()) return fallback;
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
    reject(where + ".args." + key, it->dump(), "must be an integer ≥ 0", source);
  return it->get<std::int64_t>();
}

// Per pid, the start (µs) of its iteration skip + 1: op slices before it are left out.
std::map<std::int64_t, double> iteration_cutoffs(const nlohmann::json& events, int skip,
                                                 std::string_view source) {
  std::map<std::int64_t, std::vector<double>> starts;
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("cat", "") == "op") continue;
    starts[e.value("pid", std::int64_t{0})];  // every rank with slices has an entry
    if (e.value("cat", "") != "forward") continue;
    const auto& a = e.value("args", nlohmann::json::object());
    if (a.value("microbatch", -1) == 0 && a.value("chunk", -1) == 0)
      starts[e.value("pid", std::int64_t{0})].push_back(e.value("ts", 0.0));
  }
  std::map<std::int64_t, double> cutoffs;
  for (auto& [pid, s] : starts) {
    if (static_cast<int>(s.size()) <= skip)
      reject("--skip-iterations", std::to_string(skip),
             "rank " + std::to_string(pid) + " has " + std::to_string(s.size()) +
                 " iteration(s) in the trace: skip fewer, or train longer",
             source);
    std::sort(s.begin(), s.end());
    cutoffs[pid] = s[static_cast<std::size_t>(skip)];
  }
  return cutoffs;
}

}  // namespace

std::vector<calibrate::OpTiming> op_timings_of_trace(const nlohmann::json& trace,
                                                     std::string_view source, int skip_iterations) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace.at("traceEvents").is_array())
    reject("traceEvents", "", "is required: a Chrome trace from tandem train --trace", source);
  // A shape's key by value (OpShape::key() holds references): key → shapes/samples index.
  using Key =
      std::tuple<std::string, DType, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  std::map<Key, std::size_t> index;
  std::vector<calibrate::OpShape> shapes;
  // Per shape, per rank (pid): the durations kept, and those left out.
  using PerRank = std::map<std::int64_t, std::vector<double>>;
  std::vector<PerRank> samples, skipped;
  const auto& events = trace.at("traceEvents");
  std::map<std::int64_t, double> cutoffs;
  if (skip_iterations > 0) cutoffs = iteration_cutoffs(events, skip_iterations, source);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("cat", "") != "op") continue;
    const std::string where = "traceEvents[" + std::to_string(i) + "]";
    bool skip = false;
    const std::int64_t pid = e.value("pid", std::int64_t{0});
    if (skip_iterations > 0) {
      const auto cut = cutoffs.find(pid);
      skip = cut == cutoffs.end() || e.value("ts", 0.0) < cut->second;
    }
    if (!e.contains("dur") || !e.at("dur").is_number() || !(e.at("dur").get<double>() >= 0))
      reject(where + ".dur", e.value("dur", nlohmann::json()).dump(),
             "an op slice needs a duration ≥ 0 (µs)", source);
    const auto& args = e.value("args", nlohmann::json::object());
    calibrate::OpShape s;
    s.op = e.value("name", "");
    try {
      s.dtype = sim::parse_dtype(args.value("dtype", "fp32"));
    } catch (const std::exception&) {  // not a string, or not a dtype's name
      reject(where + ".args.dtype", args.value("dtype", nlohmann::json()).dump(),
             "must be one of fp32 | bf16 | fp16 | int32 | int64", source);
    }
    s.m = size_arg(args, "m", 0, where, source);
    s.n = size_arg(args, "n", 0, where, source);
    s.k = size_arg(args, "k", 0, where, source);
    s.batch = size_arg(args, "batch", 1, where, source);
    const auto [it, added] = index.emplace(Key(s.key()), shapes.size());
    if (added) {
      shapes.push_back(s);
      samples.emplace_back();
      skipped.emplace_back();
    }
    (skip ? skipped : samples)[it->second][pid].push_back(e.at("dur").get<double>() * 1e-6);
  }
  if (shapes.empty())
    reject("traceEvents", std::to_string(events.size()) + " events",
           "hold no per-op slice (category \"op\"): trace the run with "
           "tandem train --trace FILE --trace-ops",
           source);
  std::vector<calibrate::OpTiming> out;
  for (const auto& [key, i] : index) {
    // A shape only the skipped part issued (the set-up's parameter uploads) keeps those.
    const PerRank& ranks = samples[i].empty() ? skipped[i] : samples[i];
    std::optional<calibrate::OpTiming> slowest;
    for (const auto& [pid, durations] : ranks) {
      calibrate::OpTiming t = calibrate::timing_of(shapes[i], durations);
      if (!slowest || t.seconds > slowest->seconds) slowest = std::move(t);
    }
    out.push_back(std::move(*slowest));
  }
  return out;
}

std::vector<calibrate::OpShape> attach_simulated_work(
    std::vector<calibrate::OpTiming>& timings, std::span<const calibrate::OpShape> simulated) {
  std::vector<calibrate::OpShape> missing;
  for (const auto& s : calibrate::distinct_shapes(simulated)) {
    bool found = false;
    for (auto& t : timings)
      if (t.shape.key() == s.key()) {
        t.shape.flops = s.flops;
        t.shape.bytes = s.bytes;
        found = true;
      }
    if (!found) missing.push_back(s);
  }
  return missing;
}

}  // namespace tandem::cli
