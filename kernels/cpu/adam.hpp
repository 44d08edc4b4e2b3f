// The optimizer step on fp32 main parameters: AdamW over a flat buffer (the whole
// model's parameters, or this rank's shard of them with the distributed optimizer), and
// the sum of squares behind global-norm gradient clipping. Element math:
// kernels/math/adam.hpp.
#pragma once

#include <cstdint>

#include "kernels/math/adam.hpp"

namespace tandem::kernels::cpu {

// One AdamW step (PyTorch AdamW / Megatron semantics; `step` is 1-based) on n elements:
// param, exp_avg and exp_avg_sq are updated in place from grad.
void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
           const math::AdamHyperparameters& h, std::int64_t step);

// Σ x², accumulated in double over fixed chunks that are added in order: the same result
// whatever the thread count. The global grad norm is sqrt of the sum over all buffers
// (and over ranks, by all-reduce); clip by scale(grad, n, max_norm / norm).
double sum_squares(const float* x, std::int64_t n);

// Loss scaling: x[i] *= inv_scale over n elements; whether all of them were finite.
bool unscale_all_finite(float* x, std::int64_t n, float inv_scale);

}  // namespace tandem::kernels::cpu
