#include "model/tensor_parallel.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/fp8_linear.hpp"
#include "model/tp_comm_overlap.hpp"

namespace tandem {
namespace {

Shape with_rows(const Tensor& x, std::int64_t rows) {
  return Shape{rows, x.shape[1]};
}

}  // namespace

Tensor allocate_like(ModelEnv& env, const Shape& shape) {
  return env.device.allocate(shape, env.compute);
}

std::int64_t sequence_position(const ModelEnv& env, std::int64_t t, std::int64_t local) {
  if (env.cp == nullptr) return t;
  const std::int64_t c = local / 2, cp = env.cp->size(), r = env.cp->rank();
  return t < c ? r * c + t : (2 * cp - 1 - r) * c + (t - c);
}

HiddenDropout hidden_dropout_at(const ModelEnv& env, std::uint64_t site, const Tensor& x) {
  if (env.hidden_dropout <= 0) return {};
  // Context-parallel rows are two chunks of the sequence; the scenario refuses the pair.
  if (env.cp != nullptr)
    throw std::logic_error("hidden dropout is not built for context-parallel activations");
  const std::int64_t rows = x.numel() / x.shape[x.shape.rank() - 1];
  return {.p = env.hidden_dropout,
          .seed = env.dropout_seed,
          .microbatch = env.dropout_microbatch,
          .site = site,
          .row_offset = env.sequence_parallel ? rows * env.tp.rank() : 0};
}

void weight_grad_work(ModelEnv& env, std::function<void(ModelEnv&)> work) {
  if (env.wgrad_queue != nullptr)
    env.wgrad_queue->work.push_back(std::move(work));
  else
    work(env);
}

Tensor allocate_fp32(Device& d, const Shape& shape) {
  return d.allocate(shape, DType::fp32);
}

Tensor linear_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b,
                      Fp8Linear* fp8, Fp8Tensor* fp8_input, bool bias_in_gemm) {
  Tensor y;
  if (fp8) {
    y = fp8->forward(env, x, w, fp8_input);
  } else {
    y = allocate_like(env, Shape{x.shape[0], w.local_shape[0]});
    const bool epilogue = b != nullptr && bias_in_gemm;
    env.device.gemm(env.stream, {.a = x,
                                 .b = w.compute,
                                 .c = y,
                                 .transpose_b = true,
                                 .bias = epilogue ? &b->compute : nullptr});
    if (epilogue) return y;
  }
  if (b) env.device.bias_add(env.stream, y, b->compute);
  return y;
}

namespace {

// The input and weight gradients of one linear layer, in FP8 or in the compute dtype; the
// output gradient is quantized once for both.
struct LinearBackward {
  ModelEnv& env;
  const Tensor& dy;
  Fp8Linear* fp8;
  Fp8Grad grad{};
  LinearBackward(ModelEnv& e, const Tensor& d, Fp8Linear* f) : env(e), dy(d), fp8(f) {
    if (fp8) grad = fp8->quantize_grad(env, dy);
  }
  Tensor input_grad(const Parameter& w) {
    return fp8 ? fp8->input_grad(env, grad, w) : linear_input_grad(env, dy, w);
  }
  // x, or with `fp8_input` (forward's FP8 copy of x) nothing: x may then be empty.
  void weight_grad(const Tensor& x, Parameter& w, Parameter* b,
                   const Fp8Tensor* fp8_input = nullptr, bool bias_in_gemm = false) {
    if (!fp8) return linear_weight_grad(env, x, dy, w, b, bias_in_gemm);
    const Fp8Tensor saved = fp8_input != nullptr ? *fp8_input : Fp8Tensor{};
    // Deferred work outlives this frame: it keeps its own handle of dy for the Fp8Grad.
    weight_grad_work(env, [f = fp8, g = grad, d = dy, x, saved, &w, b](ModelEnv& e) {
      Fp8Grad here = g;
      here.dy = &d;
      f->weight_grad(e, here, x, saved.codes.storage ? &saved : nullptr, w);
      if (b) e.device.bias_grad(e.stream, d, b->grad);
    });
  }
};

}  // namespace

