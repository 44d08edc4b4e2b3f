// Megatron-Core's FP8 linear layers as Transformer Engine runs them (TE's Linear under
// fp8_autocast with Megatron's recipe): the GEMMs of QKV, the attention projection, FC1 and
// FC2 take FP8 operands — the input and the weight E4M3, the output gradient E4M3 or, under
// the hybrid format, E5M2 — and write the compute dtype (or accumulate into the fp32 weight
// gradient). The output layer and the attention core stay in the compute dtype.
//
//   recipe       input / grad (fprop, dgrad)   weight       input / grad (wgrad)
//   delayed      per tensor, scale from the amax history (the same codes serve both GEMMs)
//   tensorwise   per tensor, scale from the tensor's own amax
//   blockwise    1 × 128 blocks                128 × 128    128 × 1 blocks (along tokens)
//   mxfp8        1 × 32, E8M0 scales           1 × 32 and   32 × 1
//                                              32 × 1
//
// Each GEMM's blocks run along its reduction dimension, as TE's rowwise and columnwise
// copies do. The weights are quantized once per step (the first forward of the step) and
// every microbatch reuses them; FP8 parameters (--fp8-param-gather, model/fp8_params.hpp)
// are not quantized at all: fprop reads their codes and dgrad a copy of them (TE's transpose
// of the FP8 data), 1 byte an element. Delayed scaling keeps, per layer, the amax history and
// scale of its 12 tensors (4 linears × input, weight, gradient); a step's amaxes are
// max-accumulated, all-reduced (max) over tp and the data-parallel group (TE's amax
// reduction group, Megatron's tp-dp-cp) and turned into the next scales once, at the step's
// first forward of the layer; an evaluation's forwards add their amaxes to the next training
// step's and update nothing, as TE under torch.no_grad(). TE updates them at every microbatch's
// fp8_autocast exit; updating once per step keeps every layout on the same scales (the
// single-process run sees the dp ranks' microbatches in another order), so tp / pp / dp give the
// same losses. What is held, as TE holds it (transformer_engine/pytorch/module/linear.py and
// layernorm_linear.py; TE 1.x saves `inputmat_t` / the FP8 `ln_out`, TE 2.x the input's
// columnwise quantization): for the wgrad GEMM a layer keeps its input's FP8 copy, 1 byte an
// element, not the compute-dtype input (the copy the forward GEMM read under per-tensor
// scaling, the columnwise one made in forward under the block recipes); with
// --no-fp8-wgrad the compute-dtype input instead. The weights' FP8 copies are cached from
// the step's first forward to the next step's (TE's weight workspace, is_first_microbatch):
// a rowwise copy for fprop and a columnwise one for dgrad — on Hopper TE's transposed copy,
// as FP8 GEMMs there take TN layouts only; under MXFP8 the 32 × 1 blocks —, 2 bytes an
// element in all. Blackwell needs no transpose for per-tensor scaling: tandem holds it there
// too (1 byte a weight element more than TE).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/fp8_config.hpp"
#include "model/parameters.hpp"
#include "model/tensor_parallel.hpp"

namespace tandem {

// The FP8 state of one transformer layer: the recipe and, under delayed scaling, the amax
// history and scale of each of its linear layers' three tensors (slot 3·linear + role).
class Fp8LayerState {
 public:
  static constexpr int kLinears = 4;  // qkv, proj, fc1, fc2
  static constexpr int kSlots = 3 * kLinears;
  enum Role { input = 0, weight = 1, grad = 2 };

  explicit Fp8LayerState(const Fp8Config& config) : config_(config) {}
  const Fp8Config& config() const { return config_; }
  bool delayed() const { return config_.recipe == "delayed"; }
  Fp8Format format(Role role) const {
    return role == grad && config_.hybrid() ? Fp8Format::e5m2 : Fp8Format::e4m3;
  }
  // Once per step (env.step), at the layer's first forward: the previous step's amaxes
  // reduced and turned into scales (delayed; not in an evaluation, env.forward_only, whose
  // amaxes the next training step reduces), the weights marked for quantization.
  void begin_step(ModelEnv& env);
  std::int64_t step() const { return step_; }
  // Delayed scaling's state allocated and started (empty histories, scales 1), if not yet:
  // at the first step, or before it when FP8 parameters are cast with its scales.
  void prepare(Device& d, Stream& s);
  // Delayed scaling's (1) scale and amax of a slot; null under the other recipes.
  const Tensor* scale(int slot) const { return delayed() ? &scale_views_[slot] : nullptr; }
  Tensor* amax(int slot) { return delayed() ? &amax_views_[slot] : nullptr; }

  // What a checkpoint keeps of delayed scaling (TE's extra state): the amax history, the
  // scales and this step's amaxes, not yet reduced. None before the layer's first step or
  // under the other recipes, which keep no state between steps.
  bool has_checkpoint_state() const { return delayed() && history_.storage != nullptr; }
  Tensor& amax_history() { return history_; }
  Tensor& scales() { return scale_; }
  Tensor& step_amaxes() { return amax_; }
  // Allocates that state for a checkpoint's values to be uploaded into: the next step then
  // reduces the saved amaxes and updates the scales as the uninterrupted run would.
  void allocate_for_restore(Device& d);

 private:
  void allocate(Device& d);

