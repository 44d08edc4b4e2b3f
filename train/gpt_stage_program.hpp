// The GPT as a pipeline stage: the model chunks one rank owns, bound to the microbatches of
// the current step, behind the step interpreter's StageProgram interface. It turns
// samples into device tensors (row t·B + b, sequence-first as the model wants them), runs the chunk
// of each forward/backward op, and collects the loss on the last stage.
#pragma once

#include <memory>
#include <vector>

#include "data/sample_dataset.hpp"
#include "model/gpt_chunk.hpp"
#include "schedules/step_interpreter.hpp"
#include "train/run_trace.hpp"

namespace tandem {

struct StepBatch {
  const data::SampleDataset* samples = nullptr;
  std::vector<std::vector<std::int64_t>> microbatches;  // sample indices, one list per microbatch
};

class GptStageProgram : public StageProgram {
 public:
  GptStageProgram(ModelEnv env, std::vector<GptChunk*> chunks, const GptDims& dims);

  // Binds the next step's microbatches; `loss_scale` multiplies every loss gradient.
  void begin_step(StepBatch batch, float loss_scale, bool forward_only);
  // Records forward and backward of every (microbatch, chunk) on `trace` (null: off).
  void set_trace(RunTrace* trace, bool name_chunks) {
    trace_ = trace;
    name_chunks_ = name_chunks;
  }
  // Mean per-token loss over the step's microbatches (last stage; 0 elsewhere).
  double mean_loss() const;
  // Each multi-token prediction depth's loss, the mean over microbatches of its mean over
  // unmasked tokens (Megatron's MTPLossLoggingHelper; last stage, 0 elsewhere).
  std::vector<double> mean_mtp_losses() const;

  Tensor forward(int microbatch, int chunk, const Tensor& input) override;
  Tensor backward(int microbatch, int chunk, const Tensor& grad_output) override;
  // The split backward: B (recorded as "B", category backward) and W ("W", category weight).
  Tensor backward_input(int microbatch, int chunk, const Tensor& grad_output) override;
  void backward_weights(int microbatch, int chunk) override;
  // After the schedule (defer_embedding_wgrad_compute): the output layer's deferred weight
  // gradients, a weight pass of the chunk holding the loss in the trace.
  void drain_output_weight_grads();
  // Combined 1F1B: the forward and the backward take turns on the host
  // (Device::host_turns), each with a ModelEnv of its own, handing over where an
  // expert-parallel all-to-all was issued (MoeLayer). Same results as one after the other.
  std::pair<Tensor, Tensor> forward_backward(int f_microbatch, int f_chunk, const Tensor& input,
                                             int b_microbatch, int b_chunk,
                                             const Tensor& grad_output) override;
  Shape activation_shape(int microbatch) const override;
  // After an MTP stage of its own (virtual stage `mtp_stage` of the partition; −1: none) the
  // stages exchange [h0 | depth 1 | … | depth D], (1 + D) times the rows.
  Shape received_shape(int microbatch, int chunk, bool input) const override;
  void set_mtp_stage(int mtp_stage, int pp, int pp_rank) {
    mtp_stage_ = mtp_stage;
    pp_ = pp;
    pp_rank_ = pp_rank;
  }
  DType activation_dtype() const override { return env_.compute; }
  // Megatron's scatter_gather_tensors_in_pipeline (only without sequence parallelism,
  // where the tp ranks hold identical activations).
  void set_scatter_gather(bool on) { scatter_gather_ = on; }
  Tensor to_wire(const Tensor& t) override;
  Shape wire_shape(const Shape& full) const override;
  Tensor from_wire(const Tensor& received, const Shape& full) override;

 private:
  MicrobatchTensors upload_microbatch(int microbatch, const ChunkPlan& plan);
  void record(char type, int microbatch, int chunk, RunTrace::Clock::time_point start);
  Tensor run_forward(ModelEnv& env, int microbatch, int chunk, const Tensor& input);
  Tensor run_backward(ModelEnv& env, int microbatch, int chunk, const Tensor& grad_output,
                      bool split);
  // ModelEnv::dropout_microbatch of a microbatch of this step.
  std::uint64_t dropout_microbatch(int microbatch) const;

  ModelEnv env_;
  std::vector<GptChunk*> chunks_;
  GptDims dims_;
  StepBatch batch_;
  float loss_scale_ = 1;
  bool forward_only_ = false;
  RunTrace* trace_ = nullptr;
  bool name_chunks_ = false;
  std::vector<bool> backward_done_;  // per chunk: has this step run a backward of it yet
  std::vector<bool> weights_done_;   // per chunk: has this step run its weight gradients yet
  bool scatter_gather_ = false;
  int mtp_stage_ = -1, pp_ = 1, pp_rank_ = 0;
  double loss_sum_ = 0;
  std::int64_t loss_rows_ = 0;
  std::vector<double> mtp_loss_sums_;  // per depth: the microbatches' means, summed
  std::int64_t loss_microbatches_ = 0;
};

}  // namespace tandem
