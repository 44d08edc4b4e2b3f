#include "sim/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.hpp"

namespace tandem::sim {

namespace {

const char* const kForms =
    "must be uniform, zipf:S (S ≥ 0, e.g. zipf:1.2) or histogram:w0,w1,… (one weight ≥ 0 per "
    "expert, not all 0)";

double parse_number(std::string_view text, std::string_view whole) {
  std::string s(text);
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v) || v < 0)
    throw ConfigError("moe_routing", std::string(whole), kForms);
  return v;
}

}  // namespace

MoeRouting parse_moe_routing(std::string_view text) {
  MoeRouting r;
  if (text == "uniform") return r;
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  if (colon == std::string_view::npos || colon + 1 == text.size())
    throw ConfigError("moe_routing", std::string(text), kForms);
  const std::string_view rest = text.substr(colon + 1);
  if (kind == "zipf") {
    r.kind = MoeRouting::Kind::zipf;
    r.zipf_exponent = parse_number(rest, text);
    return r;
  }
  if (kind != "histogram") throw ConfigError("moe_routing", std::string(text), kForms);
  r.kind = MoeRouting::Kind::histogram;
  std::size_t at = 0;
  while (at <= rest.size()) {
    const auto comma = rest.find(',', at);
    const auto end = comma == std::string_view::npos ? rest.size() : comma;
    r.weights.push_back(parse_number(rest.substr(at, end - at), text));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  if (std::accumulate(r.weights.begin(), r.weights.end(), 0.0) <= 0)
    throw ConfigError("moe_routing", std::string(text), kForms);
  return r;
}

std::string to_string(const MoeRouting& r) {
  std::ostringstream out;
  switch (r.kind) {
    case MoeRouting::Kind::uniform:
      return "uniform";
    case MoeRouting::Kind::zipf:
      out << "zipf:" << r.zipf_exponent;
      return out.str();
    case MoeRouting::Kind::histogram:
      out << "histogram:";
      for (std::size_t i = 0; i < r.weights.size(); ++i) out << (i ? "," : "") << r.weights[i];
      return out.str();
  }
  return "uniform";
}

std::vector<std::int64_t> routed_counts(const MoeRouting& r, std::int64_t tokens,
                                        std::int64_t experts, std::int64_t top_k) {
  const auto E = static_cast<std::size_t>(experts);
  const std::int64_t total = tokens * top_k;
  std::vector<std::int64_t> counts(E, 0);
  if (r.kind == MoeRouting::Kind::uniform) {
    // As the forced-balance router assigns copy i to expert i mod E.
    for (std::size_t e = 0; e < E; ++e)
      counts[e] = total / experts + (static_cast<std::int64_t>(e) < total % experts ? 1 : 0);
    return counts;
  }
  std::vector<double> w(E);
  if (r.kind == MoeRouting::Kind::zipf) {
    for (std::size_t e = 0; e < E; ++e)
      w[e] = 1.0 / std::pow(static_cast<double>(e + 1), r.zipf_exponent);
  } else {
    if (r.weights.size() != E)
      throw ConfigError(
          "moe_routing", to_string(r),
          "a histogram lists one weight per expert: num_experts = " + std::to_string(experts));
    w = r.weights;
  }
  // Shares of the copies, none above `tokens`: cap the largest and share out the rest.
  std::vector<double> share(E, 0);
  std::vector<bool> capped(E, false);
  for (bool again = true; again;) {
    again = false;
    double free_weight = 0, free_copies = static_cast<double>(total);
    for (std::size_t e = 0; e < E; ++e) {
      if (capped[e])
        free_copies -= static_cast<double>(tokens);
      else
        free_weight += w[e];
    }
    for (std::size_t e = 0; e < E; ++e) {
      if (capped[e]) continue;
      share[e] = free_weight > 0 ? free_copies * w[e] / free_weight : 0;
      if (share[e] > static_cast<double>(tokens)) {
        capped[e] = true;
        share[e] = static_cast<double>(tokens);
        again = true;
      }
    }
  }
  // Whole copies: floors, then the largest remainders (lower expert first on ties).
  std::int64_t given = 0;
  std::vector<std::size_t> order(E);
  for (std::size_t e = 0; e < E; ++e) {
    counts[e] = std::min(tokens, static_cast<std::int64_t>(std::floor(share[e])));
    given += counts[e];
    order[e] = e;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return share[a] - std::floor(share[a]) > share[b] - std::floor(share[b]);
  });
  for (std::size_t i = 0; given < total; i = (i + 1) % E)
    if (counts[order[i]] < tokens) {
      ++counts[order[i]];
      ++given;
    }
  return counts;
}

}  // namespace tandem::sim
