// The bounds, in the units topology JSON uses. Upper bounds: NVLink 5 carries 900 GB/s
// per direction per GPU, HBM3e 8 TB/s, a B200 ~2.3 PFLOP/s dense bf16 and 192 GB, a
// NIC 100 GB/s (800 Gb/s); the limits sit about 100× above. Lower bounds keep every
// transfer and op time finite: the slowest preset (cpu-host) is 0.083 TFLOP/s and 5.5 GB/s.
#include "topology/topology_check.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace tandem {
namespace {

struct Bound {
  double min, max;
  const char* unit;
  const char* why;  // the physical reason for the bound
};

constexpr Bound kPeak{1e-3, 1e5, "TFLOP/s", "a GPU between 1 GFLOP/s and 100 PFLOP/s"};
constexpr Bound kHbm{0.1, 1e5, "GB/s", "device memory between 0.1 GB/s and 100 TB/s"};
constexpr Bound kMemory{1.0 / 1024, 1e5, "GiB", "device memory between 1 MiB and 100 TiB"};
constexpr Bound kSms{1, 1e5, "", "between 1 and 100000 multiprocessors or cores"};
constexpr Bound kLatency{0, 1e6, "µs", "a latency or launch cost of at most 1 s"};
constexpr Bound kLink{0.01, 1e5, "GB/s", "a link between 10 MB/s and 100 TB/s per direction"};
constexpr Bound kNic{0.01, 1e4, "GB/s", "a NIC between 10 MB/s and 10 TB/s per direction"};
constexpr Bound kGpusPerNode{1, 4096, "", "at most 4096 GPUs in one node"};
constexpr Bound kNics{0, 256, "", "at most 256 NICs per node"};
constexpr Bound kNvlinkDomain{1, 576, "", "NVLink 5 switches join at most 576 GPUs in one domain"};
constexpr Bound kOversubscription{1, 1000, "", "a fabric core oversubscribed at most 1000:1"};

// A number the JSON gave beyond 1.8e299 GB/s overflows to inf in SI units: say so, rather
// than print an "inf" the user never wrote.
std::string number(double x) {
  if (std::isinf(x)) return x > 0 ? "inf (too large to represent)" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

void check(std::vector<Violation>& out, const std::string& field, double value, const Bound& b) {
  if (std::isfinite(value) && value >= b.min && value <= b.max) return;
  const std::string unit = *b.unit ? std::string(" ") + b.unit : "";
  out.push_back({field, number(value),
                 "must lie in [" + number(b.min) + ", " + number(b.max) + "]" + unit +
                     " (physical bound: " + b.why + ")"});
}

}  // namespace

std::vector<Violation> topology_bound_violations(const Topology& t) {
  constexpr double kTera = 1e12, kGiga = 1e9, kMicro = 1e-6, kGiB = 1024.0 * 1024 * 1024;
  std::vector<Violation> out;
  const GpuSpec& g = t.gpu;
  check(out, "gpu.peak_tflops.fp32", g.peak_fp32.value / kTera, kPeak);
  check(out, "gpu.peak_tflops.tf32", g.peak_tf32.value / kTera, kPeak);
  check(out, "gpu.peak_tflops.bf16", g.peak_bf16.value / kTera, kPeak);
  check(out, "gpu.peak_tflops.fp16", g.peak_fp16.value / kTera, kPeak);
  if (g.peak_fp8.value != 0) check(out, "gpu.peak_tflops.fp8", g.peak_fp8.value / kTera, kPeak);
  if (g.peak_fp4.value != 0) check(out, "gpu.peak_tflops.fp4", g.peak_fp4.value / kTera, kPeak);
  check(out, "gpu.hbm_bandwidth_gbs", g.memory_bandwidth.value / kGiga, kHbm);
  check(out, "gpu.memory_gib", static_cast<double>(g.memory.value) / kGiB, kMemory);
  check(out, "gpu.sm_count", g.sm_count, kSms);
  check(out, "gpu.kernel_launch_us", g.kernel_launch.value / kMicro, kLatency);
  check(out, "gpu.pcie_gbs", g.pcie.bandwidth.value / kGiga, kLink);
  check(out, "gpu.pcie_latency_us", g.pcie.latency.value / kMicro, kLatency);
  check(out, "node.gpus_per_node", t.node.gpus_per_node, kGpusPerNode);
  check(out, "node.gpu_link_gbs", t.node.gpu_link.bandwidth.value / kGiga, kLink);
  check(out, "node.gpu_link_latency_us", t.node.gpu_link.latency.value / kMicro, kLatency);
  if (t.nvlink_domain.gpus != 0)
    check(out, "nvlink_domain.gpus", t.nvlink_domain.gpus, kNvlinkDomain);
  check(out, "fabric.nics_per_node", t.fabric.nics_per_node, kNics);
  if (t.fabric.nics_per_node > 0)
    check(out, "fabric.nic_gbs", t.fabric.nic.bandwidth.value / kGiga, kNic);
  check(out, "fabric.nic_latency_us", t.fabric.nic.latency.value / kMicro, kLatency);
  check(out, "fabric.oversubscription", t.fabric.oversubscription, kOversubscription);
  return out;
}

void check_topology_bounds(const Topology& t, std::string_view source) {
  auto out = topology_bound_violations(t);
  if (!out.empty()) throw ConfigError(std::move(out), std::string(source));
}

}  // namespace tandem
