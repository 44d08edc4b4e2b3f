// A model chunk of Megatron's GPTModel: the layers one (virtual) pipeline stage owns,
// plus the word and position embeddings on the first stage and the final layer norm,
// output layer (tied to the word embedding) and vocab-parallel cross entropy on the last.
// Written against Device and the tp Communicator only; the pipeline between chunks is the
// step interpreter's business.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/pipeline_layout.hpp"  // ChunkPlan: which layers, embedding and loss a chunk holds
#include "model/multi_token_prediction.hpp"
#include "model/transformer_layer.hpp"

namespace tandem {

struct GptDims {
  int num_layers = 0;
  int hidden = 0;
  int heads = 0;
  int ffn = 0;
  int seq = 0;
  int micro_batch = 0;
  int padded_vocab = 0;  // a multiple of 128 · tp
  int max_positions = 0;
  bool sequence_parallel = false;  // Megatron's sequence_parallel (meaningful at tp > 1)
  DType compute = DType::fp32;     // activations and parameter copies (bf16/fp16: mixed precision)
  // Llama-style switches (transformer_layer.hpp). With rope there is no position embedding;
  // with untie_embeddings_and_output_weights the last stage has its own output layer
  // ("output_layer.weight") and the first stage's word embedding is not shared.
  LayerOptions options;
  // Mixture of experts: which layers are MoE layers (empty: none), their options and this
  // rank's place on the expert grid.
  std::vector<bool> moe_layers;
  MoeOptions moe;
  int ep_size = 1, ep_rank = 0;
  // Multi-token prediction (model/multi_token_prediction.hpp): the model's depths (0: none;
  // which chunk builds them its ChunkPlan says) and the weight of their mean loss.
  int mtp_num_layers = 0;
  float mtp_loss_scaling_factor = 0.1f;
};

// One microbatch as the chunk sees it: token, position and label ids, sequence-first
// (row t·B + b, Megatron's [s, b]), whole sequences also under sequence parallelism.
struct MicrobatchTensors {
  Tensor tokens;     // (T·B) int32
  Tensor positions;  // (T·B) int32
  Tensor labels;     // (T·B) int32
  // Multi-token prediction, depth k at [k − 1]: the tokens and labels k ahead (Megatron's
  // roll_tensor: row t·B + b holds those of row (t + k)·B + b, the last k·B rows 0), on the
  // chunk holding the MTP block and on the one holding the loss.
  std::vector<Tensor> mtp_tokens, mtp_labels;
};

// Told when backward has finished writing a set of parameters' gradients for a
// microbatch — what Megatron's gradient hooks tell its DDP buckets, so the data-parallel
// reduction of a bucket can start while backward still runs.
class GradReadyHook {
 public:
  virtual ~GradReadyHook() = default;
  virtual void on_grads_ready(int microbatch, const std::vector<int>& parameters) = 0;
};

// Told before forward reads a set of parameters — what Megatron-Core's forward pre-hooks
// tell the distributed optimizer, so a parameter all-gather can run under the forward of the
// layers before.
class ParamsNeededHook {
 public:
  virtual ~ParamsNeededHook() = default;
  virtual void on_params_needed(const std::vector<int>& parameters) = 0;
};

class GptChunk {
 public:
  GptChunk(ParameterSet& params, const GptDims& dims, const ChunkPlan& plan, Recompute recompute);

  // pre_process: input ignored, the microbatch's tokens are embedded. post_process: returns
  // an empty tensor and records the microbatch's loss (per-row losses, see row_losses).
  // Activations in and out are (T·B, C), or this rank's (T·B / tp, C) sequence shard with
  // sequence parallelism.
  // `loss_scale` multiplies the loss gradient (1 / number of microbatches in the step).
  Tensor forward(ModelEnv& env, int microbatch, const Tensor& input, const MicrobatchTensors& mb);
  Tensor backward(ModelEnv& env, int microbatch, const Tensor& grad_output, float loss_scale);
  // The split backward (ZB-H1's B and W, Megatron's delay_wgrad_compute): backward_input
  // returns what backward returns and keeps the linear layers' weight and bias gradients, and
  // the GradReadyHook calls that follow them, for backward_weights, which runs them in the
  // order backward would have; the embeddings' gradients are W work too. The layer norms'
  // gradients come out of the kernels that compute the input gradient, so they stay in B.
  Tensor backward_input(ModelEnv& env, int microbatch, const Tensor& grad_output, float loss_scale);
  void backward_weights(ModelEnv& env, int microbatch);
  // defer_embedding_wgrad_compute: the output layer's weight gradients the step's backwards
  // kept, run now in their order (Megatron's drain_embedding_wgrad_compute: under sequence
  // parallelism each input gathered over tp again, the next one's gather under this one's
  // GEMM), then the output weight reported ready. Nothing kept: nothing to do.
  void drain_output_weight_grads(ModelEnv& env);
  // Drops what forward saved for `microbatch` (forward-only evaluation).
  void discard(int microbatch) { saved_.erase(microbatch); }

