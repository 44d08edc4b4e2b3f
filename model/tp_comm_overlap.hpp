// Megatron-Core's --tp-comm-overlap (Transformer Engine's userbuffers): under sequence
// parallelism the tensor-parallel all-gather before a GEMM and the reduce-scatter after one
// are split into tp steps between ring neighbours, each step's block of the GEMM computed
// while the next block moves. The math is the unsplit GEMM's: every output row comes from
// the same input row and the same weight; only the reduction's summation order is the
// ring's.
#pragma once

#include "model/tensor_parallel.hpp"

namespace tandem {

// Y = all_gather(X) · op(W) with the gather as a ring exchange (TE's ring_exchange AG
// overlap): at step k rank r holds rank (r + k)'s rows, GEMMs them into their rows of Y and
// passes them to rank r − 1 while it computes. X: (n, in) this rank's rows; returns
// (tp·n, out). `transpose_w`: W is (out, in) (forward); else (in, out) (input gradient).
// `gathered`, when given, receives all_gather(X) (tp·n, in) for a later GEMM.
Tensor ring_exchange_gather_gemm(ModelEnv& env, const Tensor& x, const Tensor& w, bool transpose_w,
                                 Tensor* gathered = nullptr);

// reduce_scatter(X · Wᵀ) over the rows with the reduction pipelined behind the GEMM (TE's
// pipelined RS overlap): at step k rank r computes its partial sum of the rows rank
// r − 1 − k ends with, adds the partial sum received from rank r − 1 and passes it to rank
// r + 1 while it computes the next block. X: (tp·n, in); W: (out, in); returns (n, out).
Tensor gemm_pipelined_reduce_scatter(ModelEnv& env, const Tensor& x, const Tensor& w);

// The same in FP8 under per-tensor scaling, as Transformer Engine's userbuffers run an FP8
// linear: each rank's rows are quantized before they move (every rank quantizes with the
// one delayed scale, so the codes are those of the gathered tensor quantized at once), the
// ring carries the 1-byte codes, and each block is an FP8 GEMM; the reduce-scatter's
// partial sums stay in the compute dtype. `gathered` receives the gathered codes.
Tensor ring_exchange_gather_fp8_gemm(ModelEnv& env, const Fp8Tensor& x, const Fp8Tensor& w,
                                     bool transpose_w, Fp8Tensor* gathered = nullptr);
Tensor fp8_gemm_pipelined_reduce_scatter(ModelEnv& env, const Fp8Tensor& x, const Fp8Tensor& w);

}  // namespace tandem
