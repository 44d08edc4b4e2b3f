// Topology JSON: decoding with every broken rule collected (a section reader that knows
// its keys, converts datasheet units to SI and records violations under dotted field
// names), the inverse encoding, and the lookup of a preset name or a file path.
#include "topology/topology_io.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "topology/presets.hpp"
#include "topology/topology_check.hpp"

namespace tandem {
namespace {

using nlohmann::json;
using Violations = std::vector<Violation>;

constexpr double kTera = 1e12;   // TFLOP/s → FLOP/s
constexpr double kGiga = 1e9;    // GB/s → bytes/s
constexpr double kMicro = 1e-6;  // µs → s
constexpr std::int64_t kGiB = 1LL << 30;

std::string shown(const json& v) {
  std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : std::string(sep)) + item;
  return out;
}

// The range a number must lie in: > 0, ≥ 0, ≥ 1, or (0, 1].
enum class Range { positive, non_negative, at_least_one, fraction, spread };

std::string broken_range(Range r, double x) {
  switch (r) {
    case Range::positive:
      return x > 0 ? "" : "must be > 0";
    case Range::non_negative:
      return x >= 0 ? "" : "must be ≥ 0";
    case Range::at_least_one:
      return x >= 1 ? "" : "must be ≥ 1";
    case Range::fraction:
      return x > 0 && x <= 1 ? "" : "must lie in (0, 1]";
    case Range::spread:  // a standard deviation over a mean, of a time that stays positive
      return x >= 0 && x < 0.5 ? "" : "must lie in [0, 0.5)";
  }
  return "";
}

// Reads one JSON object whose keys are known in advance. Missing required keys, unknown
// keys (with the closest known one suggested), wrong types and out-of-range values all
// become violations named "<path>.<key>"; the reader returns a neutral value for them so
// decoding goes on and reports everything at once.
class Section {
 public:
  Section(const json& body, std::string path, std::vector<std::string> keys, Violations& out)
      : body_(body), path_(std::move(path)), keys_(std::move(keys)), out_(out) {
    if (!body_.is_object()) {
      out_.push_back({path_.empty() ? "topology" : path_, shown(body_),
                      "must be a JSON object, not a JSON " + std::string(body_.type_name())});
      return;
    }
    for (const auto& [key, value] : body_.items()) {
      if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
      const std::string best = closest_match(key, keys_);
      out_.push_back({field(key), shown(value),
                      best.empty() ? "unknown key; known keys: " + join(keys_, ", ")
                                   : "unknown key; did you mean \"" + best + "\"?"});
    }
  }

