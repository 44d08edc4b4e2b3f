// The bounds. Time: one kernel between 1 ns (a GPU clock cycle) and 1 hour. Shape: each of
// m, n, k, batch at most 2^32 (no tensor dimension of a GPT comes near). Rates: at most
// 10^17 FLOP/s (100 PFLOP/s, ~40× a B200's dense bf16) and 10^14 bytes/s (100 TB/s,
// ~12× HBM3e), so a row cannot claim hardware that does not exist.
#include "sim/calibration_check.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem::sim {
namespace {

constexpr double kMinSeconds = 1e-9, kMaxSeconds = 3600;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 32;
constexpr double kMaxFlopsPerSecond = 1e17, kMaxBytesPerSecond = 1e14;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

}  // namespace

std::vector<Violation> calibration_bound_violations(const CalibrationTable& t) {
  std::vector<Violation> out;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const CalibrationRow& r = t.rows[i];
    const std::string where = "rows[" + std::to_string(i) + "].";
    if (!(r.seconds >= kMinSeconds && r.seconds <= kMaxSeconds))
      out.push_back({where + "seconds", number(r.seconds),
                     "must lie in [1e-09, 3600] s (physical bound: one kernel takes at least a "
                     "GPU clock cycle and less than an hour)"});
    for (auto [key, v] : {std::pair{"m", r.m}, {"n", r.n}, {"k", r.k}, {"batch", r.batch}})
      if (v > kMaxDim)
        out.push_back({where + key, std::to_string(v),
                       "must be ≤ 2^32 (physical bound: no GPT tensor dimension comes near)"});
    if (r.seconds > 0 && std::isfinite(r.seconds)) {
      if (r.flops / r.seconds > kMaxFlopsPerSecond)
        out.push_back({where + "flops", number(r.flops),
                       "flops / seconds = " + number(r.flops / r.seconds) +
                           " FLOP/s must be ≤ 1e17 (physical bound: 100 PFLOP/s, beyond any GPU)"});
      if (r.bytes / r.seconds > kMaxBytesPerSecond)
        out.push_back({where + "bytes", number(r.bytes),
                       "bytes / seconds = " + number(r.bytes / r.seconds) +
                           " B/s must be ≤ 1e14 (physical bound: 100 TB/s, beyond any memory)"});
    }
  }
  return out;
}

void check_calibration_bounds(const CalibrationTable& t, std::string_view source) {
  auto out = calibration_bound_violations(t);
  if (!out.empty()) throw ConfigError(std::move(out), std::string(source));
}

}  // namespace tandem::sim
