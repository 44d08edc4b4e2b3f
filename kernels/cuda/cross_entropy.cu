// The vocab-parallel cross-entropy phases on the GPU: one block per row for the
// reductions over the local vocabulary (max, Σ exp), elementwise loss, and one block per
// row for the logit gradients. Element math from kernels/math/softmax.hpp and vocab.hpp,
// shared with the CPU kernels.
#include <cfloat>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/softmax.hpp"
#include "kernels/math/vocab.hpp"

namespace tandem::kernels::cuda {
namespace {

constexpr int kRowThreads = 512;

__global__ void max_kernel(cpu::CrossEntropyShape s, ConstFloats logits, float* row_max) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * s.local_vocab;
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j < s.local_vocab; j += blockDim.x)
    m = fmaxf(m, load(logits, base + j));
  m = block_max(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void sums_kernel(cpu::CrossEntropyShape s, ConstFloats logits,
                            const std::int32_t* targets, const float* row_max, float* sum_exp,
                            float* target_logit) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t base = r * s.local_vocab;
  const float m = row_max[r];
  float sum = 0;
  for (std::int64_t j = threadIdx.x; j < s.local_vocab; j += blockDim.x)
    sum += math::exp_approx(load(logits, base + j) - m);
  sum = block_sum(sum);
  if (threadIdx.x != 0) return;
  sum_exp[r] = sum;
  const std::int64_t t = math::vocab_local_index(targets[r], s.vocab_begin, s.local_vocab);
  target_logit[r] = t >= 0 ? load(logits, base + t) : 0.0f;
}

__global__ void loss_kernel(std::int64_t rows, const float* row_max, const float* sum_exp,
                            const float* target_logit, float* loss) {
  TANDEM_GRID_STRIDE(r, rows) {
    loss[r] = math::cross_entropy_row_loss(math::SoftmaxState{.max = row_max[r], .sum = sum_exp[r]},
                                           target_logit[r]);
  }
}

__global__ void backward_kernel(cpu::CrossEntropyShape s, ConstFloats logits,
                                const std::int32_t* targets, const float* row_max,
                                const float* sum_exp, const float* dloss, Floats dlogits) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t base = r * s.local_vocab;
  const float m = row_max[r];
  const float g = dloss[r];
  const float scale = g / sum_exp[r];
  const std::int64_t t = math::vocab_local_index(targets[r], s.vocab_begin, s.local_vocab);
  for (std::int64_t j = threadIdx.x; j < s.local_vocab; j += blockDim.x) {
    const float d = math::cross_entropy_logit_grad(load(logits, base + j), m, scale);
    store(dlogits, base + j, j == t ? d - g : d);  // in place: each element read, then written
  }
}

unsigned int rows_grid(std::int64_t rows) {
  return static_cast<unsigned int>(rows);
}

}  // namespace

void cross_entropy_max(Context c, cpu::CrossEntropyShape s, ConstFloats logits, float* row_max) {
  if (s.rows == 0) return;
  max_kernel<<<rows_grid(s.rows), kRowThreads, 0, c.stream>>>(s, logits, row_max);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void cross_entropy_sums(Context c, cpu::CrossEntropyShape s, ConstFloats logits,
                        const std::int32_t* targets, const float* row_max, float* sum_exp,
                        float* target_logit) {
  if (s.rows == 0) return;
  sums_kernel<<<rows_grid(s.rows), kRowThreads, 0, c.stream>>>(s, logits, targets, row_max, sum_exp,
                                                               target_logit);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void cross_entropy_loss(Context c, std::int64_t rows, const float* row_max, const float* sum_exp,
                        const float* target_logit, float* loss) {
  if (rows == 0) return;
  loss_kernel<<<grid_for(rows), kThreads, 0, c.stream>>>(rows, row_max, sum_exp, target_logit,
                                                         loss);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(Context c, cpu::CrossEntropyShape s, ConstFloats logits,
                            const std::int32_t* targets, const float* row_max, const float* sum_exp,
                            const float* dloss, Floats dlogits) {
  if (s.rows == 0) return;
  backward_kernel<<<rows_grid(s.rows), kRowThreads, 0, c.stream>>>(s, logits, targets, row_max,
                                                                   sum_exp, dloss, dlogits);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