  bool ok() const { return body_.is_object(); }
  std::string field(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const json* find(std::string_view key) const {
    if (!ok()) return nullptr;
    const auto it = body_.find(std::string(key));
    if (it == body_.end()) {
      out_.push_back({field(key), "", "is required"});
      return nullptr;
    }
    return &*it;
  }

  double number(std::string_view key, Range range) const {
    const json* v = find(key);
    if (!v) return 0;
    if (!v->is_number()) {
      out_.push_back(
          {field(key), shown(*v), "must be a number, not a JSON " + std::string(v->type_name())});
      return 0;
    }
    const double x = v->get<double>();
    if (auto rule = broken_range(range, x); !rule.empty())
      out_.push_back({field(key), shown(*v), rule});
    return x;
  }

  bool boolean(std::string_view key) const {
    const json* v = find(key);
    if (!v) return false;
    if (!v->is_boolean()) {
      out_.push_back({field(key), shown(*v),
                      "must be true or false, not a JSON " + std::string(v->type_name())});
      return false;
    }
    return v->get<bool>();
  }

  int integer(std::string_view key, Range range) const {
    const json* v = find(key);
    if (!v) return 0;
    if (!v->is_number_integer() || std::abs(v->get<double>()) > 1e9) {
      out_.push_back({field(key), shown(*v), "must be an integer"});
      return 0;
    }
    const int x = v->get<int>();
    if (auto rule = broken_range(range, x); !rule.empty())
      out_.push_back({field(key), shown(*v), rule});
    return x;
  }

  std::string text(std::string_view key, const std::vector<std::string>& one_of = {}) const {
    const json* v = find(key);
    if (!v) return "";
    if (!v->is_string()) {
      out_.push_back(
          {field(key), shown(*v), "must be a string, not a JSON " + std::string(v->type_name())});
      return "";
    }
    auto s = v->get<std::string>();
    if (!one_of.empty() && std::find(one_of.begin(), one_of.end(), s) == one_of.end())
      out_.push_back({field(key), s, "must be one of " + join(one_of, " | ")});
    return s;
  }

  // The optional "source" object: field name → provenance text, naming only this
  // section's other keys.
  Sources sources() const {
    Sources out;
    if (!ok() || !body_.contains("source")) return out;
    const json& src = body_.at("source");
    std::vector<std::string> fields;
    for (const auto& k : keys_)
      if (k != "source" && k != "name") fields.push_back(k);
    Section inner(src, field("source"), fields, out_);
    if (!inner.ok()) return out;
    for (const auto& [key, value] : src.items()) {
      if (!value.is_string())
        out_.push_back(
            {inner.field(key), shown(value), "must be a string naming where the number came from"});
      else if (std::find(fields.begin(), fields.end(), key) != fields.end())
        out.emplace(key, value.get<std::string>());
    }
    return out;
  }

  const json& body() const { return body_; }

 private:
  const json& body_;
  std::string path_;
  std::vector<std::string> keys_;
  Violations& out_;
};

// The keys each section of a preset may hold.
const std::vector<std::string>& gpu_keys() {
  static const std::vector<std::string> keys = {"name",
                                                "peak_tflops",
                                                "hbm_bandwidth_gbs",
                                                "memory_gib",
                                                "sm_count",
                                                "kernel_launch_us",
                                                "gemm_peak_fraction",
                                                "gemm_unaligned_peak_fraction",
                                                "gemm_fp8_peak_fraction",
                                                "sustained_clock_fraction",
                                                "fused_attention_forward_fraction",
                                                "fused_attention_backward_fraction",
                                                "flash_attn_forward_fraction",
                                                "flash_attn_backward_fraction",
                                                "memory_peak_fraction",
                                                "gemm_tile",
                                                "gemm_tile_fixed_k",
                                                "pcie_gbs",
                                                "pcie_latency_us",
                                                "l2_bandwidth_gbs",
                                                "host_kernel_issue_us",
                                                "host_collective_issue_us",
                                                "host_microbatch_us",
                                                "host_iteration_us",
                                                "host_optimizer_tensor_us",
                                                "host_unfused_softmax_us",
                                                "host_layer_timestamp_us",
                                                "host_waits_for_collectives",
                                                "source"};
  return keys;
}

const std::vector<std::string>& node_keys() {
  static const std::vector<std::string> keys = {"gpus_per_node",    "interconnect",
                                                "gpu_link_gbs",     "gpu_link_latency_us",
                                                "node_time_spread", "source"};
  return keys;
}

const std::vector<std::string>& nvlink_domain_keys() {
  static const std::vector<std::string> keys = {"gpus", "source"};
  return keys;
}

const std::vector<std::string>& fabric_keys() {
  static const std::vector<std::string> keys = {"kind",           "nics_per_node",    "nic_gbs",
                                                "nic_latency_us", "oversubscription", "source"};
  return keys;
}

const std::vector<std::string>& nccl_keys() {
  static const std::vector<std::string> keys = {"nvlink_bus_gbs",
                                                "channels",
                                                "nic_bus_gbs",
                                                "nvls_bus_gbs",
                                                "nvls_bus_ranks",
                                                "nvls_latency_us",
                                                "p2p_nvlink_gbs",
                                                "ll_max_bus_gbs",
                                                "ll128_max_channel_gbs",
                                                "tree_max_channel_gbs",
                                                "tree_ll128_max_channel_gbs",
                                                "ring_base_latency_us",
                                                "tree_base_latency_us",
                                                "ring_nvlink_latency_us",
                                                "tree_nvlink_latency_us",
                                                "ring_net_latency_us",
                                                "tree_net_latency_us",
                                                "net_overhead_us",
                                                "ring_plateau",
                                                "measured_all_reduce_busbw_gbs",
                                                "ring_group_fraction",
                                                "source"};
  return keys;
}

GpuSpec read_gpu(const json& body, Violations& out) {
  Section s(body, "gpu", gpu_keys(), out);
  GpuSpec g;
  if (!s.ok()) return g;
  g.name = s.text("name");
  if (const json* peaks = s.find("peak_tflops")) {
    Section p(*peaks, s.field("peak_tflops"), {"fp32", "tf32", "bf16", "fp16", "fp8", "fp4"}, out);
    if (p.ok()) {
      g.peak_fp32 = FlopsPerSecond(p.number("fp32", Range::positive) * kTera);
      g.peak_tf32 = FlopsPerSecond(p.number("tf32", Range::positive) * kTera);
      g.peak_bf16 = FlopsPerSecond(p.number("bf16", Range::positive) * kTera);
      g.peak_fp16 = FlopsPerSecond(p.number("fp16", Range::positive) * kTera);
      // Optional: a GPU without FP8 (A100) or FP4 (A100, H100) tensor cores leaves them out.
      auto optional_peak = [&](std::string_view key) {
        return FlopsPerSecond(
            p.body().contains(std::string(key)) ? p.number(key, Range::positive) * kTera : 0.0);
      };
      g.peak_fp8 = optional_peak("fp8");
      g.peak_fp4 = optional_peak("fp4");
    }
  }
  g.memory_bandwidth = BytesPerSecond(s.number("hbm_bandwidth_gbs", Range::positive) * kGiga);
  g.memory =
      Bytes(std::llround(s.number("memory_gib", Range::positive) * static_cast<double>(kGiB)));
  g.sm_count = s.integer("sm_count", Range::at_least_one);
  g.kernel_launch = Seconds(s.number("kernel_launch_us", Range::non_negative) * kMicro);
  g.gemm_peak_fraction = s.number("gemm_peak_fraction", Range::fraction);
  if (s.body().contains("gemm_unaligned_peak_fraction"))
    g.gemm_unaligned_peak_fraction = s.number("gemm_unaligned_peak_fraction", Range::fraction);
  if (s.body().contains("gemm_fp8_peak_fraction"))
    g.gemm_fp8_peak_fraction = s.number("gemm_fp8_peak_fraction", Range::fraction);
  if (s.body().contains("sustained_clock_fraction"))
    g.sustained_clock_fraction = s.number("sustained_clock_fraction", Range::fraction);
  for (auto [key, field] :
       {std::pair{"fused_attention_forward_fraction", &GpuSpec::fused_attention_forward_fraction},
        std::pair{"fused_attention_backward_fraction", &GpuSpec::fused_attention_backward_fraction},
        std::pair{"flash_attn_forward_fraction", &GpuSpec::flash_attn_forward_fraction},
        std::pair{"flash_attn_backward_fraction", &GpuSpec::flash_attn_backward_fraction}})
    if (s.body().contains(key)) g.*field = s.number(key, Range::fraction);
  g.memory_peak_fraction = s.number("memory_peak_fraction", Range::fraction);
  if (const json* tile = s.find("gemm_tile")) {
    const bool good = tile->is_array() && tile->size() == 2 &&
                      std::all_of(tile->begin(), tile->end(), [](const json& t) {
                        return t.is_number_integer() && t.get<std::int64_t>() >= 1 &&
                               t.get<std::int64_t>() <= 4096;
                      });
    if (good) {
      g.gemm_tile_m = (*tile)[0].get<int>();
      g.gemm_tile_n = (*tile)[1].get<int>();
    } else {
      out.push_back({s.field("gemm_tile"), shown(*tile),
                     "must be [rows, columns] of a GEMM output tile, integers in [1, 4096]"});
    }
  }
  g.pcie.bandwidth = BytesPerSecond(s.number("pcie_gbs", Range::positive) * kGiga);
  g.pcie.latency = Seconds(s.number("pcie_latency_us", Range::non_negative) * kMicro);
  // The issuing host's costs are optional (absent: 0, a host that issues at once).
  auto host_us = [&](std::string_view key) {
    return s.body().contains(std::string(key))
               ? Seconds(s.number(key, Range::non_negative) * kMicro)
               : Seconds(0);
  };
  if (s.body().contains("gemm_tile_fixed_k"))
    g.gemm_tile_fixed_k = s.number("gemm_tile_fixed_k", Range::non_negative);
  g.l2_bandwidth = BytesPerSecond(s.body().contains("l2_bandwidth_gbs")
                                      ? s.number("l2_bandwidth_gbs", Range::non_negative) * kGiga
                                      : 0.0);
  g.host_kernel_issue = host_us("host_kernel_issue_us");
  g.host_collective_issue = host_us("host_collective_issue_us");
  g.host_microbatch = host_us("host_microbatch_us");
  g.host_iteration = host_us("host_iteration_us");
  g.host_optimizer_tensor = host_us("host_optimizer_tensor_us");
  g.host_unfused_softmax = host_us("host_unfused_softmax_us");
  g.host_layer_timestamp = host_us("host_layer_timestamp_us");
  g.host_waits_for_collectives =
      s.body().contains("host_waits_for_collectives") && s.boolean("host_waits_for_collectives");
  g.sources = s.sources();
  return g;
}

NodeSpec read_node(const json& body, Violations& out) {
  Section s(body, "node", node_keys(), out);
  NodeSpec n;
  if (!s.ok()) return n;
  n.gpus_per_node = s.integer("gpus_per_node", Range::at_least_one);
  n.interconnect = s.text("interconnect", {"nvswitch", "nvlink", "shared-memory"});
  n.gpu_link.bandwidth = BytesPerSecond(s.number("gpu_link_gbs", Range::positive) * kGiga);
  n.gpu_link.latency = Seconds(s.number("gpu_link_latency_us", Range::non_negative) * kMicro);
  if (s.body().contains("node_time_spread"))
    n.node_time_spread = s.number("node_time_spread", Range::spread);
  n.sources = s.sources();
  return n;
}

// "nvlink_domain": {"gpus": 72}: consecutive nodes whose GPUs share one NVSwitch fabric.
// The rules that tie it to the node section are checked once both are read.
NvlinkDomainSpec read_nvlink_domain(const json& body, Violations& out) {
  Section s(body, "nvlink_domain", nvlink_domain_keys(), out);
  NvlinkDomainSpec d;
  if (!s.ok()) return d;
  d.gpus = s.integer("gpus", Range::at_least_one);
  d.sources = s.sources();
  return d;
}

// A domain holds whole nodes, more than one, joined by NVLink switches.
void check_nvlink_domain(const Topology& t, Violations& out) {
  const int gpus = t.nvlink_domain.gpus, per_node = t.node.gpus_per_node;
  if (gpus < 1 || per_node < 1) return;  // already reported
  const std::string value = std::to_string(gpus);
  if (gpus % per_node != 0)
    out.push_back({"nvlink_domain.gpus", value,
                   "must be a multiple of node.gpus_per_node (" + std::to_string(per_node) +
                       "): a domain holds whole nodes"});
  else if (gpus == per_node)
    out.push_back({"nvlink_domain.gpus", value,
                   "must be larger than node.gpus_per_node (" + std::to_string(per_node) +
                       "): a domain of one node is the node; leave nvlink_domain out"});
  if (t.node.interconnect != "nvswitch")
    out.push_back({"nvlink_domain.gpus", value,
                   "needs node.interconnect \"nvswitch\" (it is \"" + t.node.interconnect +
                       "\"): only NVLink switches join the GPUs of several nodes"});
}

FabricSpec read_fabric(const json& body, Violations& out) {
  Section s(body, "fabric", fabric_keys(), out);
  FabricSpec f;
  if (!s.ok()) return f;
  f.kind = s.text("kind", {"fat-tree", "rail-optimized"}) == "rail-optimized"
               ? FabricKind::rail_optimized
               : FabricKind::fat_tree;
  f.nics_per_node = s.integer("nics_per_node", Range::non_negative);
  const double nic_gbs = s.number("nic_gbs", Range::non_negative);
  if (f.nics_per_node > 0 && nic_gbs <= 0 && s.body().contains("nic_gbs"))
    out.push_back(
        {s.field("nic_gbs"), shown(s.body().at("nic_gbs")), "must be > 0 when nics_per_node > 0"});
  f.nic.bandwidth = BytesPerSecond(nic_gbs * kGiga);
  f.nic.latency = Seconds(s.number("nic_latency_us", Range::non_negative) * kMicro);
  f.oversubscription = s.number("oversubscription", Range::at_least_one);
  f.sources = s.sources();
  return f;
}

// Three non-negative numbers [a, b, c] scaled by `unit`, for the per-protocol
// (LL, LL128, Simple) and per-node-count (1, 2, more) figures of the "nccl" section.
std::array<double, 3> read_triple(const Section& s, std::string_view key, double unit,
                                  Violations& out) {
  std::array<double, 3> v{};
  const json* t = s.find(key);
  if (!t) return v;
  const bool good =
      t->is_array() && t->size() == 3 && std::all_of(t->begin(), t->end(), [](const json& x) {
        return x.is_number() && x.get<double>() >= 0;
      });
  if (!good) {
    out.push_back({s.field(key), shown(*t), "must be an array of three numbers ≥ 0"});
    return v;
  }
  for (std::size_t i = 0; i < 3; ++i) v[i] = (*t)[i].get<double>() * unit;
  return v;
}

PerProtocol per_protocol(const std::array<double, 3>& v) {
  return {v[0], v[1], v[2]};
}
PerNodeCount per_node_count(const std::array<double, 3>& v) {
  return {v[0], v[1], v[2]};
}

// A table key naming a group size ("8"); 0, with a violation at `where`, for anything but
// an integer ≥ 2.
int group_size_key(const std::string& key, const std::string& where, Violations& out) {
  int ranks = 0;
  try {
    std::size_t used = 0;
    ranks = std::stoi(key, &used);
    if (used != key.size()) ranks = 0;
  } catch (const std::exception&) {
    ranks = 0;
  }
  if (ranks >= 2) return ranks;
  out.push_back({where, key, "must be a group size, an integer ≥ 2"});
  return 0;
}

// {"2": [[bytes, busbw GB/s], ...], ...}: nccl-tests rows per group size, sizes rising.
std::map<int, std::vector<std::pair<double, double>>> read_measured_busbw(const json& m,
                                                                          const std::string& field,
                                                                          Violations& out) {
  std::map<int, std::vector<std::pair<double, double>>> table;
  if (!m.is_object()) {
    out.push_back(
        {field, shown(m), "must be an object of group size → [[bytes, busbw GB/s], ...]"});
    return table;
  }
  for (const auto& [key, rows] : m.items()) {
    const std::string where = field + "." + key;
    const int ranks = group_size_key(key, where, out);
    if (ranks == 0) continue;
    const bool pairs = rows.is_array() && !rows.empty() &&
                       std::all_of(rows.begin(), rows.end(), [](const json& r) {
                         return r.is_array() && r.size() == 2 && r[0].is_number() &&
                                r[1].is_number() && r[0].get<double>() > 0 &&
                                r[1].get<double>() > 0;
                       });
    if (!pairs) {
      out.push_back(
          {where, shown(rows), "must be a non-empty array of [bytes > 0, busbw GB/s > 0]"});
      continue;
    }
    std::vector<std::pair<double, double>> v;
    for (const json& r : rows) v.emplace_back(r[0].get<double>(), r[1].get<double>() * kGiga);
    const bool rising = std::adjacent_find(v.begin(), v.end(), [](const auto& a, const auto& b) {
                          return b.first <= a.first;
                        }) == v.end();
    if (!rising) {
      out.push_back({where, shown(rows), "must list sizes in rising order, each once"});
      continue;
    }
    table[ranks] = std::move(v);
  }
  return table;
}

// {"all_gather": {"2": 0.78, ...}, "reduce_scatter": {...}}: fractions in (0, 1] per group
// size ≥ 2, for the two ring collectives.
std::map<std::string, std::map<int, double>> read_ring_group_fraction(const json& m,
                                                                      const std::string& field,
                                                                      Violations& out) {
  std::map<std::string, std::map<int, double>> table;
  const std::string rule =
      "must be an object of all_gather / reduce_scatter → group size → fraction";
  if (!m.is_object()) {
    out.push_back({field, shown(m), rule});
    return table;
  }
  for (const auto& [collective, sizes] : m.items()) {
    const std::string at = field + "." + collective;
    if (collective != "all_gather" && collective != "reduce_scatter") {
      out.push_back({at, collective, "must be all_gather or reduce_scatter"});
      continue;
    }
    if (!sizes.is_object()) {
      out.push_back({at, shown(sizes), "must be an object of group size → fraction"});
      continue;
    }
    for (const auto& [key, value] : sizes.items()) {
      const std::string where = at + "." + key;
      const int ranks = group_size_key(key, where, out);
      if (ranks == 0) continue;
      if (!value.is_number() || value.get<double>() <= 0 || value.get<double>() > 1) {
        out.push_back({where, shown(value), "must lie in (0, 1]"});
        continue;
      }
      table[collective][ranks] = value.get<double>();
    }
  }
  return table;
}

NcclSpec read_nccl(const json& body, Violations& out) {
  Section s(body, "nccl", nccl_keys(), out);
  NcclSpec n;
  if (!s.ok()) return n;
  n.enabled = true;
  n.nvlink_bus = BytesPerSecond(s.number("nvlink_bus_gbs", Range::positive) * kGiga);
  n.channels = s.integer("channels", Range::at_least_one);
  n.nic_bus = BytesPerSecond(s.number("nic_bus_gbs", Range::non_negative) * kGiga);
  n.nvls_bus = BytesPerSecond(s.number("nvls_bus_gbs", Range::non_negative) * kGiga);
  if (s.body().contains("nvls_bus_ranks")) {  // optional: 8, one node of 8 GPUs
    n.nvls_bus_ranks = s.integer("nvls_bus_ranks", Range::at_least_one);
    if (n.nvls_bus_ranks < 2)
      out.push_back({s.field("nvls_bus_ranks"), shown(s.body().at("nvls_bus_ranks")),
                     "must be a group size, an integer ≥ 2"});
  }
  n.nvls_latency = Seconds(s.number("nvls_latency_us", Range::non_negative) * kMicro);
  if (s.body().contains("p2p_nvlink_gbs"))  // optional: absent, p2p runs at the link's rate
    n.p2p_nvlink = BytesPerSecond(s.number("p2p_nvlink_gbs", Range::non_negative) * kGiga);
  n.ll_max_bus = per_node_count(read_triple(s, "ll_max_bus_gbs", kGiga, out));
  n.ll128_max_channel = s.number("ll128_max_channel_gbs", Range::positive) * kGiga;
  n.tree_max_channel = per_node_count(read_triple(s, "tree_max_channel_gbs", kGiga, out));
  n.tree_ll128_max_channel =
      per_node_count(read_triple(s, "tree_ll128_max_channel_gbs", kGiga, out));
  n.ring_base_latency = per_protocol(read_triple(s, "ring_base_latency_us", kMicro, out));
  n.tree_base_latency = per_protocol(read_triple(s, "tree_base_latency_us", kMicro, out));
  n.ring_nvlink_latency = per_protocol(read_triple(s, "ring_nvlink_latency_us", kMicro, out));
  n.tree_nvlink_latency = per_protocol(read_triple(s, "tree_nvlink_latency_us", kMicro, out));
  n.ring_net_latency = per_protocol(read_triple(s, "ring_net_latency_us", kMicro, out));
  n.tree_net_latency = per_protocol(read_triple(s, "tree_net_latency_us", kMicro, out));
  n.net_overhead = Seconds(s.number("net_overhead_us", Range::non_negative) * kMicro);
  n.ring_plateau = s.number("ring_plateau", Range::at_least_one);
  if (const json* m = s.body().contains("measured_all_reduce_busbw_gbs")
                          ? s.find("measured_all_reduce_busbw_gbs")
                          : nullptr)
    n.measured_all_reduce_busbw =
        read_measured_busbw(*m, s.field("measured_all_reduce_busbw_gbs"), out);
  if (s.body().contains("ring_group_fraction"))
    n.ring_group_fraction = read_ring_group_fraction(s.body().at("ring_group_fraction"),
                                                     s.field("ring_group_fraction"), out);
  n.sources = s.sources();
  return n;
}

std::string read_file_text(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (ec) throw ConfigError(where, "", "cannot be accessed: " + ec.message());
  if (!exists) throw ConfigError(where, "", "no such file");
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(where, "", "is a directory, not a topology file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(where, "", std::string("cannot be read: ") + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw ConfigError(where, "", "cannot be read: I/O error");
  return text;
}

Topology parse_text(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::size_t line = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) line += text[i] == '\n';
    throw ConfigError(where, "line " + std::to_string(line),
                      std::string("is not valid JSON: ") + e.what());
  } catch (const json::out_of_range& e) {  // a number beyond double, as 1e309
    throw ConfigError(where, "", std::string("is not valid JSON: ") + e.what());
  }
  return parse_topology(j, where);
}

// Numbers back in datasheet units, rounded to 12 significant digits so that 0.7 µs
// written out reads 0.7, not 0.7000000000000001.
double tidy(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  std::ostringstream s;
  s.precision(12);
  s << x;
  return std::stod(s.str());
}

json sources_json(const Sources& sources) {
  json j = json::object();
  for (const auto& [k, v] : sources) j[k] = v;
  return j;
}

// "fitted_on": {"gpu.host_kernel_issue_us": {"set": "vtrain_single_node", "rows": "…"}}: each
// key names a number the preset holds (section.key), each value the set and rows it saw.
std::map<std::string, FittedParameter> read_fitted_on(const json& top, Violations& out) {
  std::map<std::string, FittedParameter> fitted;
  const json& body = top.at("fitted_on");
  if (!body.is_object()) {
    out.push_back({"fitted_on", shown(body),
                   "must be a JSON object: \"section.key\" → "
                   "{\"set\": …, \"rows\": …}"});
    return fitted;
  }
  for (const auto& [key, value] : body.items()) {
    const std::string field = "fitted_on." + key;
    const auto dot = key.find('.');
    const std::string section = key.substr(0, dot);
    const std::string name = dot == std::string::npos ? "" : key.substr(dot + 1);
    const std::map<std::string, const std::vector<std::string>*> sections = {
        {"gpu", &gpu_keys()},
        {"node", &node_keys()},
        {"nvlink_domain", &nvlink_domain_keys()},
        {"fabric", &fabric_keys()},
        {"nccl", &nccl_keys()}};
    const auto known = sections.find(section);
    if (dot == std::string::npos || known == sections.end() || name == "source" || name == "name" ||
        std::find(known->second->begin(), known->second->end(), name) == known->second->end()) {
      out.push_back({field, key,
                     "must name a number of this preset as section.key, e.g. "
                     "gpu.gemm_peak_fraction"});
      continue;
    }
    Section entry(value, field, {"set", "rows"}, out);
    if (!entry.ok()) continue;
    FittedParameter p{entry.text("set"), entry.text("rows")};
    if ((value.contains("set") && p.set.empty()) || (value.contains("rows") && p.rows.empty()))
      out.push_back({field, shown(value), "set and rows must not be empty"});
    if (p.set.empty() || p.rows.empty()) continue;
    fitted.emplace(key, std::move(p));
  }
  return fitted;
}

// The JSON of a topology named by "base": a preset's text or a file's, parsed.
json base_json(const std::string& name, std::string_view source) {
  const auto text_of = [&]() -> std::string {
    for (const auto& p : embedded_presets())
      if (p.name == name) return std::string(p.json);
    if (name.find('/') != std::string::npos || name.ends_with(".json")) {
      // A relative path is read beside the file that names it, as an include would be.
      const std::filesystem::path path(name), from(source);
      std::error_code ec;
      if (path.is_relative() && std::filesystem::is_regular_file(from, ec))
        return read_file_text(from.parent_path() / path);
      return read_file_text(path);
    }
    std::vector<std::string> names;
    for (const auto& p : embedded_presets()) names.emplace_back(p.name);
    throw ConfigError(
        {{"base", name, "is neither a preset (" + join(names, " | ") + ") nor a JSON file path"}},
        std::string(source));
  };
  const std::string text = text_of();
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError({{"base", name, std::string("is not valid JSON: ") + e.what()}},
                      std::string(source));
  }
}

