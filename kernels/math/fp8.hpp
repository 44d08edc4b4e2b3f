// FP8 numerics of Transformer Engine's recipes, one function per step, so the cpu binding's
// software FP8 and a CUDA kernel round alike: the two formats (E4M3 in its "fn" variant —
// no infinities, max 448, one NaN code per sign — and E5M2 with IEEE-style inf and NaN,
// max 57344), encoding with round to nearest, ties to even, saturating to the largest
// finite value as TE's casts do (satfinite), decoding, E8M0 scales (a bare biased
// exponent, OCP MX), and the scale rules of each recipe:
//   delayed      scale = fp8_max / amax(history) / 2^margin, the old scale kept when amax is 0
//                or not finite (TE's DelayedScaling, Megatron's --fp8-margin)
//   tensorwise   scale = fp8_max / amax of the tensor itself (TE's Float8CurrentScaling)
//   blockwise    per 1×128 or 128×128 block, scale = 2^floor(log2(fp8_max / amax))
//                (TE's Float8BlockScaling, power-of-two scales)
//   mxfp8        per 32 elements, an E8M0 scale_inv 2^ceil(log2(amax / fp8_max)), the
//                exponent rounded up as TE's MXFP8 casts round it (float_to_e8m0), so no
//                element saturates; OCP MX v1.0 §6.3 rounds down instead
// A quantized element is q = encode(x · scale); it stands for decode(q) · scale_inv.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

enum class Fp8Format : std::uint8_t { e4m3, e5m2 };

// The shape of a format: mantissa bits, exponent bias, the smallest normal exponent, the
// largest finite value and its code (sign bit clear).
struct Fp8Spec {
  int mantissa_bits;
  int bias;
  int min_exponent;  // of the smallest normal: 2^min_exponent
  int max_exponent;  // of the largest binade: max = (2 − 2^(1−M)…) · 2^max_exponent
  float max;
  std::uint8_t max_code;
  std::uint8_t nan_code;
};

TANDEM_HOST_DEVICE inline Fp8Spec fp8_spec(Fp8Format f) {
  // E4M3fn: 0.1111.111 is NaN, so the top binade stops at 1.110 · 2^8 = 448.
  // E5M2: exponent 31 is inf / NaN, so the top finite value is 1.11 · 2^15 = 57344.
  if (f == Fp8Format::e4m3) return Fp8Spec{3, 7, -6, 8, 448.0f, 0x7e, 0x7f};
  return Fp8Spec{2, 15, -14, 15, 57344.0f, 0x7b, 0x7f};
}

TANDEM_HOST_DEVICE inline float fp8_max(Fp8Format f) {
  return fp8_spec(f).max;
}

// 2^n as a float, for n in [−126, 127] (built from its bits: exact, no libm).
TANDEM_HOST_DEVICE inline float pow2(int n) {
  return float_from_bits((n + 127) << 23);
}

// The FP8 code nearest to x (ties to even); beyond ±max (±inf included) it saturates to
// ±max; NaN gives the format's NaN with x's sign.
TANDEM_HOST_DEVICE inline std::uint8_t fp8_encode(float x, Fp8Format format) {
  const Fp8Spec s = fp8_spec(format);
  const std::uint32_t u = bits_from_float(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint8_t>(sign | s.nan_code);
  if (a >= bits_from_float(s.max)) return static_cast<std::uint8_t>(sign | s.max_code);
  const int biased = static_cast<int>(a >> 23);
  if (biased == 0) return sign;  // zero or an fp32 subnormal: far below half the least code
  // a = m24 · 2^(biased − 150); round it to a multiple of the quantum 2^(target − M), where
  // target is its own exponent, or the smallest normal one in the subnormal range.
  const std::uint32_t m24 = (a & 0x7fffffu) | 0x800000u;
  const int exponent = biased - 127;
  int target = exponent < s.min_exponent ? s.min_exponent : exponent;
  const int shift = (target - s.mantissa_bits) - (biased - 150);  // ≥ 23 − M ≥ 20
  if (shift > 25) return sign;                                    // below half the least code
  std::uint32_t r = m24 >> shift;
  const std::uint32_t rest = m24 & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (r & 1u))) ++r;
  const std::uint32_t implicit = 1u << s.mantissa_bits;
  if (r >= 2 * implicit) {  // rounded up into the next binade
    r >>= 1;
    ++target;
  }
  std::uint32_t code =
      r >= implicit  // normal: biased exponent, mantissa without its 1
          ? (static_cast<std::uint32_t>(target + s.bias) << s.mantissa_bits) | (r - implicit)
          : r;                               // subnormal: exponent field 0
  if (code > s.max_code) code = s.max_code;  // rounded up past max: saturate
  return static_cast<std::uint8_t>(sign | code);
}