  Fp8Config config_;
  std::int64_t step_ = -1;
  Tensor history_;  // (amax_history_len, kSlots) fp32, row 0 the newest
  Tensor scale_;    // (kSlots) fp32
  Tensor amax_;     // (kSlots) fp32, this step's so far
  std::array<Tensor, kSlots> scale_views_, amax_views_;
};

// A quantized output gradient: the GEMMs' operands made from dy once per backward.
struct Fp8Grad {
  const Tensor* dy = nullptr;  // (rows, out) in the compute dtype
  Fp8Tensor rowwise;           // for dgrad (and wgrad under per-tensor scaling)
  // The block recipes' wgrad operand, blocked along the rows, where it was gathered as codes
  // (sequence parallelism); empty: weight_grad quantizes *dy.
  Fp8Tensor columnwise;
};

// One linear layer of a layer's Fp8LayerState: `linear` is 0 qkv, 1 proj, 2 fc1, 3 fc2.
class Fp8Linear {
 public:
  Fp8Linear(Fp8LayerState& state, int linear) : state_(&state), linear_(linear) {}

  // y (rows, out) = x (rows, in) · wᵀ, both in FP8; no bias. With `saved_input`, it gets the
  // FP8 copy of x that weight_grad reads (when saves_input()).
  Tensor forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                 Fp8Tensor* saved_input = nullptr);
  // Whether the wgrad GEMM reads an FP8 copy of the input saved in forward (FP8 wgrad), or
  // the compute-dtype input (--no-fp8-wgrad).
  bool saves_input() const { return state_->config().wgrad; }
  Fp8Grad quantize_grad(ModelEnv& env, const Tensor& dy);
  // dx (rows, in) = dy · w.
  Tensor input_grad(ModelEnv& env, const Fp8Grad& g, const Parameter& w);
  // The operands of --tp-comm-overlap's ring steps (model/tp_comm_overlap.hpp), which
  // quantize each rank's rows before they move: x (rows, in) as forward quantizes it, and the
  // step's weight copies for fprop and dgrad (quantized at the step's first forward).
  Fp8Tensor quantize_input(ModelEnv& env, const Tensor& x);
  // Whether a sequence-parallel all-gather of this layer's input or output gradient, a
  // shard of `rows` rows, moves FP8 codes, as Transformer Engine's does with FP8 weight
  // gradients (TE 1.x layernorm_linear.py / linear.py and grad_output_preprocess; TE 2.x
  // the same through its quantized gather, distributed.py gather_along_first_dim): the shard
  // is quantized before it moves. Per-tensor scaling: 1 byte an element. The block recipes
  // gather their codes with their block scales where TE's is_quantizable takes the shard
  // (rows and columns multiples of the block: 128, MXFP8's 32), so that every block of the
  // gathered tensor is one of a shard; elsewhere the compute dtype is gathered and then
  // quantized (TE's fallback).
  bool gathers_codes(std::int64_t rows, std::int64_t cols) const;
  // Whether the recipe keeps one scale a tensor (delayed, tensorwise): its codes serve both
  // GEMM layouts; the block recipes need a copy blocked along the rows for wgrad.
  bool per_tensor() const;
  // A shard of rows quantized for `role` so that the gathered codes are those of the whole
  // tensor: delayed scaling's one scale, or (tensorwise) the current scale of the amax
  // all-reduced (max) over tp, TE's amax reduction group for sequence-parallel tensors; the
  // block recipes' blocks along the columns (rowwise usage), or with `along_rows` along
  // the rows (columnwise usage, wgrad's).
  Fp8Tensor quantize_shard(ModelEnv& env, const Tensor& t, Fp8LayerState::Role role,
                           bool along_rows = false);
  // y (rows, out) = x · wᵀ from x already quantized (a gathered input).
  Tensor forward_quantized(ModelEnv& env, const Fp8Tensor& xq, const Parameter& w);
  const Fp8Tensor& forward_weight(ModelEnv& env, const Parameter& w);
  const Fp8Tensor& dgrad_weight() const { return weight_columnwise_; }
  // w.grad += dyᵀ · x (x: rows, in), in FP8 unless fp8_wgrad is off; from `saved_input`
  // (forward's copy) when given, else x quantized here.
  void weight_grad(ModelEnv& env, const Fp8Grad& g, const Tensor& x, const Fp8Tensor* saved_input,
                   Parameter& w);

 private:
  int slot(Fp8LayerState::Role role) const { return 3 * linear_ + role; }
  // (rows, cols) of `t` quantized for `role`, its blocks along rows (`along_rows`: the
  // columnwise copy wgrad reads) or along columns.
  // `transposed_copy`: the codes of the quantization just made, as TE's transposed copy
  // (Fp8QuantizeArgs::transposed_copy).
  Fp8Tensor quantize(ModelEnv& env, const Tensor& t, std::int64_t rows, std::int64_t cols,
                     Fp8LayerState::Role role, bool along_rows, bool transposed_copy = false);
  void quantize_weight(ModelEnv& env, const Parameter& w);

  Fp8LayerState* state_;
  int linear_;
  std::int64_t weight_step_ = -1;
  Fp8Tensor weight_rowwise_, weight_columnwise_;  // the step's weight: fprop's and dgrad's
};

// What the training step does not run yet with FP8, as violations naming the field.
void check_fp8_step(const Fp8Config& config, std::vector<Violation>& out);

}  // namespace tandem
