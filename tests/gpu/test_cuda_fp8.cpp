// The FP8 ops of the cuda binding against the cpu binding (issue 32's GPU check): every
// recipe's quantization code for code, with its scales and amax; FP8 GEMMs in every
// transpose, both formats and both outputs, on the FP8 tensor cores (cuBLASLt, where the
// GPU has them and the shape allows: kernels/cuda/fp8_lt_plan.hpp) and off them (decoded),
// and which of the two ran; delayed scaling's history update, the amax of a tensor and
// current scaling's scales. Skipped, with the CUDA runtime's reason, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tests/gpu/gpu_test_support.hpp"

namespace tandem::testing {
namespace {

class CudaFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_REQUIRE_GPU();
    d_ = std::make_unique<TwoDevices>();
  }
  TwoDevices& d() { return *d_; }
  CpuDevice& cpu() { return d_->cpu(); }
  CudaDevice& gpu() { return d_->gpu(); }
  Stream& cs() { return d_->cpu().default_stream(); }
  Stream& gs() { return d_->gpu().default_stream(); }

  struct Fp8Pair {
    Fp8Tensor cpu, gpu;
  };
  // x quantized on both bindings the same way (current scaling unless `scale` is given).
  Fp8Pair quantize(const TensorPair& x, std::int64_t rows, std::int64_t cols,
                   const Fp8Layout& layout, const TensorPair* scale = nullptr,
                   TensorPair* amax = nullptr) {
    Fp8Pair q{allocate_fp8(cpu(), rows, cols, layout), allocate_fp8(gpu(), rows, cols, layout)};
    cpu().fp8_quantize(cs(), {.input = x.cpu,
                              .output = q.cpu,
                              .scale = scale ? &scale->cpu : nullptr,
                              .amax = amax ? &amax->cpu : nullptr});
    gpu().fp8_quantize(gs(), {.input = x.gpu,
                              .output = q.gpu,
                              .scale = scale ? &scale->gpu : nullptr,
                              .amax = amax ? &amax->gpu : nullptr});
    return q;
  }

 private:
  std::unique_ptr<TwoDevices> d_;
};

// A row of large values among small ones, so blocks get scales of their own.
Floats spread_values(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  Floats v = random_floats(static_cast<std::size_t>(rows * cols), seed, -3.0f, 3.0f);
  for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(7 * cols + c)] *= 300.0f;
  return v;
}

TEST_F(CudaFp8, QuantizationMatchesTheCpuCodeForCode) {
  const std::int64_t rows = 200, cols = 384;
  struct Recipe {
    const char* name;
    Fp8Layout layout;
    bool given_scale;
  };
  const std::vector<Recipe> recipes = {
      {"delayed", {.scaling = Fp8Scaling::tensor}, true},
      {"tensorwise", {.scaling = Fp8Scaling::tensor}, false},
      {"blockwise 1x128",
       {.scaling = Fp8Scaling::block, .block_rows = 1, .block_cols = 128},
       false},
      {"blockwise 128x128",
       {.scaling = Fp8Scaling::block, .block_rows = 128, .block_cols = 128},
       false},
      {"mxfp8 1x32", {.scaling = Fp8Scaling::mx, .block_rows = 1, .block_cols = 32}, false},
      {"mxfp8 32x1", {.scaling = Fp8Scaling::mx, .block_rows = 32, .block_cols = 1}, false},
  };
  std::uint64_t seed = 11;
  for (const Recipe& r : recipes)
    for (Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      Fp8Layout layout = r.layout;
      layout.format = format;
      const auto x = d().input({rows, cols}, DType::fp32, spread_values(rows, cols, seed++));
      const auto scale = d().input({1}, DType::fp32, {0.37f});
      auto amax = d().input({1}, DType::fp32, {0.0f});
      const Fp8Pair q = quantize(x, rows, cols, layout, r.given_scale ? &scale : nullptr, &amax);
      const std::string what = std::string(r.name) + " " + std::string(fp8_format_name(format));
      EXPECT_TRUE(d().same_ints<std::int32_t>({q.cpu.codes, q.gpu.codes})) << what;
      EXPECT_TRUE(d().close({q.cpu.scale_inv, q.gpu.scale_inv}, 0)) << what;
      EXPECT_TRUE(d().close(amax, 0)) << what;
    }
}

