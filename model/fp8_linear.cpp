#include "model/fp8_linear.hpp"

#include <array>
#include <vector>

#include "core/error.hpp"

namespace tandem {

void Fp8LayerState::begin_step(ModelEnv& env) {
  if (step_ == env.step) return;
  step_ = env.step;
  if (!delayed()) return;
  Device& d = env.device;
  // The first step has nothing recorded yet: its reduction and update leave the scales at
  // 1 (an amax of 0 keeps the scale), and cost what every later step's do, as TE reduces
  // from the first forward on.
  prepare(d, env.stream);
  // An evaluation quantizes with the scales training left and max-accumulates its amaxes
  // into the step's, which the next training step reduces with its own: Transformer Engine
  // records amaxes under no_grad too, but reduces and updates them only where gradients
  // are enabled (fp8_autocast's exit checks torch.is_grad_enabled()), and Megatron
  // evaluates under torch.no_grad().
  if (env.forward_only) return;
  // The amax reduction group: the largest |x| of a tensor split over tp, and over the
  // data-parallel (and context-parallel) replicas' microbatches.
  Communicator& group = env.amax_group ? *env.amax_group : env.tp;
  if (group.size() > 1) group.all_reduce(env.stream, amax_, ReduceOp::max)->wait();
  std::array<Fp8Format, kSlots> formats{};
  for (int s = 0; s < kSlots; ++s) formats[s] = format(static_cast<Role>(s % 3));
  d.fp8_update_scale(env.stream, {.amax_history = history_,
                                  .scale = scale_,
                                  .amax = amax_,
                                  .formats = formats,
                                  .use_max = config_.amax_compute_algo == "max",
                                  .margin = config_.margin});
}

void Fp8LayerState::prepare(Device& d, Stream& s) {
  if (!delayed() || history_.storage) return;
  allocate(d);
  d.fill(s, history_, 0.0f);
  d.fill(s, scale_, 1.0f);  // TE's initial scale
  d.fill(s, amax_, 0.0f);
}

void Fp8LayerState::allocate(Device& d) {
  history_ = d.allocate(Shape{config_.amax_history_len, kSlots}, DType::fp32, MemoryUse::fp8);
  scale_ = d.allocate(Shape{kSlots}, DType::fp32, MemoryUse::fp8);
  amax_ = d.allocate(Shape{kSlots}, DType::fp32, MemoryUse::fp8);
  for (int s = 0; s < kSlots; ++s) {
    scale_views_[s] = scale_.view(Shape{1}, s);
    amax_views_[s] = amax_.view(Shape{1}, s);
  }
}

void Fp8LayerState::allocate_for_restore(Device& d) {
  if (!delayed()) return;
  if (!history_.storage) allocate(d);
  step_ = -1;
}

Fp8Tensor Fp8Linear::quantize(ModelEnv& env, const Tensor& t, std::int64_t rows, std::int64_t cols,
                              Fp8LayerState::Role role, bool along_rows, bool transposed_copy) {
  const std::string& recipe = state_->config().recipe;
  Fp8Layout layout{.format = state_->format(role)};
  if (recipe == "blockwise") {
    layout.scaling = Fp8Scaling::block;
    const bool square = role == Fp8LayerState::weight;
    layout.block_rows = square || along_rows ? 128 : 1;
    layout.block_cols = square || !along_rows ? 128 : 1;
  } else if (recipe == "mxfp8") {
    layout.scaling = Fp8Scaling::mx;
    layout.block_rows = along_rows ? 32 : 1;
    layout.block_cols = along_rows ? 1 : 32;
  }
  // A weight's copies live the whole step (quantize_weight); inputs and gradients one pass.
  Fp8Tensor q =
      allocate_fp8(env.device, rows, cols, layout,
                   role == Fp8LayerState::weight ? MemoryUse::fp8 : MemoryUse::activations);
  env.device.fp8_quantize(env.stream, {.input = t,
                                       .output = q,
                                       .scale = state_->scale(slot(role)),
                                       .amax = state_->amax(slot(role)),
                                       .transposed_copy = transposed_copy});
  return q;
}

void Fp8Linear::quantize_weight(ModelEnv& env, const Parameter& w) {
  if (weight_step_ == state_->step()) return;
  weight_step_ = state_->step();
  const std::int64_t out = w.local_shape[0], in = w.local_shape[1];
  // The previous step's copies go first: TE's workspace is refilled in place.
  weight_rowwise_ = weight_columnwise_ = Fp8Tensor{};
  if (w.fp8.codes.storage) {
    // An FP8 parameter: fprop reads it; dgrad a copy of its codes (TE's transpose cache, made
    // from the FP8 data), with its scale.
    weight_rowwise_ = w.fp8;
    weight_columnwise_ = allocate_fp8(env.device, out, in, w.fp8.layout, MemoryUse::fp8);
    env.device.copy(env.stream, w.fp8.codes, weight_columnwise_.codes);
    env.device.copy(env.stream, w.fp8.scale_inv, weight_columnwise_.scale_inv);
    return;
  }
  weight_rowwise_ = quantize(env, w.compute, out, in, Fp8LayerState::weight, false);
  // dgrad's copy (dx = dy · w reduces over out): MX blocks along out; the other recipes' codes
  // are fprop's, held again as TE holds its transposed copy.
  const bool mx = state_->config().recipe == "mxfp8";
  weight_columnwise_ = quantize(env, w.compute, out, in, Fp8LayerState::weight, mx, !mx);
}

Tensor Fp8Linear::forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                          Fp8Tensor* saved_input) {
  quantize_weight(env, w);
  const std::int64_t rows = x.shape[0], in = x.shape[1], out = w.local_shape[0];
  const Fp8Tensor xq = quantize(env, x, rows, in, Fp8LayerState::input, false);
  if (saved_input != nullptr && saves_input()) {
    // wgrad reduces over the rows: per-tensor scaling reuses fprop's codes, the block
    // recipes need a copy blocked along the rows (TE's columnwise usage, made in forward).
    *saved_input = per_tensor() ? xq : quantize(env, x, rows, in, Fp8LayerState::input, true);
  }
  Tensor y = allocate_like(env, Shape{rows, out});
  env.device.fp8_gemm(env.stream, {.a = xq,
                                   .b = weight_rowwise_,
                                   .c = y,
                                   .transpose_b = true,
                                   .split_accumulator = false});  // TE's fprop
  return y;
}

