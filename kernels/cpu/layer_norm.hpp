// Layer norm over the last dimension (C features) of a (rows, C) activation, as before
// attention and MLP in a pre-LN GPT layer and at the end of the stack. Forward saves the
// row statistics; backward writes the input gradient and accumulates the γ and β
// gradients (they sum over microbatches). Row math: kernels/math/layer_norm.hpp.
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

struct LayerNormShape {
  std::int64_t rows = 0;  // B·T (or the sequence shard's rows with sequence parallelism)
  std::int64_t C = 0;     // features
};

// out = (in - mean)·rstd·γ + β per row; mean and rstd saved for backward.
void layer_norm_forward(LayerNormShape s, const float* in,  // (rows, C)
                        const float* gamma,                 // (C)
                        const float* beta,                  // (C)
                        float* out,                         // (rows, C)
                        float* mean,                        // (rows)
                        float* rstd,                        // (rows)
                        float epsilon = 1e-5f);

// din written; dgamma += Σ_rows dout·norm and dbeta += Σ_rows dout, summed in double,
// rows in order (deterministic whatever the thread count). din must not alias dout or in.
void layer_norm_backward(LayerNormShape s, const float* dout,  // (rows, C)
                         const float* in,                      // (rows, C)
                         const float* gamma,                   // (C)
                         const float* mean,                    // (rows)
                         const float* rstd,                    // (rows)
                         float* din,                           // (rows, C)
                         float* dgamma,                        // (C)
                         float* dbeta);                        // (C)

}  // namespace tandem::kernels::cpu