// A topology that names a "base" is that topology with this one's keys merged over it (RFC
// 7386 merge patch: objects merge key by key, anything else replaces, null removes). A
// number it changes must say where it came from: the base's source for it would be stale, so
// a changed key with a source in the base needs one in the patch; a fitted_on entry of the
// base for a changed key is dropped unless the patch restates it.
json resolve_base(const json& j, std::string_view source, int depth, Violations& out) {
  if (!j.is_object() || !j.contains("base")) return j;
  const json& base_name = j.at("base");
  if (!base_name.is_string() || base_name.get<std::string>().empty()) {
    out.push_back({"base", shown(base_name), "must be a preset name or a JSON file path"});
    return j;
  }
  if (depth >= 8) {
    out.push_back({"base", base_name.get<std::string>(),
                   "nests more than 8 bases deep (does a base name itself?)"});
    return j;
  }
  if (!j.contains("name"))
    out.push_back({"name", "", "is required with base: the topology is not its base"});
  json merged =
      resolve_base(base_json(base_name.get<std::string>(), source), source, depth + 1, out);
  json patch = j;
  patch.erase("base");
  for (const char* section : {"gpu", "node", "nvlink_domain", "fabric", "nccl"}) {
    if (!patch.contains(section) || !patch[section].is_object() || !merged.contains(section))
      continue;
    const json& was = merged[section];
    const json& now = patch[section];
    const json no_sources = json::object();
    const json& old_sources = was.contains("source") ? was["source"] : no_sources;
    const json& new_sources = now.contains("source") ? now["source"] : no_sources;
    for (const auto& [key, value] : now.items()) {
      if (key == "source" || (was.contains(key) && was[key] == value)) continue;
      const std::string field = std::string(section) + "." + key;
      if (old_sources.contains(key) && !new_sources.contains(key))
        out.push_back({std::string(section) + ".source." + key, "",
                       "is required: " + field + " = " + shown(value) + " changes " +
                           base_name.get<std::string>() +
                           "'s value, whose source no longer holds"});
      if (merged.contains("fitted_on") && merged["fitted_on"].contains(field) &&
          !(patch.contains("fitted_on") && patch["fitted_on"].contains(field)))
        merged["fitted_on"].erase(field);
    }
  }
  merged.merge_patch(patch);
  return merged;
}

}  // namespace

