// TANDEM_HOST_DEVICE marks the per-element and per-row math of the kernels so that the
// CPU loops in kernels/cpu/ and a later CUDA binding call the very same function: the
// CPU tests then check the arithmetic a GPU kernel will run. Functions marked with it
// use only arithmetic, <cmath> functions CUDA also provides, and float_from_bits below.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

// Lets a host loop that sums floats vectorise (`TANDEM_SIMD_SUM(s) for (...) s += ...;`):
// without it the compiler keeps the sum's order, one add at a time. The order it picks
// instead is fixed at compile time, so results stay deterministic. Empty in device code
// and in translation units built without OpenMP.
#define TANDEM_PRAGMA(x) _Pragma(#x)
#if defined(_OPENMP) && !defined(__CUDA_ARCH__)
#define TANDEM_SIMD_SUM(...) TANDEM_PRAGMA(omp simd reduction(+ : __VA_ARGS__))
#else
#define TANDEM_SIMD_SUM(...)
#endif

namespace tandem::kernels::math {

// The float whose IEEE-754 bit pattern is `bits` (used to build 2^n in exp_approx).
TANDEM_HOST_DEVICE inline float float_from_bits(std::int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

// The IEEE-754 bit pattern of `x` (used by the bf16 conversions of bf16.hpp).
TANDEM_HOST_DEVICE inline std::uint32_t bits_from_float(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}

}  // namespace tandem::kernels::math
