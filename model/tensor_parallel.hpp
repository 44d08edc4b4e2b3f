// Megatron's tensor-parallel building blocks (tensor_parallel/layers.py, mappings.py),
// written against Device and the tp Communicator. At tp = 1 the same code runs and the
// collectives run on a one-rank group: there is no special case.
//
//   column-parallel  Y_r = X · W_rᵀ + b_r        backward: dX = Σ_r dY_r · W_r (all-reduce,
//                                                 overlapped with the weight-gradient GEMM)
//   row-parallel     Y = Σ_r X_r · W_rᵀ + b      forward all-reduce; backward local
//
// With sequence parallelism the activations outside these layers are sequence shards
// (rows / tp, C) — rows are sequence-first, t·B + b, so a shard is contiguous — and the
// collectives become their sequence-parallel conjugates, as in Megatron:
//
//   column-parallel  forward: all-gather X along the sequence, then the GEMM
//                    backward: re-all-gather X (overlapped with the input-gradient GEMM),
//                              reduce-scatter dX (overlapped with the weight-gradient GEMM)
//   row-parallel     forward: reduce-scatter Y along the sequence, then the bias (on the shard)
//                    backward: all-gather dY; the bias gradient comes from the shard (its
//                              parameter is marked sequence_parallel: all-reduced over tp)
#pragma once

#include <functional>
#include <vector>

#include "core/communicator.hpp"
#include "core/device.hpp"
#include "model/parameters.hpp"
#include "model/step_observer.hpp"