Topology parse_topology(const nlohmann::json& given, std::string_view source) {
  Violations out;
  Topology t;
  const json j = resolve_base(given, source, 0, out);
  if (!out.empty()) throw ConfigError(std::move(out), std::string(source));
  Section top(
      j, "", {"name", "description", "gpu", "node", "nvlink_domain", "fabric", "nccl", "fitted_on"},
      out);
  if (top.ok()) {
    t.name = top.text("name");
    if (j.contains("description")) t.description = top.text("description");
    if (const json* g = top.find("gpu")) t.gpu = read_gpu(*g, out);
    if (const json* n = top.find("node")) t.node = read_node(*n, out);
    if (j.contains("nvlink_domain")) {  // optional: without it a domain is one node
      t.nvlink_domain = read_nvlink_domain(j.at("nvlink_domain"), out);
      check_nvlink_domain(t, out);
    }
    if (const json* f = top.find("fabric")) t.fabric = read_fabric(*f, out);
    if (j.contains("nccl")) t.nccl = read_nccl(j.at("nccl"), out);  // optional
    if (j.contains("fitted_on")) t.fitted_on = read_fitted_on(j, out);
    // NCCL sees an NVLink domain as one node: a measured table holds groups inside one.
    const bool domain = t.nvlink_domain.gpus > 0;
    const int limit = domain ? t.nvlink_domain.gpus : t.node.gpus_per_node;
    for (const auto& [ranks, rows] : t.nccl.measured_all_reduce_busbw)
      if (limit > 0 && ranks > limit)
        out.push_back({"nccl.measured_all_reduce_busbw_gbs." + std::to_string(ranks),
                       std::to_string(ranks),
                       domain ? "must be at most nvlink_domain.gpus (" + std::to_string(limit) +
                                    "): the table is for groups inside one NVLink domain"
                              : "must be at most node.gpus_per_node (" + std::to_string(limit) +
                                    "): the table is for groups inside one node"});
  }
  if (!out.empty()) throw ConfigError(std::move(out), std::string(source));
  check_topology_bounds(t, source);  // physical bounds (topology_check.hpp)
  return t;
}

