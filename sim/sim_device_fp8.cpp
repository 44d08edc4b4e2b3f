// The sim binding's FP8 ops, priced from their shapes: an FP8 GEMM as "fp8_gemm" (the cost
// model runs it at the GPU's FP8 tensor rate on 1-byte operands), Transformer Engine's
// quantization as a memory-bound kernel — a pass for the amax when the scale comes from
// the tensor itself (current, block and MX scaling; delayed scaling records the amax in the
// cast's own pass), then the cast, which writes the codes twice on a GPU before Blackwell
// (TE's cast_transpose: Hopper's FP8 GEMMs take only the "TN" layout, so the backward's
// GEMMs read a transposed copy; the copy is priced, its memory is not held) — and the
// delayed scale's update as a tiny memory-bound kernel.
#include <stdexcept>
#include <string>

#include "sim/sim_device.hpp"

namespace tandem::sim {

void SimDevice::fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) {
  const std::int64_t elements = a.output.rows * a.output.cols;
  if (a.input.numel() != elements)
    throw std::invalid_argument("fp8_quantize: input " + a.input.shape.to_string() +
                                " does not hold the output's elements");
  if (a.transposed_copy) {  // written by the cast that made the first copy (priced there)
    run(s, {.op = "fp8_quantize", .dtype = a.input.dtype, .m = a.output.rows, .n = a.output.cols});
    return;
  }
  const double input_bytes = static_cast<double>(a.input.bytes().value);
  const double passes = a.scale ? 1.0 : 2.0;
  const double copies = options_.fp8_transposed_copy ? 2.0 : 1.0;
  run(s, {.op = "fp8_quantize",
          .dtype = a.input.dtype,
          .m = a.output.rows,
          .n = a.output.cols,
          .flops = 2.0 * static_cast<double>(elements),  // |x| and the max, the scaling
          .bytes = passes * input_bytes + copies * static_cast<double>(elements)});
}

void SimDevice::fp8_gemm(Stream& s, const Fp8GemmArgs& a) {
  const std::int64_t m = a.transpose_a ? a.a.cols : a.a.rows;
  const std::int64_t k = a.transpose_a ? a.a.rows : a.a.cols;
  const std::int64_t kb = a.transpose_b ? a.b.cols : a.b.rows;
  const std::int64_t n = a.transpose_b ? a.b.rows : a.b.cols;
  if (k != kb || a.c.numel() != m * n)
    throw std::invalid_argument("fp8_gemm: operands of " + std::to_string(m) + " x " +
                                std::to_string(k) + " and " + std::to_string(kb) + " x " +
                                std::to_string(n) + " into " + a.c.shape.to_string() +
                                ": shapes do not match");
  // The output in its own dtype (the compute dtype, or the fp32 gradient it accumulates into).
  const double c_bytes = static_cast<double>(m * n) * (a.beta != 0 ? 2.0 : 1.0) *
                         static_cast<double>(dtype_size(a.c.dtype).value);
  run(s, {.op = "fp8_gemm",
          .dtype = options_.compute_dtype,
          .m = m,
          .n = n,
          .k = k,
          .flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
          .bytes = static_cast<double>(m * k + k * n) + c_bytes});
}

void SimDevice::fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) {
  run(s, {.op = "fp8_update_scale",
          .dtype = DType::fp32,
          .m = a.amax_history.numel(),
          .flops = static_cast<double>(a.amax_history.numel()),
          .bytes = 2.0 * static_cast<double>(a.amax_history.bytes().value) + 12.0});
}

// The cast of master weights (--fp8-param-gather): the amax of an fp32 shard, a read of it;
// the scales of a few tensors, a tiny kernel.
void SimDevice::fp8_amax(Stream& s, const Tensor& x, Tensor&) {
  run(s, {.op = "fp8_amax",
          .dtype = x.dtype,
          .m = x.numel(),
          .flops = static_cast<double>(x.numel()),
          .bytes = static_cast<double>(x.bytes().value) + 4.0});
}

void SimDevice::fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) {
  const double n = static_cast<double>(a.scale.numel());
  run(s, {.op = "fp8_compute_scale",
          .dtype = DType::fp32,
          .m = a.scale.numel(),
          .flops = n,
          .bytes = (a.amax ? 12.0 : 8.0) * n});
}

}  // namespace tandem::sim
