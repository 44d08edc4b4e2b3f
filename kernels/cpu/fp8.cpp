#include "kernels/cpu/fp8.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::kernels::cpu {
namespace {

std::int64_t extent(std::int64_t block, std::int64_t dim) {
  return block > 0 ? block : dim;
}

}  // namespace

ScaleGrid fp8_scale_grid(std::int64_t rows, std::int64_t cols, Fp8Blocks blocks) {
  const auto br = extent(blocks.rows, rows), bc = extent(blocks.cols, cols);
  return {br > 0 ? (rows + br - 1) / br : 1, bc > 0 ? (cols + bc - 1) / bc : 1};
}

float fp8_amax(const float* x, std::int64_t n) {
  float amax = 0;
  for (std::int64_t i = 0; i < n; ++i) amax = math::amax_step(amax, x[i]);
  return amax;
}

math::Fp8ScaleRule fp8_scale_rule(const Fp8QuantizeParams& p) {
  if (p.given_scale > 0) return math::Fp8ScaleRule::given;
  if (p.mx) return math::Fp8ScaleRule::mx;
  if (p.blocks.rows > 0 || p.blocks.cols > 0) return math::Fp8ScaleRule::block;
  return math::Fp8ScaleRule::current;
}

void fp8_quantize(const Fp8QuantizeParams& p, std::uint8_t* codes, float* scale_inv, float* amax) {
  const auto grid = fp8_scale_grid(p.rows, p.cols, p.blocks);
  const auto br = extent(p.blocks.rows, p.rows), bc = extent(p.blocks.cols, p.cols);
  // Each block's amax, then its scale: one pass over the input each.
  std::vector<float> block_amax(static_cast<std::size_t>(grid.rows * grid.cols), 0.0f);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    float* row_amax = block_amax.data() + (r / br) * grid.cols;
    const float* x = p.input + r * p.cols;
    if (grid.cols == 1) {
      for (std::int64_t c = 0; c < p.cols; ++c) row_amax[0] = math::amax_step(row_amax[0], x[c]);
    } else {
      for (std::int64_t c = 0; c < p.cols; ++c)
        row_amax[c / bc] = math::amax_step(row_amax[c / bc], x[c]);
    }
  }
  if (amax) {
    float all = 0;
    for (float m : block_amax) all = math::amax_step(all, m);
    *amax = all;
  }
  const auto rule = fp8_scale_rule(p);
  std::vector<float> scale(block_amax.size());
  for (std::size_t b = 0; b < scale.size(); ++b) {
    scale[b] = math::fp8_scale_for(rule, block_amax[b], p.given_scale, p.format);
    scale_inv[b] = 1.0f / scale[b];
  }
#pragma omp parallel for schedule(static) if (p.rows * p.cols > 65536)
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* s = scale.data() + (r / br) * grid.cols;
    const float* x = p.input + r * p.cols;
    std::uint8_t* q = codes + r * p.cols;
    if (grid.cols == 1) {  // one scale along the row: no division per element
      for (std::int64_t c = 0; c < p.cols; ++c) q[c] = math::fp8_encode(x[c] * s[0], p.format);
    } else {
      for (std::int64_t c = 0; c < p.cols; ++c) q[c] = math::fp8_encode(x[c] * s[c / bc], p.format);
    }
  }
}

void fp8_dequantize(const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                    std::int64_t cols, math::Fp8Format format, Fp8Blocks blocks, float* out) {
  const auto grid = fp8_scale_grid(rows, cols, blocks);
  const auto br = extent(blocks.rows, rows), bc = extent(blocks.cols, cols);
  // A table of the 256 values per format: decoding is then one load.
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = math::fp8_decode(static_cast<std::uint8_t>(c), format);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* s = scale_inv + (r / br) * grid.cols;
    const std::uint8_t* q = codes + r * cols;
    float* y = out + r * cols;
    if (grid.cols == 1) {
      for (std::int64_t c = 0; c < cols; ++c) y[c] = table[q[c]] * s[0];
    } else {
      for (std::int64_t c = 0; c < cols; ++c) y[c] = table[q[c]] * s[c / bc];
    }
  }
}

}  // namespace tandem::kernels::cpu