Fp8Tensor Fp8Linear::quantize_input(ModelEnv& env, const Tensor& x) {
  return quantize(env, x, x.shape[0], x.shape[1], Fp8LayerState::input, false);
}

bool Fp8Linear::per_tensor() const {
  const std::string& recipe = state_->config().recipe;
  return recipe == "delayed" || recipe == "tensorwise";
}

bool Fp8Linear::gathers_codes(std::int64_t rows, std::int64_t cols) const {
  const Fp8Config& c = state_->config();
  // Whole int32 words of codes per row, so that each rank's rows are a run of words.
  if (!c.wgrad || cols % 4 != 0) return false;
  if (per_tensor()) return true;
  const std::int64_t block = c.recipe == "mxfp8" ? 32 : 128;
  return rows % block == 0 && cols % block == 0;
}

Fp8Tensor Fp8Linear::quantize_shard(ModelEnv& env, const Tensor& t, Fp8LayerState::Role role,
                                    bool along_rows) {
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  if (!per_tensor()) return quantize(env, t, rows, cols, role, along_rows);
  if (state_->delayed() || env.tp.size() == 1) return quantize(env, t, rows, cols, role, false);
  Device& d = env.device;
  Tensor amax = d.allocate(Shape{1}, DType::fp32);
  Tensor scale = d.allocate(Shape{1}, DType::fp32);
  d.fill(env.stream, amax, 0.0f);
  d.fp8_amax(env.stream, t, amax);
  env.tp.all_reduce(env.stream, amax, ReduceOp::max)->wait();
  Fp8Tensor q = allocate_fp8(d, rows, cols, Fp8Layout{.format = state_->format(role)});
  const std::array<Fp8Format, 1> formats{state_->format(role)};
  d.fp8_compute_scale(
      env.stream, {.amax = &amax, .scale = scale, .scale_inv = q.scale_inv, .formats = formats});
  d.fp8_quantize(env.stream, {.input = t, .output = q, .scale = &scale});
  return q;
}

