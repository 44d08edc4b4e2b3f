// How the simulator routes tokens to experts. A real run's split sizes come from its
// router and its data; phantom tensors have neither, so the sim binding's router takes
// the counts from a routing model (tandem simulate --moe-routing):
//   uniform        every expert gets T·k / E copies (the first T·k mod E one more): what
//                  Megatron's moe_router_force_load_balancing gives a real run
//   zipf:S         expert e gets a share ∝ 1 / (e + 1)^S, so the first ranks' experts are
//                  the popular ones (S = 0 is uniform)
//   histogram:a,b,…  shares ∝ the given weights, one per expert (e.g. the tokens per
//                  expert a real run logged)
// An expert takes at most one copy of each token (the router's k experts differ), so a
// share above T is capped and the excess goes to the others in proportion.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::sim {

struct MoeRouting {
  enum class Kind { uniform, zipf, histogram };
  Kind kind = Kind::uniform;
  double zipf_exponent = 0;
  std::vector<double> weights;  // histogram: one per expert

  bool operator==(const MoeRouting&) const = default;
};

// Throws ConfigError naming moe_routing, the text and the accepted forms.
MoeRouting parse_moe_routing(std::string_view text);
std::string to_string(const MoeRouting& r);

// The routed copies per expert (E entries summing to tokens · top_k, each ≤ tokens).
// Throws ConfigError when a histogram does not list `experts` weights.
std::vector<std::int64_t> routed_counts(const MoeRouting& r, std::int64_t tokens,
                                        std::int64_t experts, std::int64_t top_k);

}  // namespace tandem::sim
