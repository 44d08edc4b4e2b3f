// Argument checks of the FP8 ops shared by the cpu and cuda bindings (same rules, same
// messages), and the mapping of core's Fp8Format onto the kernels' math.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/device.hpp"
#include "kernels/math/fp8.hpp"

namespace tandem {

inline kernels::math::Fp8Format math_format(Fp8Format f) {
  return f == Fp8Format::e4m3 ? kernels::math::Fp8Format::e4m3 : kernels::math::Fp8Format::e5m2;
}
using kernels::math::history_amax;

inline void check_fp8_tensor(const char* op, const Fp8Tensor& t, const char* what) {
  const auto& l = t.layout;
  auto blocks = [](std::int64_t dim, std::int64_t block) {
    return block > 0 ? (dim + block - 1) / block : 1;
  };
  if (t.codes.dtype != DType::int32 || t.codes.numel() != (t.rows * t.cols + 3) / 4 ||
      t.scale_inv.dtype != DType::fp32 ||
      t.scale_inv.numel() != blocks(t.rows, l.block_rows) * blocks(t.cols, l.block_cols))
    throw std::invalid_argument(std::string(op) + ": " + what + " is not an FP8 tensor of (" +
                                std::to_string(t.rows) + ", " + std::to_string(t.cols) +
                                ") (allocate it with allocate_fp8)");
  if (l.scaling == Fp8Scaling::mx &&
      !((l.block_rows == 1 && l.block_cols == 32) || (l.block_rows == 32 && l.block_cols == 1)))
    throw std::invalid_argument(std::string(op) + ": " + what +
                                ": MX blocks are 1 x 32 or 32 x 1 elements");
}

inline void check_fp8_quantize(const char* op, const Fp8QuantizeArgs& a) {
  check_fp8_tensor(op, a.output, "output");
  if (a.input.numel() != a.output.rows * a.output.cols)
    throw std::invalid_argument(std::string(op) + ": input " + a.input.shape.to_string() +
                                " does not hold the output's " + std::to_string(a.output.rows) +
                                " x " + std::to_string(a.output.cols) + " elements");
  if (a.scale && a.output.layout.scaling != Fp8Scaling::tensor)
    throw std::invalid_argument(std::string(op) +
                                ": a given (delayed) scale needs per-tensor "
                                "scaling");
  if ((a.scale && a.scale->numel() != 1) || (a.amax && a.amax->numel() != 1))
    throw std::invalid_argument(std::string(op) + ": scale and amax hold one fp32 each");
}

struct Fp8GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
};

inline Fp8GemmShape check_fp8_gemm(const char* op, const Fp8GemmArgs& a) {
  check_fp8_tensor(op, a.a, "a");
  check_fp8_tensor(op, a.b, "b");
  const std::int64_t m = a.transpose_a ? a.a.cols : a.a.rows;
  const std::int64_t k = a.transpose_a ? a.a.rows : a.a.cols;
  const std::int64_t kb = a.transpose_b ? a.b.cols : a.b.rows;
  const std::int64_t n = a.transpose_b ? a.b.rows : a.b.cols;
  if (k != kb || a.c.numel() != m * n)
    throw std::invalid_argument(std::string(op) + ": (" + std::to_string(a.a.rows) + ", " +
                                std::to_string(a.a.cols) + ")" + (a.transpose_a ? "ᵀ" : "") +
                                " · (" + std::to_string(a.b.rows) + ", " +
                                std::to_string(a.b.cols) + ")" + (a.transpose_b ? "ᵀ" : "") +
                                " into " + a.c.shape.to_string() + " do not conform");
  return {m, n, k};
}

// (history length, tensors) of an update, checked.
struct Fp8UpdateShape {
  std::int64_t length = 0, tensors = 0;
};
inline Fp8UpdateShape check_fp8_update_scale(const char* op, const Fp8ScaleUpdateArgs& a) {
  const std::int64_t n = a.scale.numel();
  if (n < 1 || a.amax.numel() != n || static_cast<std::int64_t>(a.formats.size()) != n ||
      a.amax_history.numel() < n || a.amax_history.numel() % n != 0)
    throw std::invalid_argument(std::string(op) +
                                ": needs n ≥ 1 scales, amaxes and formats and a (history, n) amax "
                                "history; has " +
                                std::to_string(n) + " scales, " + std::to_string(a.amax.numel()) +
                                " amaxes, " + std::to_string(a.formats.size()) + " formats, " +
                                std::to_string(a.amax_history.numel()) + " history entries");
  return {a.amax_history.numel() / n, n};
}

// n of a scale computation, checked: n ≥ 1 scales, scale_invs, formats (and amaxes).
inline std::int64_t check_fp8_compute_scale(const char* op, const Fp8ComputeScaleArgs& a) {
  const std::int64_t n = a.scale.numel();
  if (n < 1 || a.scale_inv.numel() != n || static_cast<std::int64_t>(a.formats.size()) != n ||
      (a.amax && a.amax->numel() != n) || a.scale.dtype != DType::fp32 ||
      a.scale_inv.dtype != DType::fp32 || (a.amax && a.amax->dtype != DType::fp32))
    throw std::invalid_argument(std::string(op) +
                                ": needs n ≥ 1 fp32 scales, as many fp32 scale_invs and formats "
                                "(and amaxes when given); has " +
                                std::to_string(n) + " scales, " +
                                std::to_string(a.scale_inv.numel()) + " scale_invs, " +
                                std::to_string(a.formats.size()) + " formats");
  return n;
}

inline void check_fp8_amax(const char* op, const Tensor& x, const Tensor& amax) {
  if (amax.numel() != 1 || amax.dtype != DType::fp32)
    throw std::invalid_argument(std::string(op) + ": amax holds one fp32, not " +
                                amax.shape.to_string());
  if (x.dtype == DType::int32 || x.dtype == DType::int64)
    throw std::invalid_argument(std::string(op) + ": x must be floating point");
}

}  // namespace tandem
