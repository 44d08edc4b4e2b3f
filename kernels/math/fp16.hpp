// IEEE-754 half (fp16) storage on the cuda binding: sign, 5 exponent bits, 10 mantissa bits,
// largest finite 65504, subnormals down to 2^-24. As with bf16 (bf16.hpp), kernels load fp16,
// compute in fp32 and store fp16, and these two conversions are where the rounding happens:
// to nearest, ties to even, as __float2half_rn does; NaN stays a quiet NaN, ±inf stays ±inf,
// finite values from 65520 up round to ±inf, tiny ones to subnormals or ±0.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// The fp16 bit pattern nearest to x (ties to even).
TANDEM_HOST_DEVICE inline std::uint16_t fp16_from_float(float x) {
  const std::uint32_t u = bits_from_float(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520: inf
  if (a < 0x38800000u) {
    // Below 2^-14, fp16's subnormals (steps of 2^-24): the float's 24-bit significand
    // shifted right, rounded to nearest even; 2^-25 and less (half a step) round to 0.
    if (a < 0x33000000u) return sign;
    const std::uint32_t exponent = a >> 23;  // 102 .. 112
    const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;  // 14 .. 24
    const std::uint32_t half = 1u << (shift - 1);
    std::uint32_t q = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 → 15) and round the 23-bit mantissa to 10 bits; a carry
  // out of the mantissa moves into the exponent, as it should (up to 0x7c00, inf).
  const std::uint32_t rebased = a - (112u << 23);
  const std::uint32_t ties_to_even = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + ties_to_even) >> 13));
}

// The float an fp16 bit pattern encodes (exact).
TANDEM_HOST_DEVICE inline float float_from_fp16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu)  // inf or NaN
    return float_from_bits(static_cast<std::int32_t>(sign | 0x7f800000u | (mantissa << 13)));
  if (exponent == 0) {  // ±0 or a subnormal: mantissa · 2^-24, exact in float
    const float v = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return float_from_bits(
      static_cast<std::int32_t>(sign | ((exponent + 112u) << 23) | (mantissa << 13)));
}

// x as fp16 storage would hold it.
TANDEM_HOST_DEVICE inline float round_to_fp16(float x) {
  return float_from_fp16(fp16_from_float(x));
}

}  // namespace tandem::kernels::math