// The value an FP8 code stands for (exact); E5M2's inf codes give ±inf, NaN codes NaN.
TANDEM_HOST_DEVICE inline float fp8_decode(std::uint8_t code, Fp8Format format) {
  const Fp8Spec s = fp8_spec(format);
  const bool negative = (code & 0x80u) != 0;
  const std::uint32_t magnitude = code & 0x7fu;
  const std::uint32_t exponent_field = magnitude >> s.mantissa_bits;
  const std::uint32_t mantissa = magnitude & ((1u << s.mantissa_bits) - 1u);
  float v;
  if (format == Fp8Format::e4m3 && magnitude == 0x7fu) {
    v = float_from_bits(0x7fc00000);
  } else if (format == Fp8Format::e5m2 && exponent_field == 31) {
    v = float_from_bits(mantissa ? 0x7fc00000 : 0x7f800000);
  } else if (exponent_field == 0) {
    v = static_cast<float>(mantissa) * pow2(s.min_exponent - s.mantissa_bits);
  } else {
    v = static_cast<float>(mantissa + (1u << s.mantissa_bits)) *
        pow2(static_cast<int>(exponent_field) - s.bias - s.mantissa_bits);
  }
  return negative ? -v : v;
}

// x as FP8 storage with `scale` would give it back: decode(encode(x · scale)) · scale_inv.
TANDEM_HOST_DEVICE inline float fp8_round(float x, float scale, float scale_inv, Fp8Format format) {
  return fp8_decode(fp8_encode(x * scale, format), format) * scale_inv;
}

// E8M0 (OCP MX): the code is a biased exponent, 2^(code − 127); 255 is NaN.
TANDEM_HOST_DEVICE inline std::uint8_t e8m0_from_exponent(int exponent) {
  if (exponent < -127) exponent = -127;
  if (exponent > 127) exponent = 127;
  return static_cast<std::uint8_t>(exponent + 127);
}
TANDEM_HOST_DEVICE inline float e8m0_decode(std::uint8_t code) {
  if (code == 255) return float_from_bits(0x7fc00000);
  if (code == 0) return pow2(-126) * 0.5f;  // 2^−127, an fp32 subnormal
  return pow2(static_cast<int>(code) - 127);
}

// floor(log2(x)) of a positive finite float (fp32 subnormals included).
TANDEM_HOST_DEVICE inline int floor_log2(float x) {
  const std::uint32_t a = bits_from_float(x) & 0x7fffffffu;
  const int biased = static_cast<int>(a >> 23);
  if (biased != 0) return biased - 127;
  int e = -127;  // subnormal: 2^−149 · mantissa
  for (std::uint32_t m = a & 0x7fffffu; m < 0x400000u; m <<= 1) --e;
  return e;
}

TANDEM_HOST_DEVICE inline bool finite_positive(float x) {
  const std::uint32_t a = bits_from_float(x);
  return a > 0 && a < 0x7f800000u;  // excludes −0, negatives, inf and NaN
}

// Delayed scaling (TE's DelayedScaling, _default_sf_compute): the new scale from the amax
// the history gives (its max, or its most recent entry), fp8_max / amax / 2^margin; the
// previous scale stays when amax is 0, inf or NaN.
TANDEM_HOST_DEVICE inline float delayed_scale(float amax, float previous_scale, float fp8_max_value,
                                              int margin) {
  if (!finite_positive(amax)) return previous_scale;
  // TE's order: (fp8_max · 2^−margin) / amax, and the largest float where that overflows
  // (an amax too tiny for fp32: transformer_engine/common/recipe/delayed_scaling.cu).
  const float scale = fp8_max_value / pow2(margin) / amax;
  return scale < float_from_bits(0x7f800000) ? scale : float_from_bits(0x7f7fffff);
}

