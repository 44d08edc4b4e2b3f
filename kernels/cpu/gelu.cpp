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

}  // namespace tandem::kernels::cpu