namespace {

// `bias_grad`, when given, accumulates dy's column sums as the GEMM's epilogue.
void accumulate_weight_grad_now(ModelEnv& env, const Tensor& dy, const Tensor& x, Parameter& w,
                                Tensor* bias_grad = nullptr) {
  if (env.gradient_accumulation_fusion || env.first_backward) {
    // The buffer is zero at the step's start, so the first unfused GEMM may write it.
    const float beta = env.gradient_accumulation_fusion ? 1.0f : 0.0f;
    env.device.gemm(
        env.stream,
        {.a = dy, .b = x, .c = w.grad, .transpose_a = true, .beta = beta, .bias_grad = bias_grad});
    return;
  }
  // The fresh gradient is in the compute dtype, as the parameter's .grad is in Megatron.
  Tensor fresh = allocate_like(env, w.grad.shape);
  env.device.gemm(env.stream,
                  {.a = dy, .b = x, .c = fresh, .transpose_a = true, .bias_grad = bias_grad});
  env.device.add(env.stream, w.grad, fresh, w.grad);
}

}  // namespace

void accumulate_weight_grad(ModelEnv& env, const Tensor& dy, const Tensor& x, Parameter& w) {
  weight_grad_work(env, [dy, x, &w](ModelEnv& e) { accumulate_weight_grad_now(e, dy, x, w); });
}

void linear_weight_grad(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                        Parameter* b, bool bias_in_gemm) {
  weight_grad_work(env, [x, dy, &w, b, bias_in_gemm](ModelEnv& e) {
    accumulate_weight_grad_now(e, dy, x, w, b && bias_in_gemm ? &b->grad : nullptr);
    if (b && !bias_in_gemm) e.device.bias_grad(e.stream, dy, b->grad);
  });
}

Tensor linear_input_grad(ModelEnv& env, const Tensor& dy, const Parameter& w) {
  Tensor dx = allocate_like(env, Shape{dy.shape[0], w.local_shape[1]});
  env.device.gemm(env.stream, {.a = dy, .b = w.compute, .c = dx});
  return dx;
}

namespace {

// Several operations waited for as one.
class WorkGroup : public Work {
 public:
  explicit WorkGroup(std::vector<std::unique_ptr<Work>> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& w : works_) w->wait();
  }
  bool test() override {
    return std::all_of(works_.begin(), works_.end(), [](auto& w) { return w->test(); });
  }

 private:
  std::vector<std::unique_ptr<Work>> works_;
};

// Every tp rank's rows of FP8 codes, in rank order, into `total`. Per tensor the scale is
// the shard's (quantize_shard gives every rank the same one); the block recipes' scales are
// gathered beside the codes (Transformer Engine's coalesced gather of data and
// scale-inverses), every block being one shard's (gathers_codes).
std::unique_ptr<Work> gather_fp8_rows(ModelEnv& env, const Fp8Tensor& shard, Fp8Tensor& total) {
  total = allocate_fp8(env.device, shard.rows * env.tp.size(), shard.cols, shard.layout);
  std::vector<std::unique_ptr<Work>> works;
  works.push_back(env.tp.all_gather(env.stream, shard.codes, total.codes));
  if (shard.layout.scaling == Fp8Scaling::tensor)
    total.scale_inv = shard.scale_inv;
  else
    works.push_back(env.tp.all_gather(env.stream, shard.scale_inv, total.scale_inv));
  if (works.size() == 1) return std::move(works.front());
  return std::make_unique<WorkGroup>(std::move(works));
}

}  // namespace

Tensor gather_from_sequence_parallel_region(ModelEnv& env, const Tensor& x) {
  Tensor total = allocate_like(env, with_rows(x, x.shape[0] * env.tp.size()));
  env.tp.all_gather(env.stream, x, total)->wait();
  return total;
}

Tensor reduce_scatter_to_sequence_parallel_region(ModelEnv& env, const Tensor& x) {
  Tensor shard = allocate_like(env, with_rows(x, x.shape[0] / env.tp.size()));
  env.tp.reduce_scatter(env.stream, x, shard, ReduceOp::sum)->wait();
  return shard;
}