namespace tandem {

// How context parallelism moves keys and values: model/context_parallel_attention.hpp.
enum class CpCommType { p2p, all_gather };

struct ModelEnv;

// The weight-gradient work of a split backward (ZB-H1's W, Megatron's delay_wgrad_compute),
// in the order the backward met it: the linear layers' weight GEMMs and bias sums, and the
// data-parallel hooks told that a set of gradients is final. Each entry holds the tensors it
// reads and runs with the ModelEnv of the pass that runs it (GptChunk::backward_weights).
struct WeightGradQueue {
  std::vector<std::function<void(ModelEnv&)>> work;
  void run(ModelEnv& env) {
    for (auto& w : work) w(env);
    work.clear();
  }
};

struct ModelEnv {
  Device& device;
  Stream& stream;
  Communicator& tp;
  // Activations between tensor-parallel regions are sequence shards (Megatron's
  // sequence_parallel; only meaningful at tp > 1).
  bool sequence_parallel = false;
  // The dtype activations and the parameters' compute copies have: fp32, or bf16 / fp16
  // under mixed precision (gradients and optimizer state stay fp32).
  DType compute = DType::fp32;
  // Context parallelism (cp > 1; else null): each rank holds 2 of the sequence's 2·cp
  // chunks, r and 2·cp − 1 − r, and attention gathers keys and values over this group.
  Communicator* cp = nullptr;
  CpCommType cp_comm = CpCommType::p2p;  // how its keys and values travel (Megatron's default)
  // Expert parallelism (mixture-of-experts layers; else null): the ranks whose experts
  // together make a layer's, over which the tokens are exchanged (model/moe_layer.hpp).
  Communicator* ep = nullptr;
  Communicator* tp_ep = nullptr;  // the tp × ep ranks (Megatron's allgather dispatcher)
  // Hooks on the layer boundaries for what is not the step's own (model/step_observer.hpp);
  // null: none.
  StepObserver* observer = nullptr;
  // Megatron's --attention-dropout on the attention probabilities (0: none). The mask
  // follows from the seed, the microbatch (set by the stage program before each pass, so
  // the recomputed forward and the backward see the forward's) and the layer.
  float attention_dropout = 0;
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_microbatch = 0;
  // Megatron's gradient_accumulation_fusion: the weight-gradient GEMMs accumulate into the
  // gradient buffer. Off, each writes a fresh gradient that a separate kernel adds, as
  // autograd's AccumulateGrad does, except in the step's first backward of a chunk, whose
  // gradient the buffer takes as it is (first_backward, set by the stage program).
  bool gradient_accumulation_fusion = true;
  bool first_backward = true;
  // Megatron-Core's defer_embedding_wgrad_compute: the output layer's weight gradients of
  // the first wgrad_deferral_limit backwards of a step (0: all) wait for the end of the
  // schedule (GptChunk::drain_output_weight_grads).
  bool defer_embedding_wgrad_compute = false;
  int wgrad_deferral_limit = 0;
  // Megatron's async_tensor_model_parallel_allreduce: a column-parallel backward's input
  // gradient all-reduce overlaps its weight-gradient GEMM (off: it ends first).
  bool async_tensor_model_parallel_allreduce = true;
  // Megatron-Core's --tp-comm-overlap (with sequence parallelism): the all-gather before a
  // column-parallel forward and a row-parallel backward GEMM, and the reduce-scatter after a
  // row-parallel forward GEMM, run as ring steps under the GEMM's blocks
  // (model/tp_comm_overlap.hpp). The column-parallel backward already overlaps its own.
  bool tp_comm_overlap = false;
  // Megatron's transformer_impl "transformer_engine": each of a layer's Transformer Engine
  // modules — norm + QKV (LayerNormLinear), the attention core (DotProductAttention), the
  // projection (Linear), norm + fc1 (LayerNormLinear), fc2 (Linear) — is one library call
  // (model/library_call.hpp), forward and backward; off: every op is the framework's own.
  bool transformer_engine = false;
  // Megatron's bias_gelu_fusion: fc1's bias is added inside the GeLU kernel (Device::
  // bias_gelu) instead of by a bias_add before it. Off (--no-bias-gelu-fusion), two kernels.
  bool bias_gelu_fusion = true;
  // Megatron-Core's cross_entropy_loss_fusion: the loss's target logits and sums of
  // exponentials are all-reduced over tp as one tensor (fused_vocab_parallel_cross_entropy);
  // off, one all-reduce each, as VocabParallelCrossEntropy does.
  bool cross_entropy_loss_fusion = false;
  // Megatron's bias_dropout_fusion: the projection's and fc2's bias (and the hidden dropout)
  // is applied inside the residual add (Device::bias_dropout_add). Off
  // (--no-bias-dropout-fusion), a bias_add, a dropout (with hidden_dropout) and an add.
  bool bias_dropout_fusion = true;
  // Megatron's --hidden-dropout after the embedding and on each layer's attention and MLP
  // output (0: none). The mask follows the seed, the microbatch, the site and the element's
  // row among the whole sequence's (core/device.hpp HiddenDropout).
  float hidden_dropout = 0;
  // The step being run (counted by the stage program): FP8 layers quantize their weights
  // and update their delayed scales once per step (model/fp8_linear.hpp).
  std::int64_t step = 0;
  // The step is an evaluation's (forward only, no gradients): FP8 delayed scaling records
  // its amaxes but does not reduce them or update the scales (model/fp8_linear.hpp).
  bool forward_only = false;
  // FP8 delayed scaling's amax reduction group: Megatron's get_amax_reduction_group(
  // with_context_parallel=True), the tp × dp × cp ranks of a stage, one communicator of its
  // own (its reductions do not queue behind the data-parallel gathers); null: tp alone.
  Communicator* amax_group = nullptr;
  // A split backward (GptChunk::backward_input) in progress: weight-gradient work goes here
  // instead of running (weight_grad_work); null: it runs at once.
  WeightGradQueue* wgrad_queue = nullptr;
};

// Runs `work` now, or queues it on env.wgrad_queue during a split backward.
void weight_grad_work(ModelEnv& env, std::function<void(ModelEnv&)> work);

class Fp8Linear;  // model/fp8_linear.hpp

// The site of a hidden dropout: 0 after the embedding, 2·layer + 1 after a layer's attention,
// 2·layer + 2 after its MLP.
inline std::uint64_t hidden_dropout_site(int layer, bool mlp) {
  return layer < 0 ? 0 : 2 * static_cast<std::uint64_t>(layer) + (mlp ? 2 : 1);
}

// The hidden dropout at `site` (hidden_dropout_site) on this rank's activation x (rows, C):
// its rows are the whole sequence's, or with sequence parallelism this rank's shard.
HiddenDropout hidden_dropout_at(const ModelEnv& env, std::uint64_t site, const Tensor& x);

// Where row t of this rank's part of a sequence of `local` rows sits in the whole
// sequence: its two chunks at r·c and (2·cp − 1 − r)·c, c = local / 2 (Megatron's causal
// load balancing); t itself without context parallelism.
std::int64_t sequence_position(const ModelEnv& env, std::int64_t t, std::int64_t local);

// An activation in the compute dtype.
Tensor allocate_like(ModelEnv& env, const Shape& shape);
// Per-row statistics (layer-norm mean and rstd, losses) stay fp32 under mixed precision.
Tensor allocate_fp32(Device& d, const Shape& shape);

// y(rows, out) = x(rows, in) · w(out, in)ᵀ [+ b(out)]; with `fp8`, the GEMM in FP8, and
// `fp8_input`, when given, gets the FP8 copy of x the weight gradient is to read
// (Fp8Linear::forward). `bias_in_gemm`: the bias as the GEMM's epilogue (Transformer
// Engine's Linear with its bias, skip_bias_add off), not a bias_add after it; FP8 GEMMs
// keep the bias_add.
Tensor linear_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b,
                      Fp8Linear* fp8 = nullptr, Fp8Tensor* fp8_input = nullptr,
                      bool bias_in_gemm = false);
