// The cpu binding's FP8 ops: Transformer Engine's casts in software (kernels/cpu/fp8.hpp,
// the same rounding a GPU kernel does with kernels/math/fp8.hpp) and the FP8 GEMM as the
// product of the decoded operands with fp32 accumulation. This is the reference the cuda
// binding's FP8 path is checked against.
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "exec/fp8_arguments.hpp"
#include "kernels/cpu/fp8.hpp"
#include "kernels/cpu/gemm.hpp"

namespace tandem {
namespace {

namespace k = kernels::cpu;

float* floats(const Tensor& t) {
  return t.data<float>();
}
std::uint8_t* bytes_of(const Fp8Tensor& t) {
  return reinterpret_cast<std::uint8_t*>(t.codes.data<std::int32_t>());
}

std::vector<float> decoded(const Fp8Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.rows * t.cols));
  k::fp8_dequantize(bytes_of(t), floats(t.scale_inv), t.rows, t.cols, math_format(t.layout.format),
                    {t.layout.block_rows, t.layout.block_cols}, out.data());
  return out;
}

}  // namespace

void CpuDevice::fp8_quantize(Stream&, const Fp8QuantizeArgs& a) {
  check_fp8_quantize("fp8_quantize", a);
  const auto& l = a.output.layout;
  const float given = a.scale ? floats(*a.scale)[0] : 0.0f;
  // A delayed scale of 0 cannot happen (the update keeps the old one); refuse it loudly.
  if (a.scale && !(given > 0))
    throw std::invalid_argument("fp8_quantize: delayed scale " + std::to_string(given) +
                                " is not positive");
  float amax = 0;
  k::fp8_quantize({.input = floats(a.input),
                   .rows = a.output.rows,
                   .cols = a.output.cols,
                   .format = math_format(l.format),
                   .blocks = {l.block_rows, l.block_cols},
                   .mx = l.scaling == Fp8Scaling::mx,
                   .given_scale = given},
                  bytes_of(a.output), floats(a.output.scale_inv), &amax);
  if (a.amax) floats(*a.amax)[0] = kernels::math::amax_step(floats(*a.amax)[0], amax);
}

void CpuDevice::fp8_gemm(Stream&, const Fp8GemmArgs& a) {
  const auto shape = check_fp8_gemm("fp8_gemm", a);
  const auto da = decoded(a.a), db = decoded(a.b);
  k::gemm({.m = shape.m,
           .n = shape.n,
           .k = shape.k,
           .transpose_a = a.transpose_a,
           .transpose_b = a.transpose_b,
           .alpha = a.alpha,
           .beta = a.beta},
          da.data(), db.data(), floats(a.c));
}

void CpuDevice::fp8_update_scale(Stream&, const Fp8ScaleUpdateArgs& a) {
  const auto [length, n] = check_fp8_update_scale("fp8_update_scale", a);
  float* history = floats(a.amax_history);  // (length, n)
  float* scale = floats(a.scale);
  float* amax = floats(a.amax);
  std::vector<float> column(static_cast<std::size_t>(length));
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t i = length - 1; i > 0; --i) history[i * n + t] = history[(i - 1) * n + t];
    history[t] = amax[t];
    amax[t] = 0;
    for (std::int64_t i = 0; i < length; ++i)
      column[static_cast<std::size_t>(i)] = history[i * n + t];
    scale[t] = kernels::math::delayed_scale(
        history_amax(column.data(), length, a.use_max), scale[t],
        kernels::math::fp8_max(math_format(a.formats[static_cast<std::size_t>(t)])), a.margin);
  }
}

void CpuDevice::fp8_amax(Stream&, const Tensor& x, Tensor& amax) {
  check_fp8_amax("fp8_amax", x, amax);
  floats(amax)[0] = kernels::math::amax_step(floats(amax)[0], k::fp8_amax(floats(x), x.numel()));
}

void CpuDevice::fp8_compute_scale(Stream&, const Fp8ComputeScaleArgs& a) {
  const std::int64_t n = check_fp8_compute_scale("fp8_compute_scale", a);
  float* scale = floats(a.scale);
  float* scale_inv = floats(a.scale_inv);
  for (std::int64_t t = 0; t < n; ++t) {
    if (a.amax)
      scale[t] = kernels::math::current_scale(
          floats(*a.amax)[t],
          kernels::math::fp8_max(math_format(a.formats[static_cast<std::size_t>(t)])));
    scale_inv[t] = 1.0f / scale[t];
  }
}

}  // namespace tandem
