// What the GPU tests share: the runtime decision to skip without a GPU (with the reason
// the CUDA runtime gives), and pairs of tensors — one on the cpu binding, one on the cuda
// binding — holding the same values, so every Device op can be run on both and compared
// (ggml's cross-backend operator test). bf16 inputs are rounded to bf16 on the cpu side
// too (kernels/math/bf16.hpp), so both bindings see the very same numbers; outputs start
// poisoned (NaN) so an element a kernel forgets to write fails the comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_info.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/math/bf16.hpp"
#include "kernels/math/fp16.hpp"

namespace tandem::testing {

using Floats = std::vector<float>;

// GTEST_SKIP()s the calling test (from SetUp or the body) when no GPU is visible.
#define TANDEM_REQUIRE_GPU()                                                                    \
  do {                                                                                          \
    const auto availability = ::tandem::cuda_availability();                                    \
    if (availability.devices == 0) GTEST_SKIP() << "needs a CUDA GPU: " << availability.reason; \
  } while (false)

inline Floats random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The same tensor on both bindings: cpu always fp32, gpu in the test's dtype.
struct TensorPair {
  Tensor cpu;
  Tensor gpu;
};

class TwoDevices {
 public:
  TwoDevices() : gpu_(std::make_unique<CudaDevice>(0)) {}

  CpuDevice& cpu() { return cpu_; }
  CudaDevice& gpu() { return *gpu_; }

  // Holds `values` (rounded to bf16 or fp16 on both sides when dtype is one of them).
  TensorPair input(const Shape& shape, DType dtype, Floats values) {
    if (dtype == DType::bf16)
      for (float& v : values) v = kernels::math::round_to_bf16(v);
    if (dtype == DType::fp16)
      for (float& v : values) v = kernels::math::round_to_fp16(v);
    TensorPair p{cpu_.allocate(shape, DType::fp32), gpu_->allocate(shape, dtype)};
    auto produce = Device::ProduceFloats(
        [&](std::span<float> out) { std::copy(values.begin(), values.end(), out.begin()); });
    cpu_.upload(cpu_.default_stream(), p.cpu, produce);
    gpu_->upload(gpu_->default_stream(), p.gpu, produce);
    return p;
  }
  TensorPair random(const Shape& shape, DType dtype, std::uint64_t seed, float lo = -1.0f,
                    float hi = 1.0f) {
    return input(shape, dtype,
                 random_floats(static_cast<std::size_t>(shape.numel()), seed, lo, hi));
  }
  // Uninitialised in spirit: every element NaN.
  TensorPair poisoned(const Shape& shape, DType dtype) {
    TensorPair p{cpu_.allocate(shape, DType::fp32), gpu_->allocate(shape, dtype)};
    cpu_.fill(cpu_.default_stream(), p.cpu, NAN);
    gpu_->fill(gpu_->default_stream(), p.gpu, NAN);
    return p;
  }
  TensorPair ids(const Shape& shape, const std::vector<std::int32_t>& values) {
    TensorPair p{cpu_.allocate(shape, DType::int32), gpu_->allocate(shape, DType::int32)};
    auto produce = Device::ProduceInts(
        [&](std::span<std::int32_t> out) { std::copy(values.begin(), values.end(), out.begin()); });
    cpu_.upload(cpu_.default_stream(), p.cpu, produce);
    gpu_->upload(gpu_->default_stream(), p.gpu, produce);
    return p;
  }

  // Uninitialised integer tensors (int32 or int64) on both bindings.
  TensorPair integers(const Shape& shape, DType dtype) {
    return {cpu_.allocate(shape, dtype), gpu_->allocate(shape, dtype)};
  }
  // The elements of an integer tensor (T = std::int32_t or std::int64_t) of either binding,
  // after the gpu's default stream has drained.
  template <typename T>
  std::vector<T> read_ints(const Tensor& t, bool on_gpu) {
    std::vector<T> host(static_cast<std::size_t>(t.numel()));
    if (!on_gpu) {
      std::copy(t.data<T>(), t.data<T>() + t.numel(), host.begin());
      return host;
    }
    gpu_->default_stream().synchronize();
    TANDEM_CUDA_CHECK(
        cudaMemcpy(host.data(), t.data<T>(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Both sides hold the same integers.
  template <typename T>
  ::testing::AssertionResult same_ints(const TensorPair& p) {
    const std::vector<T> g = read_ints<T>(p.gpu, true), c = read_ints<T>(p.cpu, false);
    for (std::size_t i = 0; i < g.size(); ++i)
      if (g[i] != c[i])
        return ::testing::AssertionFailure() << "element " << i << " of " << p.gpu.shape.to_string()
                                             << ": gpu " << g[i] << ", cpu " << c[i];
    return ::testing::AssertionSuccess();
  }

  Floats read_cpu(const Tensor& t) {
    Floats v(static_cast<std::size_t>(t.numel()));
    cpu_.download(cpu_.default_stream(), t, v);
    return v;
  }
  Floats read_gpu(const Tensor& t) {
    Floats v(static_cast<std::size_t>(t.numel()));
    gpu_->download(gpu_->default_stream(), t, v);
    return v;
  }

  // max |gpu − cpu| ≤ rtol · max |cpu| over the tensor (relative error of the tensor), and
  // every gpu element finite.
  ::testing::AssertionResult close(const TensorPair& p, double rtol) {
    const Floats g = read_gpu(p.gpu), c = read_cpu(p.cpu);
    double max_ref = 0, max_err = 0;
    std::size_t worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (!std::isfinite(g[i]) || !std::isfinite(c[i]))
        return ::testing::AssertionFailure()
               << "element " << i << " of " << p.gpu.shape.to_string() << ": gpu " << g[i]
               << ", cpu " << c[i] << " (not finite: unwritten or overflowed)";
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(c[i])));
      const double err = std::fabs(static_cast<double>(g[i]) - static_cast<double>(c[i]));
      if (err > max_err) {
        max_err = err;
        worst = i;
      }
    }
    const double rel = max_err / std::max(max_ref, 1e-30);
    if (rel <= rtol) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "relative error " << rel << " > " << rtol << " in " << p.gpu.shape.to_string()
           << "; worst element " << worst << ": gpu " << g[worst] << ", cpu " << c[worst];
  }

 private:
  CpuDevice cpu_;
  std::unique_ptr<CudaDevice> gpu_;
};

// The tolerance of the issue: 1e-5 for fp32 tensors, 1e-2 for 16-bit ones (bf16 and fp16,
// whose 3 more mantissa bits make it the looser bound there).
inline double tolerance(DType t) {
  return t == DType::fp32 ? 1e-5 : 1e-2;
}

}  // namespace tandem::testing
