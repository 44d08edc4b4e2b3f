// Hidden dropout loops; see dropout.hpp. The mask index of element i is m.first + i.
#include "kernels/cpu/dropout.hpp"

#include "kernels/cpu/threads.hpp"

namespace tandem::kernels::cpu {

void dropout_forward(const float* in, float* out, std::int64_t n, math::HiddenDropoutMask m) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = math::dropout_apply(in[i], m.stream, m.first + static_cast<std::uint64_t>(i), m.p);
}

void dropout_backward(const float* dout, float* din, std::int64_t n, math::HiddenDropoutMask m) {
  dropout_forward(dout, din, n, m);  // the same mask and scale
}

void bias_dropout_add(const float* in, const float* bias, const float* residual, float* out,
                      std::int64_t rows, std::int64_t C, math::HiddenDropoutMask m) {
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    const float* h = residual + r * C;
    float* y = out + r * C;
    const std::uint64_t row = m.first + static_cast<std::uint64_t>(r * C);
    for (std::int64_t c = 0; c < C; ++c) {
      const float v = bias ? x[c] + bias[c] : x[c];
      y[c] = h[c] +
             (m.p > 0 ? math::dropout_apply(v, m.stream, row + static_cast<std::uint64_t>(c), m.p)
                      : v);
    }
  }
}

}  // namespace tandem::kernels::cpu
