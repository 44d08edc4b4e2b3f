#include "model/tensor_parallel.hpp"

namespace tandem {

Tensor allocate_like(Device& d, const Shape& shape) {
  return d.allocate(shape, DType::fp32);
}

Tensor linear_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b) {
  Tensor y = allocate_like(env.device, Shape{x.shape[0], w.local_shape[0]});
  env.device.gemm(env.stream, {.a = x, .b = w.value, .c = y, .transpose_b = true});
  if (b) env.device.bias_add(env.stream, y, b->value);
  return y;
}

void linear_weight_grad(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                        Parameter* b) {
  env.device.gemm(env.stream, {.a = dy, .b = x, .c = w.grad, .transpose_a = true, .beta = 1.0f});
  if (b) env.device.bias_grad(env.stream, dy, b->grad);
}

Tensor linear_input_grad(ModelEnv& env, const Tensor& dy, const Parameter& w) {
  Tensor dx = allocate_like(env.device, Shape{dy.shape[0], w.local_shape[1]});
  env.device.gemm(env.stream, {.a = dy, .b = w.value, .c = dx});
  return dx;
}

Tensor column_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                               const Parameter* b) {
  return linear_forward(env, x, w, b);
}

Tensor column_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                                Parameter* b) {
  Tensor dx = linear_input_grad(env, dy, w);
  auto work = env.tp.all_reduce(env.stream, dx, ReduceOp::sum);
  linear_weight_grad(env, x, dy, w, b);
  work->wait();
  return dx;
}

Tensor row_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                            const Parameter* b) {
  Tensor y = linear_forward(env, x, w, nullptr);
  env.tp.all_reduce(env.stream, y, ReduceOp::sum)->wait();
  if (b) env.device.bias_add(env.stream, y, b->value);  // after the reduction, once
  return y;
}

Tensor row_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                             Parameter* b) {
  Tensor dx = linear_input_grad(env, dy, w);
  linear_weight_grad(env, x, dy, w, b);
  return dx;
}

}  // namespace tandem