Tensor Fp8Linear::forward_quantized(ModelEnv& env, const Fp8Tensor& xq, const Parameter& w) {
  quantize_weight(env, w);
  Tensor y = allocate_like(env, Shape{xq.rows, w.local_shape[0]});
  env.device.fp8_gemm(env.stream, {.a = xq,
                                   .b = weight_rowwise_,
                                   .c = y,
                                   .transpose_b = true,
                                   .split_accumulator = false});  // TE's fprop
  return y;
}

const Fp8Tensor& Fp8Linear::forward_weight(ModelEnv& env, const Parameter& w) {
  quantize_weight(env, w);
  return weight_rowwise_;
}

Fp8Grad Fp8Linear::quantize_grad(ModelEnv& env, const Tensor& dy) {
  return {.dy = &dy,
          .rowwise = quantize(env, dy, dy.shape[0], dy.shape[1], Fp8LayerState::grad, false)};
}

Tensor Fp8Linear::input_grad(ModelEnv& env, const Fp8Grad& g, const Parameter& w) {
  Tensor dx = allocate_like(env, Shape{g.rowwise.rows, w.local_shape[1]});
  env.device.fp8_gemm(env.stream, {.a = g.rowwise, .b = weight_columnwise_, .c = dx});
  return dx;
}

void Fp8Linear::weight_grad(ModelEnv& env, const Fp8Grad& g, const Tensor& x,
                            const Fp8Tensor* saved_input, Parameter& w) {
  const Tensor& dy = *g.dy;
  if (!state_->config().wgrad) {  // Megatron's --no-fp8-wgrad: this GEMM in the compute dtype
    accumulate_weight_grad(env, dy, x, w);
    return;
  }
  const std::int64_t rows = dy.shape[0];
  const bool one_scale = per_tensor();
  // wgrad reduces over the rows (tokens): block recipes need copies blocked along them.
  const Fp8Tensor dyq = one_scale ? g.rowwise
                        : g.columnwise.codes.storage
                            ? g.columnwise
                            : quantize(env, dy, rows, dy.shape[1], Fp8LayerState::grad, true);
  const Fp8Tensor xq = saved_input != nullptr && saved_input->codes.storage
                           ? *saved_input
                           : quantize(env, x, rows, x.shape[1], Fp8LayerState::input, !one_scale);
  if (env.gradient_accumulation_fusion || env.first_backward) {
    const float beta = env.gradient_accumulation_fusion ? 1.0f : 0.0f;
    env.device.fp8_gemm(env.stream,
                        {.a = dyq, .b = xq, .c = w.grad, .transpose_a = true, .beta = beta});
    return;
  }
  Tensor fresh = allocate_like(env, w.grad.shape);
  env.device.fp8_gemm(env.stream, {.a = dyq, .b = xq, .c = fresh, .transpose_a = true});
  env.device.add(env.stream, w.grad, fresh, w.grad);
}

void check_fp8_step(const Fp8Config& config, std::vector<Violation>& out) {
  if (!config.enabled()) return;
  if (config.param_gather && config.recipe != "delayed" && config.recipe != "tensorwise")
    out.push_back(
        {"fp8_param_gather", "true",
         "FP8 parameters are built for the delayed and tensorwise recipes (one scale a weight), "
         "not for fp8_recipe " +
             config.recipe +
             (config.recipe == "mxfp8"
                  ? " (Megatron gathers MXFP8 parameters in bf16 through the gradient buffer, "
                    "--reuse-grad-buf-for-mxfp8-param-ag, and quantizes them after the gather)"
                  : " (Megatron all-reduces every 128 x 128 tile's amax over dp, as the "
                    "data-parallel shards cut the tiles, then gathers the codes)") +
             "; leave fp8_param_gather out or use fp8_recipe delayed or tensorwise"});
}

}  // namespace tandem