Tensor column_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                               const Parameter* b, Fp8Linear* fp8, Fp8Tensor* fp8_input,
                               bool bias_in_gemm) {
  if (!env.sequence_parallel) return linear_forward(env, x, w, b, fp8, fp8_input, bias_in_gemm);
  if (env.tp_comm_overlap) {
    Tensor y;
    if (fp8) {
      // FP8 (per-tensor scaling): the shard quantized, its codes passed round the ring and
      // kept for backward's gather (Transformer Engine's bulk all-gather of ln_out).
      Fp8Tensor shard = fp8->quantize_shard(env, x, Fp8LayerState::input);
      if (fp8_input != nullptr && fp8->gathers_codes(x.shape[0], x.shape[1])) *fp8_input = shard;
      y = ring_exchange_gather_fp8_gemm(env, shard, fp8->forward_weight(env, w), true);
    } else {
      y = ring_exchange_gather_gemm(env, x, w.compute, true);
    }
    if (b) env.device.bias_add(env.stream, y, b->compute);
    return y;
  }
  if (fp8 != nullptr && fp8->gathers_codes(x.shape[0], x.shape[1])) {
    // Transformer Engine's: the shard quantized (its layer norm writes FP8), the codes
    // gathered; the shard's codes are what backward gathers again for the weight gradient
    // (the block recipes': a copy blocked along the rows, TE's columnwise usage).
    Fp8Tensor shard = fp8->quantize_shard(env, x, Fp8LayerState::input);
    Fp8Tensor total;
    gather_fp8_rows(env, shard, total)->wait();
    if (fp8_input != nullptr)
      *fp8_input =
          fp8->per_tensor() ? shard : fp8->quantize_shard(env, x, Fp8LayerState::input, true);
    Tensor y = fp8->forward_quantized(env, total, w);
    if (b) env.device.bias_add(env.stream, y, b->compute);
    return y;
  }
  // The gathered input is not kept: backward gathers it again (Megatron saves the shard).
  return linear_forward(env, gather_from_sequence_parallel_region(env, x), w, b, fp8, nullptr,
                        bias_in_gemm);
}

Tensor column_parallel_input_grad(ModelEnv& env, const Tensor& x, const Tensor& dy,
                                  const Parameter& w) {
  Tensor dx = linear_input_grad(env, dy, w);
  if (!env.sequence_parallel) {
    env.tp.all_reduce(env.stream, dx, ReduceOp::sum)->wait();
    return dx;
  }
  Tensor shard = allocate_like(env, x.shape);
  env.tp.reduce_scatter(env.stream, dx, shard, ReduceOp::sum)->wait();
  return shard;
}

Tensor column_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                                Parameter* b, Fp8Linear* fp8, const Fp8Tensor* fp8_input,
                                bool bias_in_gemm) {
  LinearBackward linear(env, dy, fp8);
  if (!env.sequence_parallel) {
    Tensor dx = linear.input_grad(w);
    auto work = env.tp.all_reduce(env.stream, dx, ReduceOp::sum);
    if (!env.async_tensor_model_parallel_allreduce) work->wait();
    linear.weight_grad(x, w, b, fp8_input, bias_in_gemm);
    if (env.async_tensor_model_parallel_allreduce) work->wait();
    return dx;
  }
  // Megatron's LinearWithGradAccumulationAndAsyncCommunication: the input is re-gathered
  // while the input gradient is computed, and the input gradient is reduce-scattered while
  // the weight gradient is computed.
  if (fp8 != nullptr && fp8_input != nullptr &&
      fp8->gathers_codes(fp8_input->rows, fp8_input->cols)) {
    // Forward's FP8 shard, gathered again as codes (Transformer Engine's ln_out).
    Fp8Tensor total_codes;
    auto gather = gather_fp8_rows(env, *fp8_input, total_codes);
    Tensor dx_partial = linear.input_grad(w);
    gather->wait();
    Tensor dx = allocate_like(env, with_rows(dx_partial, dx_partial.shape[0] / env.tp.size()));
    auto scatter = env.tp.reduce_scatter(env.stream, dx_partial, dx, ReduceOp::sum);
    linear.weight_grad(Tensor{}, w, b, &total_codes);
    scatter->wait();
    return dx;
  }
  Tensor total = allocate_like(env, with_rows(x, x.shape[0] * env.tp.size()));
  auto gather = env.tp.all_gather(env.stream, x, total);
  Tensor dx_partial = linear.input_grad(w);  // (rows, in), this rank's partial sum
  gather->wait();
  Tensor dx = allocate_like(env, x.shape);
  auto scatter = env.tp.reduce_scatter(env.stream, dx_partial, dx, ReduceOp::sum);
  linear.weight_grad(total, w, b, nullptr, bias_in_gemm);
  scatter->wait();
  return dx;
}

