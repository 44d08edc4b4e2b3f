// Elementwise kernels: grid-stride loops, one element per step, the math of
// kernels/math/ (GeLU) and the precision of each buffer (device_util.cuh).
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/dropout.hpp"
#include "kernels/math/gelu.hpp"

namespace tandem::kernels::cuda {
namespace {

__global__ void add_kernel(ConstFloats a, ConstFloats b, Floats out, std::int64_t n) {
  TANDEM_GRID_STRIDE(i, n) store(out, i, load(a, i) + load(b, i));
}

__global__ void scale_kernel(Floats x, std::int64_t n, float factor) {
  TANDEM_GRID_STRIDE(i, n) store(x, i, load(x, i) * factor);
}

__global__ void fill_kernel(Floats x, std::int64_t n, float value) {
  TANDEM_GRID_STRIDE(i, n) store(x, i, value);
}

__global__ void fill_int32_kernel(std::int32_t* x, std::int64_t n, std::int32_t value) {
  TANDEM_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void convert_kernel(ConstFloats from, Floats to, std::int64_t n) {
  TANDEM_GRID_STRIDE(i, n) store(to, i, load(from, i));
}

__global__ void copy_columns_kernel(math::ColumnCopy c, ConstFloats from, Floats to) {
  TANDEM_GRID_STRIDE(e, c.elements()) {
    float v = load(from, c.from(e));
    if (c.sums())
      for (std::int64_t k = 1; k < c.count; ++k) v += load(from, c.from(e, k));
    store(to, c.to(e), c.accumulate ? load(to, c.to(e)) + v : v);
  }
}

__global__ void gelu_forward_kernel(ConstFloats in, Floats out, std::int64_t n) {
  TANDEM_GRID_STRIDE(i, n) store(out, i, math::gelu(load(in, i)));
}

__global__ void gelu_backward_kernel(ConstFloats dout, ConstFloats in, Floats din, std::int64_t n) {
  TANDEM_GRID_STRIDE(i, n) store(din, i, load(dout, i) * math::gelu_derivative(load(in, i)));
}

__global__ void bias_add_kernel(Floats out, ConstFloats bias, std::int64_t rows, std::int64_t C) {
  TANDEM_GRID_STRIDE(i, rows * C) store(out, i, load(out, i) + load(bias, i % C));
}

// The sum in + bias is kept in float (Megatron's fused kernels do the same), where the
// unfused bias_add rounds it to the buffer's precision first.
__global__ void bias_gelu_forward_kernel(ConstFloats in, ConstFloats bias, Floats out,
                                         std::int64_t rows, std::int64_t C) {
  TANDEM_GRID_STRIDE(i, rows * C) store(out, i, math::gelu(load(in, i) + load(bias, i % C)));
}

__global__ void bias_gelu_backward_kernel(ConstFloats dout, ConstFloats in, ConstFloats bias,
                                          Floats din, std::int64_t rows, std::int64_t C) {
  TANDEM_GRID_STRIDE(i, rows * C) {
    store(din, i, load(dout, i) * math::gelu_derivative(load(in, i) + load(bias, i % C)));
  }
}

__global__ void dropout_kernel(ConstFloats in, Floats out, std::int64_t n,
                               math::HiddenDropoutMask m) {
  TANDEM_GRID_STRIDE(i, n) {
    store(out, i,
          math::dropout_apply(load(in, i), m.stream, m.first + static_cast<std::uint64_t>(i), m.p));
  }
}

__global__ void bias_dropout_add_kernel(ConstFloats in, ConstFloats bias, ConstFloats residual,
                                        Floats out, std::int64_t rows, std::int64_t C,
                                        math::HiddenDropoutMask m) {
  TANDEM_GRID_STRIDE(i, rows * C) {
    const float v = bias.data ? load(in, i) + load(bias, i % C) : load(in, i);
    const float kept =
        m.p > 0 ? math::dropout_apply(v, m.stream, m.first + static_cast<std::uint64_t>(i), m.p)
                : v;
    store(out, i, load(residual, i) + kept);
  }
}

}  // namespace

void bias_gelu_forward(Context c, ConstFloats in, ConstFloats bias, Floats out, std::int64_t rows,
                       std::int64_t C) {
  if (rows * C == 0) return;
  bias_gelu_forward_kernel<<<grid_for(rows * C), kThreads, 0, c.stream>>>(in, bias, out, rows, C);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void bias_gelu_backward(Context c, ConstFloats dout, ConstFloats in, ConstFloats bias, Floats din,
                        std::int64_t rows, std::int64_t C) {
  if (rows * C == 0) return;
  bias_gelu_backward_kernel<<<grid_for(rows * C), kThreads, 0, c.stream>>>(dout, in, bias, din,
                                                                           rows, C);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void dropout(Context c, ConstFloats in, Floats out, std::int64_t n, math::HiddenDropoutMask m) {
  if (n == 0) return;
  dropout_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(in, out, n, m);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void bias_dropout_add(Context c, ConstFloats in, ConstFloats bias, ConstFloats residual, Floats out,
                      std::int64_t rows, std::int64_t C, math::HiddenDropoutMask m) {
  if (rows * C == 0) return;
  bias_dropout_add_kernel<<<grid_for(rows * C), kThreads, 0, c.stream>>>(in, bias, residual, out,
                                                                         rows, C, m);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void add(Context c, ConstFloats a, ConstFloats b, Floats out, std::int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(a, b, out, n);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void scale(Context c, Floats x, std::int64_t n, float factor) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(x, n, factor);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void fill(Context c, Floats x, std::int64_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(x, n, value);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void fill_int32(Context c, std::int32_t* x, std::int64_t n, std::int32_t value) {
  if (n == 0) return;
  fill_int32_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(x, n, value);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void convert(Context c, ConstFloats from, Floats to, std::int64_t n) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(from, to, n);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void copy_columns(Context c, math::ColumnCopy copy, ConstFloats from, Floats to) {
  if (copy.elements() == 0) return;
  copy_columns_kernel<<<grid_for(copy.elements()), kThreads, 0, c.stream>>>(copy, from, to);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void gelu_forward(Context c, ConstFloats in, Floats out, std::int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(in, out, n);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void gelu_backward(Context c, ConstFloats dout, ConstFloats in, Floats din, std::int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(dout, in, din, n);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void bias_add(Context c, Floats out, ConstFloats bias, std::int64_t rows, std::int64_t C) {
  if (rows * C == 0) return;
  bias_add_kernel<<<grid_for(rows * C), kThreads, 0, c.stream>>>(out, bias, rows, C);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
