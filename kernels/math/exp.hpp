// A branch-free single-precision exp that compilers vectorise. glibc's expf is accurate
// but scalar (its SIMD variants are only declared under -ffast-math), and softmax, cross
// entropy over a 50k vocabulary and the tanh inside GeLU call exp tens of millions of
// times per step; this version lets those loops run 8 lanes wide. It is the Cephes
// expf: range reduction x = n·ln2 + r with |r| ≤ ln2/2, a degree-6 polynomial for e^r,
// and 2^n put together from its exponent bits. Relative error ≤ 2e-7 where the result
// is a normal float. Written without data-dependent selects other than clamps that
// GCC recognises as min/max: with its default -ftrapping-math it does not if-convert
// other selects, and one such select keeps the whole calling loop scalar.
#pragma once

#include <cmath>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// e^x for x ≤ 88 (e^88 ≈ 1.65e38 < FLT_MAX; larger x give e^88). Below about -87.7,
// where e^x is under the smallest normal float, the result is exactly 0, so masked or
// far-below-max logits contribute nothing.
TANDEM_HOST_DEVICE inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n·kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kLow = -88.5f;  // rounds to n = -128, clamped to -127 below: 2^n = +0
  constexpr float kHigh = 88.0f;
  // Adding and subtracting 1.5·2^23 rounds to the nearest integer (|x·log2e| < 2^22);
  // std::floor would do but GCC calls it instead of vectorising it.
  constexpr float kRound = 12582912.0f;
  const float xc = x < kLow ? kLow : (x > kHigh ? kHigh : x);  // a clamp GCC vectorises
  float n = (xc * kLog2e + kRound) - kRound;
  n = n < -127.0f ? -127.0f : n;
  const float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // Exponent field n + 127 ∈ [0, 254]; 0 encodes +0 (the underflow case).
  const float two_n = float_from_bits((static_cast<std::int32_t>(n) + 127) << 23);
  return p * two_n;
}

// tanh through exp_approx: tanh|x| = (1 - e) / (1 + e) with e = e^(-2|x|) ≤ 1, which
// never overflows. Absolute error ≤ 3e-7 (relative error grows near 0, where callers
// such as GeLU add tanh to 1 and only the absolute error matters).
TANDEM_HOST_DEVICE inline float tanh_approx(float x) {
  const float e = exp_approx(-2.0f * std::fabs(x));
  return std::copysign((1.0f - e) / (1.0f + e), x);
}

}  // namespace tandem::kernels::math
