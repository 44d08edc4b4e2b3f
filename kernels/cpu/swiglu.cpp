// SwiGLU loops; see swiglu.hpp.
#include "kernels/cpu/swiglu.hpp"

#include "kernels/cpu/threads.hpp"
#include "kernels/math/swiglu.hpp"

namespace tandem::kernels::cpu {

void swiglu_forward(const float* in, float* out, std::int64_t rows, std::int64_t F) {
#pragma omp parallel for schedule(static) if (rows * F >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* gate = in + r * 2 * F;
    const float* up = gate + F;
    float* y = out + r * F;
#pragma omp simd
    for (std::int64_t c = 0; c < F; ++c) y[c] = math::swiglu(gate[c], up[c]);
  }
}

void swiglu_backward(const float* dout, const float* in, float* din, std::int64_t rows,
                     std::int64_t F) {
#pragma omp parallel for schedule(static) if (rows * F >= kMinParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* gate = in + r * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + r * F;
    float* dgate = din + r * 2 * F;
    float* dup = dgate + F;
#pragma omp simd
    for (std::int64_t c = 0; c < F; ++c) {
      dgate[c] = math::swiglu_gate_grad(dy[c], gate[c], up[c]);
      dup[c] = math::swiglu_up_grad(dy[c], gate[c]);
    }
  }
}

}  // namespace tandem::kernels::cpu
