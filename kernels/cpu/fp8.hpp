// FP8 quantization on the CPU, the software reference of Transformer Engine's casts: a
// (rows, cols) fp32 matrix into one FP8 code per element (kernels/math/fp8.hpp) and the
// inverse scales its blocks share, and back. One scale per tensor (delayed scaling with a
// given scale, or current scaling from the tensor's amax), per block of blocks.rows ×
// blocks.cols elements with power-of-two scales (TE's Float8BlockScaling: 1×128 for
// activations and gradients, 128×128 for weights), or MX blocks of 32 with E8M0 scales.
// The GEMMs of the FP8 step run on the dequantized values with fp32 accumulation.
#pragma once

#include <cstdint>

#include "kernels/math/fp8.hpp"

namespace tandem::kernels::cpu {

// Block extent in rows and columns; 0 spans the whole dimension, so {0, 0} is one scale
// for the tensor, {1, 128} TE's 1×128 and {128, 128} its 128×128 blocks.
struct Fp8Blocks {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

struct ScaleGrid {
  std::int64_t rows = 1, cols = 1;  // scales along each dimension (ceil(dim / block))
};
ScaleGrid fp8_scale_grid(std::int64_t rows, std::int64_t cols, Fp8Blocks blocks);

struct Fp8QuantizeParams {
  const float* input = nullptr;  // (rows, cols)
  std::int64_t rows = 0, cols = 0;
  math::Fp8Format format = math::Fp8Format::e4m3;
  Fp8Blocks blocks{};
  bool mx = false;        // MX blocks: E8M0 scales (OCP MX) in place of TE's power-of-two rule
  float given_scale = 0;  // > 0: this one scale for the whole tensor (delayed scaling)
};

// The scale rule the parameters ask for (math::fp8_scale_for).
math::Fp8ScaleRule fp8_scale_rule(const Fp8QuantizeParams& p);

// codes (rows·cols) and scale_inv (fp8_scale_grid) written; amax (nullable) receives the
// largest |x| of the whole tensor (delayed scaling records it for its history).
void fp8_quantize(const Fp8QuantizeParams& p, std::uint8_t* codes, float* scale_inv, float* amax);

// out (rows, cols) = decode(codes) · their block's scale_inv.
void fp8_dequantize(const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                    std::int64_t cols, math::Fp8Format format, Fp8Blocks blocks, float* out);

// The largest |x| over n elements; a NaN anywhere gives NaN, so a delayed scale computed
// from it keeps its previous value (math::delayed_scale).
float fp8_amax(const float* x, std::int64_t n);

}  // namespace tandem::kernels::cpu
