// Which FP8 GEMMs accumulate fast: Transformer Engine runs a linear layer's forward GEMM
// with Hopper's fast accumulation and splits the accumulator for dgrad and wgrad
// (_2X_ACC_FPROP False, _2X_ACC_DGRAD and _2X_ACC_WGRAD True). The layer's fp8_gemm calls
// are read off the cpu binding's op log: four forward GEMMs (QKV, projection, FC1, FC2), all
// fast; eight backward ones (each layer's dgrad and wgrad), none fast. A model that left
// the flag at its default, or set it everywhere, fails one of the two counts.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tests/model/fp8_layer.hpp"

namespace tandem {
namespace {

struct Fp8GemmCount {
  int fast = 0, split = 0;
};

// The fp8_gemm lines of log[first, last).
Fp8GemmCount count_fp8_gemms(const std::vector<std::string>& log, std::size_t first,
                             std::size_t last) {
  Fp8GemmCount c;
  for (std::size_t i = first; i < last; ++i) {
    if (log[i].rfind("fp8_gemm ", 0) != 0) continue;
    if (log[i].find(" fast-accumulate") != std::string::npos)
      ++c.fast;
    else
      ++c.split;
  }
  return c;
}

TEST(Fp8Accumulation, ForwardGemmsAccumulateFastAndBackwardOnesSplit) {
  for (const char* recipe : {"delayed", "tensorwise"}) {
    testing::Fp8Layer l(Fp8Config{.format = "hybrid", .recipe = recipe});
    const auto& log = l.device.log();
    LayerActivations saved;
    const std::size_t start = log.size();
    Tensor out = l.layer.forward(l.env, l.x, saved);
    const std::size_t forward_end = log.size();
    Tensor grad =
        l.device.allocate(Shape{testing::Fp8Layer::rows, testing::Fp8Layer::hidden}, DType::fp32);
    l.device.fill(l.device.default_stream(), grad, 1e-3f);
    Tensor dx = l.layer.backward(l.env, grad, saved);

    const Fp8GemmCount forward = count_fp8_gemms(log, start, forward_end);
    const Fp8GemmCount backward = count_fp8_gemms(log, forward_end, log.size());
    EXPECT_EQ(forward.fast, 4) << recipe;
    EXPECT_EQ(forward.split, 0) << recipe;
    EXPECT_EQ(backward.fast, 0) << recipe;
    EXPECT_EQ(backward.split, 8) << recipe;
  }
}

}  // namespace
}  // namespace tandem
