// Physical bounds on topology numbers (topology/topology_check.hpp): every preset lies
// within them, and a number no hardware has — a 1e308 GB/s NIC, a 1e-300 TFLOP/s GPU, a
// 1e308 GiB memory — is refused by the reader with the field, the value and the bound,
// instead of reaching SimGrid (where 1e308 GB/s aborted the simulation).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "topology/topology_check.hpp"
#include "topology/topology_io.hpp"

namespace tandem {
namespace {

using nlohmann::json;

// The one violation parsing `j` raises (fails when it raises none or several).
Violation only_violation(const json& j) {
  try {
    parse_topology(j, "test");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations().size(), 1u) << e.what();
    EXPECT_EQ(e.source(), "test");
    return e.violations().empty() ? Violation{} : e.violations().front();
  }
  ADD_FAILURE() << "accepted: " << j.dump();
  return {};
}

TEST(TopologyBounds, EveryPresetIsWithinThem) {
  for (const auto& name : topology_preset_names())
    EXPECT_TRUE(topology_bound_violations(load_topology(name)).empty()) << name;
}

TEST(TopologyBounds, AbsurdNumbersAreRefusedNamingFieldValueAndBound) {
  const json dgx = to_json(load_topology("dgx-a100-80g"));
  struct Case {
    const char* section;
    const char* key;
    double value;
    std::string field, shown;
  };
  const Case cases[] = {
      {"fabric", "nic_gbs", 1e308, "fabric.nic_gbs", "inf (too large to represent)"},
      {"node", "gpu_link_gbs", 1e6, "node.gpu_link_gbs", "1e+06"},  // 1000× NVLink 5
      {"node", "gpu_link_latency_us", 5e6, "node.gpu_link_latency_us", "5e+06"},
      {"gpu", "hbm_bandwidth_gbs", 1e-300, "gpu.hbm_bandwidth_gbs", "1e-300"},
      {"gpu", "memory_gib", 1e308, "gpu.memory_gib", ""},  // beyond int64 bytes
      {"fabric", "oversubscription", 1e5, "fabric.oversubscription", "100000"},
  };
  for (const auto& c : cases) {
    json j = dgx;
    j[c.section][c.key] = c.value;
    const Violation v = only_violation(j);
    EXPECT_EQ(v.field, c.field);
    if (!c.shown.empty()) {
      EXPECT_EQ(v.value, c.shown);
    }
    EXPECT_NE(v.rule.find("physical bound"), std::string::npos) << v.rule;
  }
  json slow = dgx;
  slow["gpu"]["peak_tflops"]["bf16"] = 1e-300;
  EXPECT_EQ(only_violation(slow).field, "gpu.peak_tflops.bf16");
}

TEST(TopologyBounds, ANicBandwidthIsUncheckedWithoutNics) {
  // cpu-host has no NICs and says 0 GB/s: nothing to bound.
  const Topology t = load_topology("cpu-host");
  EXPECT_EQ(t.fabric.nics_per_node, 0);
  EXPECT_TRUE(topology_bound_violations(t).empty());
}

}  // namespace
}  // namespace tandem
