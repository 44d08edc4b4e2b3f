// The cost model's fused attention prices against launches measured on a real GPU
// (topology/attention_reference.csv: PyTorch's scaled_dot_product_attention, bf16, causal,
// cuDNN's kernel and FlashAttention-2, 8-128 heads x micro batch, sequence 1024-8192, head
// dim 64, 128 and 192, on one H200, whose tensor cores, clock and 132 SMs are the H100
// SXM's). dgx-h100's long-launch fractions and the kernels' tail and per-tile costs
// (sim/op_cost_llama.hpp) were fitted on the head-dim-128 rows of sequence 2048 and more;
// the tests hold the model to every row, and show that one fraction for every shape, the
// model before, cannot price them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sim/cost_model.hpp"
#include "sim/op_cost_llama.hpp"
#include "tests/sim/attention_launch.hpp"
#include "tests/sim/reference_csv.hpp"
#include "topology/topology_io.hpp"

namespace tandem::sim {
namespace {

struct MeasuredAttention {
  std::string library;  // OpDesc::library: "" (cuDNN's) or "flash_attn"
  std::int64_t batch_heads = 0, seq = 0, head_dim = 0;
  double forward_seconds = 0, backward_seconds = 0;
};

std::vector<MeasuredAttention> measured() {
  std::vector<MeasuredAttention> rows;
  for (const auto& f : reference_rows("topology/attention_reference.csv", 9))
    rows.push_back({f[1] == "cudnn" ? "" : f[1], std::stoll(f[2]) * std::stoll(f[3]),
                    std::stoll(f[5]), std::stoll(f[6]), std::stod(f[7]), std::stod(f[8])});
  return rows;
}

OpDesc desc(const MeasuredAttention& a, bool backward) {
  return causal_attention_launch(a.batch_heads, a.seq, a.head_dim, a.library, backward);
}

// The H100 preset at the clock the launches ran at (short bursts, boosted; the preset's
// sustained clock fraction is for a training step), without the launch a queued kernel hides.
double modelled(const GpuSpec& gpu, const MeasuredAttention& a, bool backward) {
  return CostModel(gpu).model_seconds(desc(a, backward)) - gpu.kernel_launch.value;
}

GpuSpec h100_at_microbenchmark_clock() {
  GpuSpec gpu = load_topology("dgx-h100").gpu;
  gpu.sustained_clock_fraction = 0;
  return gpu;
}

struct Fit {
  double geomean = 0, worst = 1;  // of model / measured; worst the farthest from 1
  int rows = 0;
};

Fit judge(const GpuSpec& gpu, bool (*keep)(const MeasuredAttention&)) {
  Fit fit;
  double log_sum = 0;
  for (const auto& a : measured()) {
    if (!keep(a)) continue;
    for (const bool backward : {false, true}) {
      const double ratio =
          modelled(gpu, a, backward) / (backward ? a.backward_seconds : a.forward_seconds);
      log_sum += std::log(ratio);
      if (std::abs(std::log(ratio)) > std::abs(std::log(fit.worst))) fit.worst = ratio;
      ++fit.rows;
    }
  }
  fit.geomean = std::exp(log_sum / fit.rows);
  return fit;
}

bool head_dim_128_training_lengths(const MeasuredAttention& a) {
  return a.head_dim == 128 && a.seq >= 2048;
}
bool cudnn_training_lengths(const MeasuredAttention& a) {
  return a.library.empty() && head_dim_128_training_lengths(a);
}
bool flash_training_lengths(const MeasuredAttention& a) {
  return !a.library.empty() && head_dim_128_training_lengths(a);
}
bool every_row(const MeasuredAttention&) {
  return true;
}

TEST(AttentionReference, TheTableHoldsBothLibrariesAndTheShapesOfThePublishedRows) {
  const auto rows = measured();
  ASSERT_GE(rows.size(), 100u);
  int cudnn = 0, few_heads = 0;
  for (const auto& a : rows) {
    cudnn += a.library.empty();
    few_heads += a.batch_heads <= 12 && a.seq == 4096;  // a tp-8 rank of a 70B-class model
  }
  EXPECT_EQ(cudnn * 2, static_cast<int>(rows.size()));
  EXPECT_GE(few_heads, 8);
}

// The preset prices the rows `keep` selects: at least `rows` of them (two directions each),
// model / measured within `geomean` on the geometric mean and within `worst` on every row.
void expect_prices(bool (*keep)(const MeasuredAttention&), int rows, double geomean, double worst) {
  const Fit fit = judge(h100_at_microbenchmark_clock(), keep);
  EXPECT_GE(fit.rows, rows);
  EXPECT_NEAR(fit.geomean, 1.0, geomean);
  EXPECT_NEAR(fit.worst, 1.0, worst);
}

// cuDNN's kernel is the one Transformer Engine runs, in every published H100 row.
TEST(AttentionReference, ThePresetPricesCudnnsTrainingShapesWithinAnEighth) {
  expect_prices(cudnn_training_lengths, 60, 0.03, 0.125);
}

TEST(AttentionReference, ThePresetPricesFlashAttentionsTrainingShapesWithinAQuarter) {
  // FlashAttention-2's forward at 8 heads of 2048 ran 1.24 times faster than priced.
  expect_prices(flash_training_lengths, 60, 0.03, 0.25);
}

TEST(AttentionReference, EveryHeadDimAndLengthWithinAThird) {
  // Sequence 1024 and head dims 64 and 192 were not fitted on (the head-dim factors are
  // their means): the model holds them less tightly.
  expect_prices(every_row, 200, 0.05, 0.35);
}

TEST(AttentionReference, OneFractionForEveryShapeCannotPriceThem) {
  // The model before: one rate for every launch, the one at the FlashAttention-3 paper's
  // benchmark shape (16k tokens, 16 heads of 128, sequence 4096). Even with that rate taken
  // from these runs (cuDNN's 587 and 494 TFLOP/s, FlashAttention-2's 307 and 256), the
  // 8-head launches of a tensor-parallel rank run 1.6 times slower than it prices them.
  double worst = 1;
  for (const auto& a : measured()) {
    if (!head_dim_128_training_lengths(a)) continue;
    for (const bool backward : {false, true}) {
      const double tflops = a.library.empty() ? (backward ? 494 : 587) : (backward ? 256 : 307);
      const double flat = desc(a, backward).flops / (tflops * 1e12);
      worst = std::min(worst, flat / (backward ? a.backward_seconds : a.forward_seconds));
    }
  }
  EXPECT_LT(worst, 0.7);
}

TEST(AttentionReference, FewerHeadsOrShorterSequencesRunFurtherFromTheLongLaunchRate) {
  const GpuSpec gpu = load_topology("dgx-h100").gpu;
  auto efficiency = [&](std::int64_t heads, std::int64_t seq) {
    return fused_attention_shape_efficiency(desc({"", heads, seq, 128, 0, 0}, false), gpu.sm_count);
  };
  EXPECT_LT(efficiency(8, 4096), efficiency(16, 4096));
  EXPECT_LT(efficiency(16, 2048), efficiency(16, 4096));
  EXPECT_LT(efficiency(64, 8192), 1.0);
  // Measured: 368 against 587 TFLOP/s forward at 8 and 64 heads x micro batch of 4096.
  EXPECT_NEAR(efficiency(8, 4096) / efficiency(64, 4096), 368.0 / 587.0, 0.05);
}

}  // namespace
}  // namespace tandem::sim