TEST_F(CudaFp8, GemmsMatchTheCpuOnTheTensorCoresAndOff) {
  struct Case {
    std::int64_t m, n, k;
    bool tensor_cores;  // where the GPU has FP8 tensor cores
  };
  const bool has_fp8 = gpu().compute_capability() >= 89;
  std::uint64_t seed = 101;
  for (const Case& shape : {Case{64, 48, 96, true}, Case{33, 65, 130, false}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (Fp8Format fa : {Fp8Format::e4m3, Fp8Format::e5m2}) {
          const std::int64_t M = shape.m, N = shape.n, K = shape.k;
          const auto a = d().random(ta ? Shape{K, M} : Shape{M, K}, DType::fp32, seed++);
          const auto b = d().random(tb ? Shape{N, K} : Shape{K, N}, DType::fp32, seed++, -2, 2);
          const Fp8Pair qa = quantize(a, a.cpu.shape[0], a.cpu.shape[1], {.format = fa});
          const Fp8Pair qb =
              quantize(b, b.cpu.shape[0], b.cpu.shape[1], {.format = Fp8Format::e4m3});
          const std::string what = "M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
                                   std::to_string(K) + " transpose_a " + std::to_string(ta) +
                                   " transpose_b " + std::to_string(tb) + " A " +
                                   std::string(fp8_format_name(fa));
          const std::int64_t before = gpu().fp8_tensor_core_gemms();
          // Written in bf16 (β = 0), as a linear layer's output.
          auto y = d().poisoned({M, N}, DType::bf16);
          cpu().fp8_gemm(cs(), {.a = qa.cpu,
                                .b = qb.cpu,
                                .c = y.cpu,
                                .transpose_a = ta,
                                .transpose_b = tb,
                                .alpha = 0.5f});
          gpu().fp8_gemm(gs(), {.a = qa.gpu,
                                .b = qb.gpu,
                                .c = y.gpu,
                                .transpose_a = ta,
                                .transpose_b = tb,
                                .alpha = 0.5f});
          EXPECT_TRUE(d().close(y, 1e-2)) << what;
          // Accumulated (β = 1) into fp32, as a weight gradient into the main gradient. The
          // products of two FP8 values are exact in fp32; only the order of the sums (and
          // the tensor cores' accumulator between its promotions to fp32) differs.
          auto acc = d().random({M, N}, DType::fp32, seed++);
          cpu().fp8_gemm(cs(), {.a = qa.cpu,
                                .b = qb.cpu,
                                .c = acc.cpu,
                                .transpose_a = ta,
                                .transpose_b = tb,
                                .beta = 1});
          gpu().fp8_gemm(gs(), {.a = qa.gpu,
                                .b = qb.gpu,
                                .c = acc.gpu,
                                .transpose_a = ta,
                                .transpose_b = tb,
                                .beta = 1});
          EXPECT_TRUE(d().close(acc, 1e-3)) << what;
          const std::int64_t expected = shape.tensor_cores && has_fp8 ? 2 : 0;
          EXPECT_EQ(gpu().fp8_tensor_core_gemms() - before, expected)
              << what << " (compute capability " << gpu().compute_capability() << ")";
        }
}

TEST_F(CudaFp8, BlockScaledGemmsAreDecodedAndMatchTheCpu) {
  const std::int64_t M = 128, N = 256, K = 256;
  const Fp8Layout rows_1x128{.scaling = Fp8Scaling::block, .block_rows = 1, .block_cols = 128};
  const Fp8Layout blocks_128{.scaling = Fp8Scaling::block, .block_rows = 128, .block_cols = 128};
  const auto a = d().input({M, K}, DType::fp32, spread_values(M, K, 5));
  const auto b = d().random({N, K}, DType::fp32, 6);
  const Fp8Pair qa = quantize(a, M, K, rows_1x128), qb = quantize(b, N, K, blocks_128);
  const std::int64_t before = gpu().fp8_tensor_core_gemms();
  auto y = d().poisoned({M, N}, DType::fp32);
  cpu().fp8_gemm(cs(), {.a = qa.cpu, .b = qb.cpu, .c = y.cpu, .transpose_b = true});
  gpu().fp8_gemm(gs(), {.a = qa.gpu, .b = qb.gpu, .c = y.gpu, .transpose_b = true});
  EXPECT_TRUE(d().close(y, 1e-5));
  EXPECT_EQ(gpu().fp8_tensor_core_gemms(), before);
}

// FP8 weights live in the parameter buffer, where a tensor may start 16 or 128 bytes past a
// 256-byte boundary (buckets end on multiples of lcm(4·dp, 128) codes): cuBLASLt must be
// told (lt_preference), or its heuristic may pick a kernel that needs 256 bytes.
TEST_F(CudaFp8, GemmsOnOperandsThatStartInsideABufferMatchTheCpu) {
  const std::int64_t M = 64, N = 48, K = 96;
  const auto x = d().random({M, K}, DType::fp32, 71);
  const auto w = d().random({N, K}, DType::fp32, 72, -2, 2);
  // GPU codes as views 128 and 16 bytes (32 and 4 int32 words) into larger buffers.
  auto offset_codes = [&](std::int64_t rows, std::int64_t cols, std::int64_t words_in) {
    Fp8Tensor t = allocate_fp8(gpu(), rows, cols, {});
    const Tensor buffer =
        gpu().allocate(Shape{t.codes.numel() + words_in + 64}, DType::int32, MemoryUse::fp8);
    t.codes = buffer.view(t.codes.shape, words_in);
    return t;
  };
  Fp8Pair qx{allocate_fp8(cpu(), M, K, {}), offset_codes(M, K, 32)};
  Fp8Pair qw{allocate_fp8(cpu(), N, K, {}), offset_codes(N, K, 4)};
  cpu().fp8_quantize(cs(), {.input = x.cpu, .output = qx.cpu});
  gpu().fp8_quantize(gs(), {.input = x.gpu, .output = qx.gpu});
  cpu().fp8_quantize(cs(), {.input = w.cpu, .output = qw.cpu});
  gpu().fp8_quantize(gs(), {.input = w.gpu, .output = qw.gpu});
  EXPECT_TRUE(d().same_ints<std::int32_t>({qx.cpu.codes, qx.gpu.codes}));
  const std::int64_t before = gpu().fp8_tensor_core_gemms();
  auto y = d().poisoned({M, N}, DType::bf16);
  cpu().fp8_gemm(cs(), {.a = qx.cpu, .b = qw.cpu, .c = y.cpu, .transpose_b = true});
  gpu().fp8_gemm(gs(), {.a = qx.gpu, .b = qw.gpu, .c = y.gpu, .transpose_b = true});
  EXPECT_TRUE(d().close(y, 1e-2));
  const std::int64_t expected = gpu().compute_capability() >= 89 ? 1 : 0;
  EXPECT_EQ(gpu().fp8_tensor_core_gemms() - before, expected);
}

TEST_F(CudaFp8, ScaleUpdateAmaxAndCurrentScalesMatchTheCpu) {
  const std::vector<Fp8Format> formats = {Fp8Format::e4m3, Fp8Format::e5m2, Fp8Format::e4m3};
  for (bool use_max : {false, true}) {
    auto history = d().input({4, 3}, DType::fp32, {1, 2, 0, 3, 0.5f, 0, 0.25f, 9, 0, 7, 1, 0});
    auto scale = d().input({3}, DType::fp32, {1, 1, 2});
    auto amax = d().input({3}, DType::fp32, {5, 0.125f, 0});
    cpu().fp8_update_scale(cs(), {.amax_history = history.cpu,
                                  .scale = scale.cpu,
                                  .amax = amax.cpu,
                                  .formats = formats,
                                  .use_max = use_max,
                                  .margin = 1});
    gpu().fp8_update_scale(gs(), {.amax_history = history.gpu,
                                  .scale = scale.gpu,
                                  .amax = amax.gpu,
                                  .formats = formats,
                                  .use_max = use_max,
                                  .margin = 1});
    EXPECT_TRUE(d().close(history, 0)) << "use_max " << use_max;
    EXPECT_TRUE(d().close(scale, 0)) << "use_max " << use_max;
    EXPECT_TRUE(d().close(amax, 0)) << "use_max " << use_max;
  }
  // More tensors than one launch takes (64): the GPU updates them 64 columns at a time.
  {
    const std::int64_t tensors = 150, length = 5;
    std::vector<Fp8Format> many(static_cast<std::size_t>(tensors), Fp8Format::e4m3);
    for (std::size_t t = 0; t < many.size(); t += 3) many[t] = Fp8Format::e5m2;
    auto history = d().random({length, tensors}, DType::fp32, 31, 0, 50);
    auto scale = d().random({tensors}, DType::fp32, 32, 0.5f, 4);
    auto amax = d().random({tensors}, DType::fp32, 33, 0, 80);
    for (bool use_max : {false, true}) {
      cpu().fp8_update_scale(cs(), {.amax_history = history.cpu,
                                    .scale = scale.cpu,
                                    .amax = amax.cpu,
                                    .formats = many,
                                    .use_max = use_max});
      gpu().fp8_update_scale(gs(), {.amax_history = history.gpu,
                                    .scale = scale.gpu,
                                    .amax = amax.gpu,
                                    .formats = many,
                                    .use_max = use_max});
      EXPECT_TRUE(d().close(history, 0)) << tensors << " tensors, use_max " << use_max;
      EXPECT_TRUE(d().close(scale, 0)) << tensors << " tensors, use_max " << use_max;
      EXPECT_TRUE(d().close(amax, 0)) << tensors << " tensors, use_max " << use_max;
    }
  }
  // amax over more than one chunk of the GPU's reduction, then current scaling's scales.
  const std::int64_t n = 3 * (1 << 16) + 17;
  const auto x = d().random({n}, DType::bf16, 21, -40, 40);
  auto amax = d().input({3}, DType::fp32, {0, 1, 2});
  Tensor first_cpu = amax.cpu.view({1}), first_gpu = amax.gpu.view({1});
  cpu().fp8_amax(cs(), x.cpu, first_cpu);
  gpu().fp8_amax(gs(), x.gpu, first_gpu);
  EXPECT_TRUE(d().close(amax, 0));
  auto scale = d().poisoned({3}, DType::fp32), scale_inv = d().poisoned({3}, DType::fp32);
  cpu().fp8_compute_scale(
      cs(),
      {.amax = &amax.cpu, .scale = scale.cpu, .scale_inv = scale_inv.cpu, .formats = formats});
  gpu().fp8_compute_scale(
      gs(),
      {.amax = &amax.gpu, .scale = scale.gpu, .scale_inv = scale_inv.gpu, .formats = formats});
  EXPECT_TRUE(d().close(scale, 0));
  EXPECT_TRUE(d().close(scale_inv, 0));
}

}  // namespace
}  // namespace tandem::testing