// The amax delayed scaling uses from its history (newest first, n ≥ 1): the largest entry
// (amax_compute_algo max), a NaN entry passed over as TE's fmaxf passes it, or the newest
// (most_recent), whatever it is.
TANDEM_HOST_DEVICE inline float history_amax(const float* history, long long n, bool use_max) {
  if (!use_max) return history[0];
  float amax = 0.0f;
  for (long long i = 0; i < n; ++i) amax = history[i] > amax ? history[i] : amax;  // NaN: false
  return amax;
}

// Current (tensorwise) scaling (TE's Float8CurrentScaling): fp8_max / amax of the tensor
// being quantized; 1 for an all-zero tensor; the largest float when amax is so small that
// the quotient overflows.
TANDEM_HOST_DEVICE inline float current_scale(float amax, float fp8_max_value) {
  if (!finite_positive(amax)) return 1.0f;
  const float scale = fp8_max_value / amax;
  return finite_positive(scale) ? scale : float_from_bits(0x7f7fffff);
}

// Blockwise scaling (TE's Float8BlockScaling, power-of-two scales): the largest power of two
// not above fp8_max / amax, so scaling is exact and the block's amax lands at or below
// fp8_max; 1 for an all-zero block.
TANDEM_HOST_DEVICE inline float block_scale(float amax, float fp8_max_value) {
  if (!finite_positive(amax)) return 1.0f;
  const float ratio = fp8_max_value / amax;
  if (!finite_positive(ratio)) return pow2(127);
  int e = floor_log2(ratio);
  if (e > 127) e = 127;
  if (e < -126) e = -126;
  return pow2(e);
}

// MXFP8 as Transformer Engine quantizes it: the block's shared scale X is the E8M0 code of
// amax · (1 / fp8_max) (that product in fp32, as TE's max_norm_rcp) with the exponent
// rounded up — TE's float_to_e8m0 (transformer_engine/common/utils.cuh): one more unless
// the mantissa is 0, the exponent is already 254, or the value is a subnormal at most half
// the least normal — so the block's elements x / X stay at or below fp8_max. OCP MX v1.0
// §6.3 takes 2^(floor(log2 amax) − emax) instead, which lets elements between 1.75·2^k
// and 2^(k+1) times X saturate. An all-zero (or non-finite) block gets the least scale.
TANDEM_HOST_DEVICE inline std::uint8_t mx_scale_code(float amax, Fp8Format element) {
  if (!finite_positive(amax)) return 0;
  const std::uint32_t bits = bits_from_float(amax * (1.0f / fp8_max(element)));
  std::uint32_t exponent = bits >> 23;
  const std::uint32_t mantissa = bits & 0x7fffffu;
  if (mantissa > 0 && exponent != 0xfe && !(exponent == 0 && mantissa <= 0x400000u)) ++exponent;
  return e8m0_from_exponent(static_cast<int>(exponent) - 127);
}

// Which rule gives a block its scale: the one given (delayed scaling), the block's own amax
// by current scaling (a per-tensor block), TE's power-of-two block rule, or MX's E8M0 rule.
enum class Fp8ScaleRule : std::uint8_t { given, current, block, mx };

// The scale a block of amax gets under `rule` (given: `given`); the CPU and CUDA quantize
// kernels both call it, so they pick the same scale bit for bit.
TANDEM_HOST_DEVICE inline float fp8_scale_for(Fp8ScaleRule rule, float amax, float given,
                                              Fp8Format format) {
  switch (rule) {
    case Fp8ScaleRule::given:
      return given;
    case Fp8ScaleRule::mx:
      return 1.0f / e8m0_decode(mx_scale_code(amax, format));
    case Fp8ScaleRule::block:
      return block_scale(amax, fp8_max(format));
    case Fp8ScaleRule::current:
      break;
  }
  return current_scale(amax, fp8_max(format));
}

// max(m, |x|) that keeps a NaN once met (the amax of a tensor with a NaN is NaN).
TANDEM_HOST_DEVICE inline float amax_step(float m, float x) {
  const float a = x < 0 ? -x : x;
  if (a != a || m != m) return float_from_bits(0x7fc00000);
  return a > m ? a : m;
}

}  // namespace tandem::kernels::math