Tensor row_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b,
                            Fp8Linear* fp8, Fp8Tensor* fp8_input) {
  Tensor y;
  if (env.sequence_parallel && env.tp_comm_overlap && fp8 != nullptr) {
    const Fp8Tensor xq = fp8->quantize_input(env, x);
    if (fp8_input != nullptr && fp8->saves_input()) *fp8_input = xq;  // wgrad's copy
    y = fp8_gemm_pipelined_reduce_scatter(env, xq, fp8->forward_weight(env, w));
  } else if (env.sequence_parallel && env.tp_comm_overlap) {
    y = gemm_pipelined_reduce_scatter(env, x, w.compute);
  } else {
    y = linear_forward(env, x, w, nullptr, fp8, fp8_input);
    if (env.sequence_parallel)
      y = reduce_scatter_to_sequence_parallel_region(env, y);
    else
      env.tp.all_reduce(env.stream, y, ReduceOp::sum)->wait();
  }
  if (b) env.device.bias_add(env.stream, y, b->compute);  // after the reduction, once
  return y;
}

Tensor row_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                             Parameter* b, Fp8Linear* fp8, const Fp8Tensor* fp8_input) {
  const bool overlap = env.sequence_parallel && env.tp_comm_overlap;
  if (env.sequence_parallel && fp8 != nullptr &&
      (overlap || fp8->gathers_codes(dy.shape[0], dy.shape[1]))) {
    // The shard's gradient quantized and its codes gathered (Transformer Engine's
    // grad_output_preprocess), with --tp-comm-overlap round the ring while dgrad's blocks
    // run; dgrad and (per-tensor scaling) wgrad read the gathered codes. The block recipes
    // gather both usages, TE's rowwise and columnwise, the second for wgrad.
    Fp8Grad grad{.dy = &dy, .rowwise = fp8->quantize_shard(env, dy, Fp8LayerState::grad)};
    Fp8Grad gathered = grad;
    Tensor dx;
    if (overlap) {
      dx = ring_exchange_gather_fp8_gemm(env, grad.rowwise, fp8->dgrad_weight(), false,
                                         &gathered.rowwise);
    } else if (fp8->per_tensor()) {
      gather_fp8_rows(env, grad.rowwise, gathered.rowwise)->wait();
      dx = fp8->input_grad(env, gathered, w);
    } else {
      const Fp8Tensor columnwise = fp8->quantize_shard(env, dy, Fp8LayerState::grad, true);
      auto rows_gather = gather_fp8_rows(env, grad.rowwise, gathered.rowwise);
      auto columns_gather = gather_fp8_rows(env, columnwise, gathered.columnwise);
      rows_gather->wait();
      columns_gather->wait();
      dx = fp8->input_grad(env, gathered, w);
    }
    const Fp8Tensor saved = fp8_input != nullptr ? *fp8_input : Fp8Tensor{};
    weight_grad_work(env, [f = fp8, gathered, d = dy, x, saved, &w](ModelEnv& e) {
      Fp8Grad here = gathered;
      here.dy = &d;
      f->weight_grad(e, here, x, saved.codes.storage ? &saved : nullptr, w);
    });
    if (b)
      weight_grad_work(env, [dy, b](ModelEnv& e) { e.device.bias_grad(e.stream, dy, b->grad); });
    return dx;
  }
  if (overlap) {
    Tensor total;  // the gathered output gradient, for the weight gradient
    Tensor dx = ring_exchange_gather_gemm(env, dy, w.compute, false, &total);
    linear_weight_grad(env, x, total, w, nullptr);
    if (b)
      weight_grad_work(env, [dy, b](ModelEnv& e) { e.device.bias_grad(e.stream, dy, b->grad); });
    return dx;
  }
  const Tensor total = env.sequence_parallel ? gather_from_sequence_parallel_region(env, dy) : dy;
  LinearBackward linear(env, total, fp8);
  Tensor dx = linear.input_grad(w);
  linear.weight_grad(x, w, nullptr, fp8_input);
  // The bias was added to the (sharded) output: its gradient is the shard's column sums.
  if (b) weight_grad_work(env, [dy, b](ModelEnv& e) { e.device.bias_grad(e.stream, dy, b->grad); });
  return dx;
}

}  // namespace tandem
