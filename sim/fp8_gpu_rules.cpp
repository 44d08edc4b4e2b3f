#include "sim/fp8_gpu_rules.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"

namespace tandem::sim {

std::optional<int> compute_capability(const GpuSpec& gpu) {
  const std::string& n = gpu.name;
  auto has = [&](const char* part) { return n.find(part) != std::string::npos; };
  if (has("B200") || has("B300")) return 100;  // GB200 and GB300 too
  if (has("H100") || has("H200") || has("H800") || has("H20")) return 90;
  if (has("L40") || has("L4") || has("4090")) return 89;
  if (has("A100") || has("A800") || has("A30")) return 80;
  if (has("V100")) return 70;
  return std::nullopt;
}

void check_fp8_gpu(const Scenario& s, const GpuSpec& gpu) {
  const auto& f = s.training.fp8;
  if (!f.enabled()) return;
  std::vector<Violation> v;
  const auto cc = compute_capability(gpu);
  auto capability = [&] { return std::to_string(*cc / 10) + "." + std::to_string(*cc % 10); };
  if (cc && *cc < 89)
    v.push_back({"fp8", f.format,
                 "needs a GPU of compute capability 8.9 or higher (Transformer Engine's FP8); " +
                     gpu.name + " is " + capability()});
  else if (f.recipe == "mxfp8" && (!cc || *cc < 100))
    v.push_back({"fp8_recipe", f.recipe,
                 "MXFP8 needs a Blackwell GPU (compute capability 10.0 or higher); " + gpu.name +
                     (cc ? " is " + capability() : " is not one")});
  else if (f.recipe == "blockwise" && (!cc || *cc < 90))
    v.push_back({"fp8_recipe", f.recipe,
                 "Float8BlockScaling needs a Hopper GPU or newer (compute capability 9.0); " +
                     gpu.name + (cc ? " is " + capability() : " is not one")});
  if (v.empty() && gpu.peak(Precision::fp8).value <= 0)
    v.push_back({"fp8", f.format,
                 "the topology's GPU " + gpu.name +
                     " has no FP8 tensor rate (gpu.peak_tflops.fp8 in its preset): FP8 GEMMs "
                     "cannot be priced"});
  if (!v.empty()) throw ConfigError(v);
}

}  // namespace tandem::sim
