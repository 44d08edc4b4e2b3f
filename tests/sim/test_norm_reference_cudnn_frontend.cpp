// The Blackwell presets' HBM fraction against cuDNN's own published norm benchmarks
// (topology/norm_reference_cudnn_frontend.csv: NVIDIA/cudnn-frontend's RMSNorm and LayerNorm
// at the shapes of training runs, bf16, forward and backward, cuDNN, PyTorch and torch.compile,
// on one H200, one GB200 and one GB300 under cuDNN 9.19.1).
//
// A norm of tens of millions of elements streams its bytes through HBM; what a Blackwell GPU
// reaches of its datasheet bandwidth over what the H200 reaches of its own, on the same kernel
// and shape, is a measured ratio. gb200-nvl72's and gb300-nvl72's `memory_peak_fraction` is
// the H200's streaming fraction (a 1 GiB copy on our H200) times that ratio's geometric mean;
// dgx-b200 and dgx-b300 carry them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tests/sim/reference_csv.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

// The H200's datasheet HBM3e bandwidth and what a 1 GiB device-to-device copy reached on the
// H200 tandem measures on (read + write; scripts/measure_memory_bound.py, the base of
// topology/memory_bound_reference.csv's of_copy column).
constexpr double kH200DatasheetGbs = 4800;
constexpr double kH200CopyGbs = 4244;

// The shapes that stream: from 32M elements (64 MiB of bf16, beyond either GPU's L2) up.
constexpr double kStreamingElements = 32e6;

// model (the benchmark's config: two models share a shape), norm, backend, rows, columns
using Kernel = std::tuple<std::string, std::string, std::string, std::int64_t, std::int64_t>;

struct Rates {
  double forward_gbps = 0, backward_gbps = 0;
};

// gpu -> kernel -> the benchmark's GB/s (its bytes over its median time).
std::map<std::string, std::map<Kernel, Rates>> published() {
  std::map<std::string, std::map<Kernel, Rates>> by_gpu;
  for (const auto& f : reference_rows("topology/norm_reference_cudnn_frontend.csv", 11))
    by_gpu[f[0]][{f[2], f[3], f[4], std::stoll(f[5]), std::stoll(f[6])}] = {std::stod(f[9]),
                                                                            std::stod(f[10])};
  return by_gpu;
}

struct Ratio {
  double geomean = 0, low = 1e9, high = 0;
  int kernels = 0;  // kernel-directions
};

// `gpu`'s fraction of `datasheet_gbs` over the H200's of its datasheet, on every streaming
// kernel both ran, forward and backward; `backend` empty for every backend.
Ratio ratio_to_h200(const std::string& gpu, double datasheet_gbs, const std::string& backend = "") {
  const auto rows = published();
  Ratio r;
  double log_sum = 0;
  for (const auto& [kernel, rates] : rows.at(gpu)) {
    const auto& [model, norm, kernel_backend, n, c] = kernel;
    if (static_cast<double>(n * c) < kStreamingElements) continue;
    if (!backend.empty() && kernel_backend != backend) continue;
    const auto h200 = rows.at("H200").find(kernel);
    if (h200 == rows.at("H200").end()) continue;
    for (const auto& [mine, theirs] :
         {std::pair{rates.forward_gbps, h200->second.forward_gbps},
          std::pair{rates.backward_gbps, h200->second.backward_gbps}}) {
      const double x = (mine / datasheet_gbs) / (theirs / kH200DatasheetGbs);
      log_sum += std::log(x);
      r.low = std::min(r.low, x);
      r.high = std::max(r.high, x);
      ++r.kernels;
    }
  }
  r.geomean = r.kernels > 0 ? std::exp(log_sum / r.kernels) : 0;
  return r;
}

double datasheet_gbs(const std::string& preset) {
  return load_topology(preset).gpu.memory_bandwidth.value / 1e9;
}

TEST(NormReferenceCudnnFrontend, TheTableHoldsEachKernelOnAllThreeGpus) {
  const auto rows = published();
  ASSERT_EQ(rows.size(), 3U);
  for (const char* gpu : {"H200", "GB200", "GB300"}) {
    ASSERT_TRUE(rows.count(gpu)) << gpu;
    EXPECT_GE(rows.at(gpu).size(), 40U) << gpu;
  }
  // The ratio stands on the same 21 streaming kernels (7 shapes x 3 backends) on each GPU.
  EXPECT_EQ(ratio_to_h200("GB200", 8000).kernels, 42);
  EXPECT_EQ(ratio_to_h200("GB300", 8000).kernels, 42);
}

// The measured figure: the preset's fraction is the H200's copy fraction times the ratio, to
// the preset's two decimals.
TEST(NormReferenceCudnnFrontend, GraceBlackwellHbmFractionIsTheH200sTimesTheMeasuredRatio) {
  for (const auto& [preset, gpu] : {std::pair{"gb200-nvl72", "GB200"}, {"gb300-nvl72", "GB300"}}) {
    const Ratio r = ratio_to_h200(gpu, datasheet_gbs(preset));
    const double expected = kH200CopyGbs / kH200DatasheetGbs * r.geomean;
    EXPECT_NEAR(load_topology(preset).gpu.memory_peak_fraction, expected, 0.005)
        << preset << ": ratio " << r.geomean << " over " << r.kernels << " kernels";
    // Blackwell streams a smaller share of its bandwidth than the H200 on these kernels, by
    // about a tenth: neither a match nor a different regime.
    EXPECT_GT(r.geomean, 0.8) << preset;
    EXPECT_LT(r.geomean, 0.95) << preset;
  }
}

// Not fitted: the ratio is not one backend's. Each backend's geometric mean (cuDNN's own
// kernels, PyTorch's eager ones, torch.compile's Triton) lies within 10 % of all together.
TEST(NormReferenceCudnnFrontend, EachBackendGivesTheSameRatioWithinATenth) {
  for (const char* gpu : {"GB200", "GB300"}) {
    const double all = ratio_to_h200(gpu, 8000).geomean;
    for (const char* backend : {"cudnn", "pytorch", "torch_compile"}) {
      const Ratio r = ratio_to_h200(gpu, 8000, backend);
      EXPECT_EQ(r.kernels, 14) << gpu << " " << backend;
      EXPECT_NEAR(r.geomean / all, 1.0, 0.10) << gpu << " " << backend;
    }
  }
}

// The DGX parts carry the figure of their die's NVL72 part (no B200 or B300 norm benchmark
// is published): the same HBM3e stacks behind the same memory controllers.
TEST(NormReferenceCudnnFrontend, TheDgxPartsCarryTheirDiesFigure) {
  EXPECT_EQ(load_topology("dgx-b200").gpu.memory_peak_fraction,
            load_topology("gb200-nvl72").gpu.memory_peak_fraction);
  EXPECT_EQ(load_topology("dgx-b300").gpu.memory_peak_fraction,
            load_topology("gb300-nvl72").gpu.memory_peak_fraction);
}

}  // namespace
}  // namespace tandem::sim