namespace {

json triple(double a, double b, double c, double unit) {
  return json::array({tidy(a / unit), tidy(b / unit), tidy(c / unit)});
}
json triple(const PerProtocol& p, double unit) {
  return triple(p.ll, p.ll128, p.simple, unit);
}
json triple(const PerNodeCount& p, double unit) {
  return triple(p.one, p.two, p.more, unit);
}

json measured_json(const std::map<int, std::vector<std::pair<double, double>>>& table) {
  json j = json::object();
  for (const auto& [ranks, rows] : table) {
    json a = json::array();
    for (const auto& [bytes, busbw] : rows) a.push_back({tidy(bytes), tidy(busbw / kGiga)});
    j[std::to_string(ranks)] = a;
  }
  return j;
}

json nccl_json(const NcclSpec& n) {
  json j = {{"nvlink_bus_gbs", tidy(n.nvlink_bus.value / kGiga)},
            {"channels", n.channels},
            {"nic_bus_gbs", tidy(n.nic_bus.value / kGiga)},
            {"nvls_bus_gbs", tidy(n.nvls_bus.value / kGiga)},
            {"nvls_latency_us", tidy(n.nvls_latency.value / kMicro)},
            {"ll_max_bus_gbs", triple(n.ll_max_bus, kGiga)},
            {"ll128_max_channel_gbs", tidy(n.ll128_max_channel / kGiga)},
            {"tree_max_channel_gbs", triple(n.tree_max_channel, kGiga)},
            {"tree_ll128_max_channel_gbs", triple(n.tree_ll128_max_channel, kGiga)},
            {"ring_base_latency_us", triple(n.ring_base_latency, kMicro)},
            {"tree_base_latency_us", triple(n.tree_base_latency, kMicro)},
            {"ring_nvlink_latency_us", triple(n.ring_nvlink_latency, kMicro)},
            {"tree_nvlink_latency_us", triple(n.tree_nvlink_latency, kMicro)},
            {"ring_net_latency_us", triple(n.ring_net_latency, kMicro)},
            {"tree_net_latency_us", triple(n.tree_net_latency, kMicro)},
            {"net_overhead_us", tidy(n.net_overhead.value / kMicro)},
            {"ring_plateau", n.ring_plateau},
            {"source", sources_json(n.sources)}};
  if (n.nvls_bus.value > 0) j["nvls_bus_ranks"] = n.nvls_bus_ranks;  // only with NVLS
  if (n.p2p_nvlink.value > 0) j["p2p_nvlink_gbs"] = tidy(n.p2p_nvlink.value / kGiga);
  for (const auto& [collective, sizes] : n.ring_group_fraction)
    for (const auto& [ranks, fraction] : sizes)
      j["ring_group_fraction"][collective][std::to_string(ranks)] = fraction;
  return j;
}

}  // namespace

