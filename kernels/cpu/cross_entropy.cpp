// Vocab-parallel cross-entropy phases; see cross_entropy.hpp. Rows are independent, so
// threads split rows; each row's reductions run in a fixed (vectorised) order.
#include "kernels/cpu/cross_entropy.hpp"

#include <algorithm>
#include <cfloat>

#include "kernels/cpu/threads.hpp"
#include "kernels/math/exp.hpp"
#include "kernels/math/softmax.hpp"
#include "kernels/math/vocab.hpp"

namespace tandem::kernels::cpu {
namespace {

// Column of the target in the local logits, or -1 when another rank holds it.
std::int64_t local_column(CrossEntropyShape s, std::int32_t target) {
  return math::vocab_local_index(target, s.vocab_begin, s.local_vocab);
}

bool parallel(CrossEntropyShape s) {
  return s.rows * s.local_vocab >= kMinParallelElements;
}

}  // namespace

void cross_entropy_max(CrossEntropyShape s, const float* logits, float* row_max) {
  const std::int64_t V = s.local_vocab;
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* x = logits + r * V;
    float m = -FLT_MAX;
    // The select, not std::max: GCC 12 keeps a std::max reduction scalar (a vmaxss chain,
    // 4 cycles an element, twice the time of the exp pass that follows) and vectorises this
    // one; both keep m unless x[j] is greater, so the result is the same.
#pragma omp simd reduction(max : m)
    for (std::int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
    row_max[r] = m;
  }
}

void cross_entropy_sums(CrossEntropyShape s, const float* logits, const std::int32_t* targets,
                        const float* row_max, float* sum_exp, float* target_logit) {
  const std::int64_t V = s.local_vocab;
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* x = logits + r * V;
    const float m = row_max[r];
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < V; ++j) sum += math::exp_approx(x[j] - m);
    sum_exp[r] = sum;
    const std::int64_t t = local_column(s, targets[r]);
    target_logit[r] = t >= 0 ? x[t] : 0.0f;
  }
}

void cross_entropy_loss(std::int64_t rows, const float* row_max, const float* sum_exp,
                        const float* target_logit, float* loss) {
  for (std::int64_t r = 0; r < rows; ++r) {
    loss[r] = math::cross_entropy_row_loss(math::SoftmaxState{.max = row_max[r], .sum = sum_exp[r]},
                                           target_logit[r]);
  }
}

void cross_entropy_backward(CrossEntropyShape s, const float* logits, const std::int32_t* targets,
                            const float* row_max, const float* sum_exp, const float* dloss,
                            float* dlogits) {
  const std::int64_t V = s.local_vocab;
#pragma omp parallel for schedule(static) if (parallel(s))
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* x = logits + r * V;
    float* dx = dlogits + r * V;
    const float m = row_max[r];
    const float g = dloss[r];
    const float scale = g / sum_exp[r];  // softmax · dloss = exp(x - m) · (dloss / sum)
#pragma omp simd
    for (std::int64_t j = 0; j < V; ++j) dx[j] = math::cross_entropy_logit_grad(x[j], m, scale);
    const std::int64_t t = local_column(s, targets[r]);
    if (t >= 0) dx[t] -= g;
  }
}

}  // namespace tandem::kernels::cpu
