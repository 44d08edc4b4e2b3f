// bfloat16 storage of activations and weights on the cuda binding: the top 16 bits of an
// IEEE-754 float (sign, 8 exponent bits, 7 mantissa bits). Kernels load bf16, compute in
// fp32 and store bf16; these two conversions are the only place the rounding happens, and
// CPU tests (and the CPU references of the GPU tests) round with the very same function.
// Rounding is to nearest, ties to even, as __float2bfloat16_rn does; NaN stays a (quiet)
// NaN, ±inf stays ±inf, and finite values beyond bf16's range round to ±inf.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// The bf16 bit pattern nearest to x (ties to even).
TANDEM_HOST_DEVICE inline std::uint16_t bf16_from_float(float x) {
  const std::uint32_t u = bits_from_float(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep the sign and top payload, force quiet
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t ties_to_even = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + ties_to_even) >> 16);
}

// The float a bf16 bit pattern encodes (exact).
TANDEM_HOST_DEVICE inline float float_from_bf16(std::uint16_t b) {
  return float_from_bits(static_cast<std::int32_t>(static_cast<std::uint32_t>(b) << 16));
}

// x as bf16 storage would hold it.
TANDEM_HOST_DEVICE inline float round_to_bf16(float x) {
  return float_from_bf16(bf16_from_float(x));
}

}  // namespace tandem::kernels::math