nlohmann::json to_json(const Topology& t) {
  const GpuSpec& g = t.gpu;
  json gpu = {{"name", g.name},
              {"peak_tflops",
               {{"fp32", tidy(g.peak_fp32.value / kTera)},
                {"tf32", tidy(g.peak_tf32.value / kTera)},
                {"bf16", tidy(g.peak_bf16.value / kTera)},
                {"fp16", tidy(g.peak_fp16.value / kTera)}}},
              {"hbm_bandwidth_gbs", tidy(g.memory_bandwidth.value / kGiga)},
              {"memory_gib", tidy(static_cast<double>(g.memory.value) / static_cast<double>(kGiB))},
              {"sm_count", g.sm_count},
              {"kernel_launch_us", tidy(g.kernel_launch.value / kMicro)},
              {"gemm_peak_fraction", g.gemm_peak_fraction},
              {"memory_peak_fraction", g.memory_peak_fraction},
              {"gemm_tile", {g.gemm_tile_m, g.gemm_tile_n}},
              {"pcie_gbs", tidy(g.pcie.bandwidth.value / kGiga)},
              {"pcie_latency_us", tidy(g.pcie.latency.value / kMicro)},
              {"source", sources_json(g.sources)}};
  // The optional figures appear only where the preset has them (absent reads as 0).
  auto optional = [&gpu](const char* key, double value) {
    if (value != 0) gpu[key] = tidy(value);
  };
  optional("l2_bandwidth_gbs", g.l2_bandwidth.value / kGiga);
  optional("gemm_tile_fixed_k", g.gemm_tile_fixed_k);
  optional("gemm_unaligned_peak_fraction", g.gemm_unaligned_peak_fraction);
  optional("gemm_fp8_peak_fraction", g.gemm_fp8_peak_fraction);
  optional("sustained_clock_fraction", g.sustained_clock_fraction);
  optional("fused_attention_forward_fraction", g.fused_attention_forward_fraction);
  optional("fused_attention_backward_fraction", g.fused_attention_backward_fraction);
  optional("flash_attn_forward_fraction", g.flash_attn_forward_fraction);
  optional("flash_attn_backward_fraction", g.flash_attn_backward_fraction);
  optional("host_kernel_issue_us", g.host_kernel_issue.value / kMicro);
  optional("host_collective_issue_us", g.host_collective_issue.value / kMicro);
  optional("host_microbatch_us", g.host_microbatch.value / kMicro);
  optional("host_iteration_us", g.host_iteration.value / kMicro);
  optional("host_optimizer_tensor_us", g.host_optimizer_tensor.value / kMicro);
  optional("host_unfused_softmax_us", g.host_unfused_softmax.value / kMicro);
  optional("host_layer_timestamp_us", g.host_layer_timestamp.value / kMicro);
  if (g.host_waits_for_collectives) gpu["host_waits_for_collectives"] = true;
  if (g.peak_fp8.value != 0) gpu["peak_tflops"]["fp8"] = tidy(g.peak_fp8.value / kTera);
  if (g.peak_fp4.value != 0) gpu["peak_tflops"]["fp4"] = tidy(g.peak_fp4.value / kTera);
  json node = {{"gpus_per_node", t.node.gpus_per_node},
               {"interconnect", t.node.interconnect},
               {"gpu_link_gbs", tidy(t.node.gpu_link.bandwidth.value / kGiga)},
               {"gpu_link_latency_us", tidy(t.node.gpu_link.latency.value / kMicro)},
               {"source", sources_json(t.node.sources)}};
  if (t.node.node_time_spread > 0) node["node_time_spread"] = tidy(t.node.node_time_spread);
  json fabric = {{"kind", std::string(fabric_kind_name(t.fabric.kind))},
                 {"nics_per_node", t.fabric.nics_per_node},
                 {"nic_gbs", tidy(t.fabric.nic.bandwidth.value / kGiga)},
                 {"nic_latency_us", tidy(t.fabric.nic.latency.value / kMicro)},
                 {"oversubscription", t.fabric.oversubscription},
                 {"source", sources_json(t.fabric.sources)}};
  json j = {{"name", t.name}, {"gpu", gpu}, {"node", node}, {"fabric", fabric}};
  if (!t.description.empty()) j["description"] = t.description;
  if (t.nvlink_domain.gpus > 0)
    j["nvlink_domain"] = {{"gpus", t.nvlink_domain.gpus},
                          {"source", sources_json(t.nvlink_domain.sources)}};
  if (!t.fitted_on.empty()) {
    json fitted = json::object();
    for (const auto& [key, p] : t.fitted_on) fitted[key] = {{"set", p.set}, {"rows", p.rows}};
    j["fitted_on"] = fitted;
  }
  if (t.nccl.enabled) {
    j["nccl"] = nccl_json(t.nccl);
    if (!t.nccl.measured_all_reduce_busbw.empty())
      j["nccl"]["measured_all_reduce_busbw_gbs"] = measured_json(t.nccl.measured_all_reduce_busbw);
  }
  return j;
}

std::vector<std::string> topology_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : embedded_presets()) names.emplace_back(p.name);
  return names;
}

Topology load_topology_file(const std::filesystem::path& path) {
  return parse_text(read_file_text(path), path.string());
}

Topology load_topology(std::string_view name_or_path) {
  for (const auto& p : embedded_presets())
    if (p.name == name_or_path)
      return parse_text(std::string(p.json), "preset " + std::string(p.name));
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  const bool looks_like_path = name_or_path.find('/') != std::string_view::npos ||
                               name_or_path.ends_with(".json") || std::filesystem::exists(path, ec);
  if (looks_like_path) return load_topology_file(path);
  const auto names = topology_preset_names();
  // A truncated name ("dgx-a100") means the preset it begins, before any near spelling.
  std::string best;
  for (const auto& n : names)
    if (n.starts_with(name_or_path) && (best.empty() || n.size() < best.size())) best = n;
  if (best.empty()) best = closest_match(name_or_path, names);
  throw ConfigError("topology", std::string(name_or_path),
                    "is neither a preset (" + join(names, " | ") + ") nor a JSON file" +
                        (best.empty() ? std::string() : "; did you mean \"" + best + "\"?"));
}

}  // namespace tandem