  // Per-row losses (T·B) of a microbatch run forward on the last stage, until backward.
  const Tensor& row_losses(int microbatch) const { return saved_.at(microbatch).head.losses; }
  // Multi-token prediction depth k + 1's per-row losses (T·B; its last (k + 1)·B rows are
  // masked out of the loss), on the chunk holding the loss.
  const Tensor& mtp_row_losses(int microbatch, int k) const {
    return saved_.at(microbatch).mtp_heads.at(static_cast<std::size_t>(k)).losses;
  }
  const ChunkPlan& plan() const { return plan_; }
  // Copies sent to each expert by this rank's tokens, summed over the chunk's MoE layers
  // and the microbatches trained (empty without MoE layers).
  std::vector<std::int64_t> routed_per_expert() const;
  // The chunk's layers (their global index and FP8 state, for checkpoints).
  std::vector<TransformerLayer>& layers() { return layers_; }
  // The multi-token prediction block this chunk holds, or null.
  MtpBlock* mtp() { return mtp_.get(); }
  // The chunk's mixture-of-experts layers, in layer order (the expert bias's update).
  std::vector<MoeLayer*> moe_layers();
  void set_grad_ready_hook(GradReadyHook* hook) { hook_ = hook; }
  void set_params_needed_hook(ParamsNeededHook* hook) { needed_hook_ = hook; }

 private:
  // The output layer and the vocab-parallel cross entropy on one set of hidden states.
  struct HeadActivations {
    Tensor input, logits, row_max, sum_exp, losses;
  };
  struct Saved {
    std::vector<LayerActivations> layers;
    MicrobatchTensors batch;
    Tensor final_input, final_mean, final_rstd;  // the final norm's
    HeadActivations head;                        // the main loss's
    std::vector<MtpDepthActivations> mtp;        // multi-token prediction: its depths
    std::vector<HeadActivations> mtp_heads;      // … and their losses'
  };
  Tensor embed(ModelEnv& env, const MicrobatchTensors& mb);
  void embed_backward(ModelEnv& env, Tensor grad, const MicrobatchTensors& mb);
  Tensor final_norm_forward(ModelEnv& env, const Tensor& x, Saved& s);
  Tensor final_norm_backward(ModelEnv& env, const Tensor& grad, Saved& s);
  void output_forward(ModelEnv& env, const Tensor& x, const Tensor& labels, HeadActivations& h);
  // The gradient of the hidden states from `row_grad` on each row's loss, the last
  // `masked_rows` rows' 0 (their losses are masked out). `deferring`: the main loss's head
  // (not an MTP depth's), whose weight gradient may wait for the drain.
  Tensor output_backward(ModelEnv& env, HeadActivations& h, const Tensor& labels, float row_grad,
                         std::int64_t masked_rows, bool deferring = false);
  // defer_embedding_wgrad_compute: whether the next output-layer weight gradient waits for
  // drain_output_weight_grads (fewer than wgrad_deferral_limit kept so far; 0: always).
  bool defers_output_grad(const ModelEnv& env) const;
  // Multi-token prediction on the decoder's output h0: the depths and the concatenation
  // [h0 | depth 1 | … | depth D] of Megatron's MTP block; on the loss's chunk the depths'
  // losses from it (returning h0's block) and their gradients.
  Tensor mtp_forward(ModelEnv& env, const Tensor& h0, Saved& s);
  Tensor mtp_heads_forward(ModelEnv& env, const Tensor& cat, Saved& s);
  std::vector<Tensor> mtp_heads_backward(ModelEnv& env, Saved& s, float loss_scale);

  ParameterSet& params_;
  GptDims dims_;
  ChunkPlan plan_;
  std::vector<TransformerLayer> layers_;
  int word_ = -1, position_ = -1, final_ln_w_ = -1, final_ln_b_ = -1;
  int output_ = -1;  // the output layer's weight: word_ when tied
  // Without MTP the final norm is the loss chunk's; with it, the last layer's chunk's.
  bool final_norm_ = false;
  std::unique_ptr<MtpBlock> mtp_;
  std::vector<int> present(std::initializer_list<int> indices) const;
  std::map<int, Saved> saved_;
  std::map<int, WeightGradQueue> deferred_;  // per microbatch: backward_input's W
  // defer_embedding_wgrad_compute: the output layer's input (the sequence shard under
  // sequence parallelism) and output gradient of each deferred backward; the microbatch of
  // the last backward run (the step's last when the drain runs).
  struct DeferredOutputGrad {
    Tensor input, grad;
  };
  std::vector<DeferredOutputGrad> deferred_output_;
  int last_backward_ = -1;
  GradReadyHook* hook_ = nullptr;
  ParamsNeededHook* needed_hook_ = nullptr;
};

}  // namespace tandem
