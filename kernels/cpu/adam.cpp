// AdamW and the gradient-norm reduction; see adam.hpp.
#include "kernels/cpu/adam.hpp"

#include <algorithm>
#include <vector>

#include "kernels/cpu/threads.hpp"

namespace tandem::kernels::cpu {

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
           const math::AdamHyperparameters& h, std::int64_t step) {
  const math::AdamStep s = math::make_adam_step(h, step);
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (std::int64_t i = 0; i < n; ++i)
    math::adamw_update(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s);
}

double sum_squares(const float* x, std::int64_t n) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk;
    const std::int64_t end = std::min(n, begin + kChunk);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = begin; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
    partial[static_cast<std::size_t>(c)] = sum;
  }
  double total = 0;
  for (const double p : partial) total += p;
  return total;
}

bool unscale_all_finite(float* x, std::int64_t n, float inv_scale) {
  bool finite = true;
  for (std::int64_t i = 0; i < n; ++i) finite &= math::unscale_is_finite(x[i], inv_scale);
  return finite;
}

}  // namespace tandem::kernels::cpu
