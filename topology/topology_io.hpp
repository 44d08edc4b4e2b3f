// Reading and writing topologies: the JSON form (datasheet units: TFLOP/s, GB/s, GiB, µs),
// the presets built into the binary, and load_topology(), which takes either. Validation
// works like the scenario's (core/scenario.hpp): every broken rule is collected and
// thrown as one ConfigError naming the field ("gpu.peak_tflops.bf16"), the value and the
// rule, and an unknown key suggests the closest known one.
//
//   {"name": "dgx-a100-80g", "description": "…",
//    "gpu":    {"name": "A100-SXM4-80GB", "peak_tflops": {"fp32": 19.5, "tf32": 156,
//               "bf16": 312, "fp16": 312}, "hbm_bandwidth_gbs": 2039, "memory_gib": 80,
//               "sm_count": 108, "kernel_launch_us": 4, "gemm_peak_fraction": 0.8,
//               "memory_peak_fraction": 0.85, "gemm_tile": [256, 128], "pcie_gbs": 32,
//               "pcie_latency_us": 2, "source": {"peak_tflops": "datasheet", …}},
//    "node":   {"gpus_per_node": 8, "interconnect": "nvswitch", "gpu_link_gbs": 300,
//               "gpu_link_latency_us": 1, "source": {…}},
//    "fabric": {"kind": "fat-tree", "nics_per_node": 8, "nic_gbs": 25,
//               "nic_latency_us": 2, "oversubscription": 1, "source": {…}}}
//
// GB/s are 10⁹ bytes per second, per direction; "source" maps a field name to where its
// number came from and may only name fields of its section.
//
// {"name": "mine", "base": "dgx-a100-80g", "fabric": {"nics_per_node": 4, "source": {…}}}
// is the base (a preset or a file) with these keys merged over it (RFC 7386); a changed
// number needs its own source where the base had one (topology/README.md).
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "topology/topology.hpp"

namespace tandem {

// Parse and validate; `source` names the input in messages (a path, "preset dgx-h100").
Topology parse_topology(const nlohmann::json& j, std::string_view source = "topology");
nlohmann::json to_json(const Topology& t);

// A preset name ("dgx-a100-80g", "dgx-h100", "cpu-host") or a path to a JSON file. A word
// that is neither is a ConfigError with field "topology" suggesting the closest preset.
Topology load_topology(std::string_view name_or_path);
Topology load_topology_file(const std::filesystem::path& path);

// The names of the presets compiled into the binary, sorted.
std::vector<std::string> topology_preset_names();

}  // namespace tandem