// w.grad += dyᵀ · x: one accumulating GEMM, or (gradient_accumulation_fusion off) a GEMM
// into a fresh gradient and an add. Weight-gradient work (weight_grad_work), as are the
// weight and bias gradients of every linear layer below.
void accumulate_weight_grad(ModelEnv& env, const Tensor& dy, const Tensor& x, Parameter& w);
// w.grad += dyᵀ · x; b.grad += column sums of dy (with `bias_in_gemm` as the weight-gradient
// GEMM's epilogue, as Transformer Engine's Linear reads it off dy; else a bias_grad).
void linear_weight_grad(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                        Parameter* b, bool bias_in_gemm = false);
// dx(rows, in) = dy(rows, out) · w(out, in)
Tensor linear_input_grad(ModelEnv& env, const Tensor& dy, const Parameter& w);

// Megatron's gather_from_sequence_parallel_region: x (rows / tp, C) → (rows, C), the tp
// ranks' shards in rank order.
Tensor gather_from_sequence_parallel_region(ModelEnv& env, const Tensor& x);
// Megatron's reduce_scatter_to_sequence_parallel_region: partial sums x (rows, C) →
// this rank's reduced shard (rows / tp, C).
Tensor reduce_scatter_to_sequence_parallel_region(ModelEnv& env, const Tensor& x);

// The four below take an optional Fp8Linear: its GEMMs then run in FP8 (the collectives
// and the biases stay as they are). Forward's optional `fp8_input` receives the FP8 copy of
// the input that backward's weight gradient then reads in place of x (TE saves it, not x;
// Fp8Linear::saves_input), and x may be empty there. The column-parallel layers save it
// without sequence parallelism only: with it, forward gathers the input, and backward
// gathers the compute-dtype shard again and quantizes it (TE gathers FP8 shards).
// `bias_in_gemm`: the bias and its gradient as the GEMMs' epilogues (Transformer Engine's
// Linear; Megatron-Core's QKV, the one column-parallel layer that does not skip its bias
// add), where the GEMM is tandem's own bf16/fp32 one; FP8 and --tp-comm-overlap's ring
// GEMMs keep the separate kernels.
// x: (rows, in), or (rows / tp, in) with sequence parallelism; returns (rows, out / tp).
Tensor column_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w,
                               const Parameter* b, Fp8Linear* fp8 = nullptr,
                               Fp8Tensor* fp8_input = nullptr, bool bias_in_gemm = false);
// Returns dX in x's shape: all-reduced over tp, or reduce-scattered with sequence
// parallelism; the collective runs while the weight gradient is computed.
// The input gradient of a column-parallel linear alone, its weight gradient left to the
// caller (Megatron's deferred output-layer wgrad): dy · W all-reduced over tp, or under
// sequence parallelism reduce-scattered to x's sequence shard (x is not gathered again).
Tensor column_parallel_input_grad(ModelEnv& env, const Tensor& x, const Tensor& dy,
                                  const Parameter& w);
Tensor column_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                                Parameter* b, Fp8Linear* fp8 = nullptr,
                                const Fp8Tensor* fp8_input = nullptr, bool bias_in_gemm = false);

// x: (rows, in / tp); returns (rows, out), or (rows / tp, out) with sequence parallelism.
Tensor row_parallel_forward(ModelEnv& env, const Tensor& x, const Parameter& w, const Parameter* b,
                            Fp8Linear* fp8 = nullptr, Fp8Tensor* fp8_input = nullptr);
// dy in the forward output's shape; returns dX (rows, in / tp).
Tensor row_parallel_backward(ModelEnv& env, const Tensor& x, const Tensor& dy, Parameter& w,
                             Parameter* b, Fp8Linear* fp8 = nullptr,
                             const Fp8Tensor* fp8_input = nullptr);

}  // namespace tandem
