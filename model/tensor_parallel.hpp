// Megatron's tensor-parallel building blocks (tensor_parallel/layers.py, mappings.py),
// written against Device and the tp Communicator. At tp = 1 the same code runs and the
// collectives run on a one-rank group: there is no special case.
//
//   column-parallel  Y_r = X · W_rᵀ + b_r        backward: dX = Σ_r dY_r · W_r (all-reduce,
//                                                 overlapped with the weight-gradient GEMM)
//   row-parallel     Y = Σ_r X_r · W_rᵀ + b      forward all-reduce; backward local
#pragma once

#include "core/communicator.hpp"
#include "core/device.hpp"
#include "model/parameters.hpp"

namespace tandem {

struct ModelEnv {
  Device& device;
  Stream& stream;
  Communicator& tp;
};

Tensor allocate_like(Device& d, const Shape& shape);  // fp32

// y(rows, out) = x(rows, in) · w(out, in)ᵀ [+ b(out)]
Tensor linear_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b);
// w.grad += dyᵀ · x; b.grad += column sums of dy.
void linear_weight_grad(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                        Parameter* b);
// dx(rows, in) = dy(rows, out) · w(out, in)
Tensor linear_input_grad(ModelEnv& env, const Tensor& dy, const Parameter& w);

Tensor column_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                               const Parameter* b);
// Returns dX, all-reduced over tp; the all-reduce runs while the weight gradient is computed.
Tensor column_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                                Parameter* b);

Tensor row_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b);
Tensor row_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                             Parameter* b);

}  // namespace tandem
