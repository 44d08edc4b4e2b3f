// One pre-LN GPT block, Megatron's TransformerLayer: LN → QKV (column-parallel) → causal
// attention over this rank's heads → projection (row-parallel) → residual; LN → fc1
// (column-parallel) → GeLU → fc2 (row-parallel) → residual. Activations are (T·B, C),
// row t·B + b, sequence-first as Megatron's [s, b, h]; with sequence parallelism the
// layer's input, layer norms and residuals are this rank's contiguous sequence shard
// (T·B / tp, C) and only the tensor-parallel regions see whole sequences.
#pragma once

#include <string>
#include <vector>

#include "model/tensor_parallel.hpp"

namespace tandem {

enum class Recompute { none, selective, full };
Recompute parse_recompute(const std::string& granularity);  // "none" | "selective" | "full"

struct LayerDims {
  int hidden = 0;                  // C
  int heads = 0;                   // all heads; this rank holds heads / tp
  int ffn = 0;                     // all of the MLP width; this rank holds ffn / tp
  int seq = 0;                     // T
  int micro_batch = 0;             // B
  int num_layers = 0;              // of the whole model, for the output-layer init scale
  bool sequence_parallel = false;  // activations outside tp regions are sequence shards
};

// What backward needs from forward. With full recomputation only `input` is kept; with
// selective recomputation everything but the attention probabilities.
struct LayerActivations {
  Tensor input, ln1_out, ln1_mean, ln1_rstd, qkv, probs, attn_out;
  Tensor residual, ln2_out, ln2_mean, ln2_rstd, fc1_out, gelu_out;
};

class TransformerLayer {
 public:
  // Registers the layer's parameters in `params` under "layers.{index}.…".
  TransformerLayer(ParameterSet& params, int index, const LayerDims& dims, Recompute recompute);

  Tensor forward(ModelEnv& env, const Tensor& x, LayerActivations& saved);
  Tensor backward(ModelEnv& env, const Tensor& grad_out, LayerActivations& saved);
  // The indices of this layer's parameters in the ParameterSet.
  std::vector<int> parameter_indices() const {
    return {ln1_w_, ln1_b_, qkv_w_, qkv_b_, proj_w_, proj_b_,
            ln2_w_, ln2_b_, fc1_w_, fc1_b_, fc2_w_,  fc2_b_};
  }

 private:
  Tensor forward_all(ModelEnv& env, const Tensor& x, LayerActivations& a, bool keep_probs);

  ParameterSet& params_;
  LayerDims dims_;
  Recompute recompute_;
  int ln1_w_, ln1_b_, qkv_w_, qkv_b_, proj_w_, proj_b_;
  int ln2_w_, ln2_b_, fc1_w_, fc1_b_, fc2_w_, fc2_b_;
};

}  // namespace tandem
