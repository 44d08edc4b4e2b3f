// Device-side helpers every .cu file of kernels/cuda shares: loading and storing a Floats
// element in its precision (through kernels/math/bf16.hpp and fp16.hpp, the rounding the CPU tests
// check), warp and block reductions in a fixed order (deterministic), and grid sizing.
#pragma once

#include <cstdint>

#include "kernels/cuda/ops.hpp"
#include "kernels/math/bf16.hpp"
#include "kernels/math/fp16.hpp"

namespace tandem::kernels::cuda {

inline constexpr int kThreads = 256;  // threads per block of elementwise kernels

__device__ inline float load(ConstFloats p, std::int64_t i) {
  if (p.precision == Precision::bf16)
    return math::float_from_bf16(static_cast<const std::uint16_t*>(p.data)[i]);
  if (p.precision == Precision::fp16)
    return math::float_from_fp16(static_cast<const std::uint16_t*>(p.data)[i]);
  return static_cast<const float*>(p.data)[i];
}

__device__ inline void store(Floats p, std::int64_t i, float v) {
  if (p.precision == Precision::bf16)
    static_cast<std::uint16_t*>(p.data)[i] = math::bf16_from_float(v);
  else if (p.precision == Precision::fp16)
    static_cast<std::uint16_t*>(p.data)[i] = math::fp16_from_float(v);
  else
    static_cast<float*>(p.data)[i] = v;
}

// Blocks for a grid-stride loop over n elements (at least 1, at most 2^16).
inline unsigned int grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

// for (i = this thread's first element; i < n; i += all threads of the grid)
#define TANDEM_GRID_STRIDE(i, n)                                                                   \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T total = lane < warps ? partial[lane] : T(0);
  return warp_sum(total);
}

__device__ inline float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const float m = lane < warps ? partial[lane] : -3.402823466e38f;
  return warp_max(m);
}

}  // namespace tandem::kernels::cuda
