// GeLU loops; the math is kernels/math/gelu.hpp (vectorised: exp_approx has no branches).
#include "kernels/cpu/gelu.hpp"

#include "kernels/cpu/threads.hpp"
#include "kernels/math/gelu.hpp"

namespace tandem::kernels::cpu {

void gelu_forward(const float* in, float* out, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i) out[i] = math::gelu(in[i]);
}

void gelu_backward(const float* dout, const float* in, float* din, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i) din[i] = dout[i] * math::gelu_derivative(in[i]);
}

// The sum in + bias is rounded to float as bias_add then gelu round it, so fused and
// unfused give the same bits.
void bias_gelu_forward(const float* in, const float* bias, float* out, std::int64_t rows,
                       std::int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    float* y = out + r * C;
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) y[c] = math::gelu(x[c] + bias[c]);
  }
}

void bias_gelu_backward(const float* dout, const float* in, const float* bias, float* din,
                        std::int64_t rows, std::int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = dout + r * C;
    const float* x = in + r * C;
    float* d = din + r * C;
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) d[c] = g[c] * math::gelu_derivative(x[c] + bias[c]);
  }
}

}  // namespace tandem::kernels::cpu
