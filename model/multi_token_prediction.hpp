// Megatron-Core's multi-token prediction block (transformer/multi_token_prediction.py,
// DeepSeek-V3 §2.2): D depths after the decoder on the chunk that holds them. Depth k
// (1 … D) takes the tokens k ahead (rolled: position t holds token t + k, the last k
// positions token 0) through the shared word embedding, normalizes them (enorm) and the
// hidden states of depth k − 1 (hnorm; depth 1: the decoder's output after its final norm,
// as Megatron's GPTModel hands it over), concatenates the two as [embedding | hidden]
// (rows, 2h), projects them with eh_proj (a column-parallel 2h → h linear without bias; its
// output all-gathered over tp along the hidden dimension and, with sequence parallelism,
// scattered back to this rank's sequence shard), runs one transformer layer of the
// decoder's last layer's kind (dense or MoE) and its own final norm. The depth outputs go
// to the shared output layer (GptChunk), whose cross entropy against the labels k ahead
// (the last k positions masked) makes depth k's loss.
//
// Parameters, under Megatron's checkpoint names: mtp.layers.{k-1}.enorm / .hnorm /
// .eh_proj / .transformer_layer.* / .final_layernorm. With full recomputation each depth is
// checkpointed as a whole from its two inputs (Megatron's _checkpointed_forward with
// recompute_method uniform); with selective recomputation its layer recomputes its
// attention core.
#pragma once

#include <vector>

#include "model/transformer_layer.hpp"

namespace tandem {

// What backward needs from one depth's forward (with full recomputation: tokens, hidden and
// embedded only; the rest is recomputed).
struct MtpDepthActivations {
  Tensor tokens;    // (T·B) int32: the tokens k ahead, whole sequences
  Tensor hidden;    // (rows, C): the previous depth's output, hnorm's input
  Tensor embedded;  // (rows, C): the embedding of `tokens`, enorm's input
  Tensor e_mean, e_rstd, h_mean, h_rstd;
  Tensor cat;  // (rows, 2C): [enorm(embedded) | hnorm(hidden)], eh_proj's input
  LayerActivations layer;
  Tensor layer_out, f_mean, f_rstd;  // the final norm's input and statistics
};

// The rows of depth k's loss this rank masks out: those whose label lies past the
// sequence's end (Megatron's rolled loss mask), the last k·B rows — with context
// parallelism, of the rank's rows those whose place in the whole sequence
// (sequence_position) is within k of its end: a tail of its second chunk, or none.
// `local_seq` is the rank's share T of the sequence, `micro_batch` B.
std::int64_t mtp_masked_rows(const ModelEnv& env, std::int64_t local_seq, std::int64_t micro_batch,
                             int k);

class MtpBlock {
 public:
  // Registers the depths' parameters; `layer` is the decoder's last layer's shape (dense or
  // MoE), `word` the chunk's word embedding (the shared one).
  MtpBlock(ParameterSet& params, const LayerDims& layer, int depths, int word, Recompute recompute);

  int depths() const { return static_cast<int>(layers_.size()); }
  // The depths' outputs (rows, C) from the decoder's hidden states h0 (rows, C), rows being
  // T·B, or this rank's T·B / tp with sequence parallelism. tokens[k − 1]: depth k's.
  std::vector<Tensor> forward(ModelEnv& env, const Tensor& h0, const std::vector<Tensor>& tokens,
                              std::vector<MtpDepthActivations>& saved);
  // grads[k − 1]: the gradient of depth k's output from its head. Returns the gradient of
  // h0 from depth 1's hnorm (to add to the main head's). `loss_scale` as for the layers.
  Tensor backward(ModelEnv& env, std::vector<Tensor> grads, std::vector<MtpDepthActivations>& saved,
                  float loss_scale);
  std::vector<int> parameter_indices() const;
  std::vector<TransformerLayer>& layers() { return layers_; }

 private:
  struct Depth {
    int enorm_w = -1, enorm_b = -1, hnorm_w = -1, hnorm_b = -1, eh_proj = -1;
    int final_w = -1, final_b = -1;
  };
  // Everything after the embedding: the norms, eh_proj, the layer and the final norm.
  Tensor depth_forward(ModelEnv& env, int k, MtpDepthActivations& a);
  void norm_forward(ModelEnv& env, const Tensor& x, int w, int b, Tensor& out, Tensor& mean,
                    Tensor& rstd);
  void norm_backward(ModelEnv& env, const Tensor& dy, const Tensor& x, int w, int b,
                     const Tensor& mean, const Tensor& rstd, Tensor& dx);
  // The hidden-dropout site of depth k's embedding dropout: one no layer uses (the depths'
  // layers are numbered num_layers … num_layers + D − 1; these sites lie past them).
  std::uint64_t embedding_site(int k) const {
    return hidden_dropout_site(dims_.num_layers + depths() + k, false);
  }

  ParameterSet& params_;
  LayerDims dims_;
  int word_ = -1;
  bool full_recompute_ = false;
  std::vector<Depth> depth_;
  std::vector<TransformerLayer> layers_;
};

}  // namespace tandem
