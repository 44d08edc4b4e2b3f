// Warm-up, repetitions and the median; see measure_op.hpp.
#include "exec/calibrate/measure_op.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tandem::calibrate {

namespace {

std::int64_t bytes_of(const OpCase& c) {
  std::int64_t total = 0;
  for (const Tensor& t : c.tensors()) total += t.bytes().value;
  return total;
}

// Writes back and invalidates every cache line of the case's tensors, and waits for that.
void flush_from_caches(const OpCase& c) {
  for (const Tensor& t : c.tensors()) {
    if (!t.has_data()) continue;
    const char* p = static_cast<const char*>(tensor_data_or_throw(t));
    const std::int64_t n = t.bytes().value;
    for (std::int64_t i = 0; i < n; i += 64) {
#if defined(__x86_64__)
      _mm_clflush(p + i);
#elif defined(__aarch64__)
      asm volatile("dc civac, %0" : : "r"(p + i) : "memory");
#endif
    }
  }
#if defined(__x86_64__)
  _mm_mfence();
#elif defined(__aarch64__)
  asm volatile("dsb sy" : : : "memory");
#endif
}

}  // namespace

OpTiming timing_of(const OpShape& shape, std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("calibrate: no samples of " + shape.op);
  std::sort(samples.begin(), samples.end());
  // A clock tick is the least an op can honestly be said to take (a table needs > 0).
  const double tick = 1e-9;
  return {.shape = shape,
          .seconds = std::max(samples[samples.size() / 2], tick),
          .min_seconds = std::max(samples.front(), tick),
          .max_seconds = std::max(samples.back(), tick),
          .repetitions = static_cast<std::int64_t>(samples.size())};
}

std::vector<std::vector<double>> measure_samples(Device& device, std::span<OpCase> cases,
                                                 const MeasureOptions& options) {
  if (options.warmup < 0 || options.repetitions < 1 || options.evict_bytes < 0 ||
      !(options.min_time_seconds >= 0) || options.max_repetitions < options.repetitions ||
      options.runs_per_sample < 1)
    throw std::invalid_argument(
        "calibrate: needs warmup ≥ 0, repetitions ≥ 1, evict_bytes ≥ 0, min_time_seconds ≥ 0, "
        "max_repetitions ≥ repetitions and runs_per_sample ≥ 1, got " +
        std::to_string(options.warmup) + ", " + std::to_string(options.repetitions) + ", " +
        std::to_string(options.evict_bytes) + ", " + std::to_string(options.min_time_seconds) +
        ", " + std::to_string(options.max_repetitions) + " and " +
        std::to_string(options.runs_per_sample));
  Stream& s = device.default_stream();
  s.synchronize();  // the uploads that filled the tensors
  for (OpCase& c : cases)
    for (int i = 0; i < options.warmup; ++i) c.run(s);
  s.synchronize();
  std::vector<std::vector<double>> times(cases.size());
  std::vector<double> total(cases.size(), 0.0);
  std::vector<std::int64_t> scratch(static_cast<std::size_t>(options.evict_bytes / 8));
  for (int i = 0; i < options.max_repetitions; ++i) {
    bool ran = false;
    for (std::size_t c = 0; c < cases.size(); ++c) {
      if (i >= options.repetitions && total[c] >= options.min_time_seconds) continue;
      ran = true;
      for (std::size_t j = 0; j < scratch.size(); j += 8) scratch[j] += i;  // a write per line
      if (options.flush_host_caches) flush_from_caches(cases[c]);
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < options.runs_per_sample; ++r) cases[c].run(s);
      s.synchronize();
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      times[c].push_back(elapsed / options.runs_per_sample);
      total[c] += elapsed;
    }
    if (!ran) break;
  }
  return times;
}

std::vector<double> measure_seconds(Device& device, std::span<OpCase> cases,
                                    const MeasureOptions& options) {
  std::vector<double> out;
  for (auto& t : measure_samples(device, cases, options))
    out.push_back(timing_of(OpShape{}, std::move(t)).seconds);
  return out;
}

OpTiming measure_op(Device& device, const OpShape& shape, const MeasureOptions& options) {
  OpCase c = make_op_case(device, shape, options.op_case);
  return timing_of(shape,
                   std::move(measure_samples(device, std::span<OpCase>(&c, 1), options).front()));
}

std::vector<OpTiming> measure_ops(Device& device, std::span<const OpShape> shapes,
                                  const MeasureOptions& options,
                                  const std::function<void(std::size_t, std::size_t)>& progress) {
  const std::vector<OpShape> distinct = distinct_shapes(shapes);
  std::vector<OpTiming> out;
  out.reserve(distinct.size());
  for (std::size_t next = 0; next < distinct.size();) {
    std::vector<OpCase> group;
    std::int64_t bytes = 0;
    const std::size_t first = next;
    do {
      group.push_back(make_op_case(device, distinct[next++], options.op_case));
      bytes += bytes_of(group.back());
    } while (next < distinct.size() && bytes < options.round_robin_bytes);
    auto samples = measure_samples(device, group, options);
    for (std::size_t i = 0; i < group.size(); ++i)
      out.push_back(timing_of(distinct[first + i], std::move(samples[i])));
    if (progress) progress(out.size(), distinct.size());
  }
  return out;
}

std::vector<OpShape> distinct_shapes(std::span<const OpShape> shapes) {
  std::vector<OpShape> out;
  for (const OpShape& s : shapes) {
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const OpShape& o) { return o.key() == s.key(); });
    if (!seen) out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const OpShape& a, const OpShape& b) { return a.key() < b.key(); });
  return out;
}

}  // namespace tandem::calibrate
