// The step interpreter: runs one rank's pipeline schedule (schedule.hpp) for real — or
// for the simulator — against a Device and the pipeline Communicator. Forward and
// backward ops call into the stage's program (the model chunks it owns); p2p calls become
// one batched send/recv on the pp group, exactly as Megatron's p2p_communication posts
// them. The interpreter owns the tensors in flight between stages: outputs waiting to be
// sent, inputs received for forwards to come, gradients received for backwards to come.
// With variable_seq_lengths every p2p batch is preceded by one that carries the shapes of
// its tensors (Megatron's _communicate_shapes), and receive buffers are allocated from the
// received shapes instead of StageProgram::activation_shape.
#pragma once

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "core/communicator.hpp"
#include "core/device.hpp"
#include "schedules/schedule.hpp"

namespace tandem {

// What a pipeline stage computes. `input` is empty (no storage, no shape) on the first
// virtual stage, whose input is its microbatch of tokens; forward returns the activation
// to send on (empty on the last virtual stage, which computes the loss). backward gets the
// gradient of that output (empty on the last virtual stage) and returns the gradient of
// its input (empty on the first virtual stage).
class StageProgram {
 public:
  virtual ~StageProgram() = default;
  virtual Tensor forward(int microbatch, int chunk, const Tensor& input) = 0;
  virtual Tensor backward(int microbatch, int chunk, const Tensor& grad_output) = 0;
  // The split backward of schedules with weight ops (ZB-H1, delay_wgrad_compute):
  // backward_input returns what backward returns and leaves the weight gradients to
  // backward_weights of the same (microbatch, chunk), which the schedule runs later. A
  // program that cannot split throws ScheduleError (the default).
  virtual Tensor backward_input(int microbatch, int chunk, const Tensor& grad_output);
  virtual void backward_weights(int microbatch, int chunk);
  // Combined 1F1B: forward(f_microbatch, …) and backward(b_microbatch, …) as one step,
  // returning what each returns. By default one after the other; a program may run them in
  // turns on the host (GptStageProgram: core/host_turns.hpp), with the same results.
  virtual std::pair<Tensor, Tensor> forward_backward(int f_microbatch, int f_chunk,
                                                     const Tensor& input, int b_microbatch,
                                                     int b_chunk, const Tensor& grad_output);
  // Shape and dtype of the activation exchanged between stages (Megatron's tensor_shape:
  // (seq / cp [/ tp with sequence parallelism], micro batch, hidden)).
  virtual Shape activation_shape(int microbatch) const = 0;
  virtual DType activation_dtype() const = 0;
  // The shape of what chunk `chunk` receives for `microbatch`: its input (`input`) or its
  // output's gradient. By default activation_shape; a program whose stages exchange
  // tensors of other shapes (a multi-token prediction stage of its own sends its
  // concatenated hidden states on) says so. Without variable_seq_lengths it is what the
  // receive allocates; with it, what a phantom shape (the sim binding) falls back to.
  virtual Shape received_shape(int microbatch, int /*chunk*/, bool /*input*/) const {
    return activation_shape(microbatch);
  }
  // What travels between stages (Megatron's scatter_gather_tensors_in_pipeline): the part of
  // a tensor this rank sends, the shape it receives for a tensor of shape `full`, and the
  // whole tensor rebuilt from what arrived. By default the tensor itself.
  virtual Tensor to_wire(const Tensor& t) { return t; }
  virtual Shape wire_shape(const Shape& full) const { return full; }
  virtual Tensor from_wire(const Tensor& received, const Shape&) { return received; }
};

struct StepContext {
  Device& device;
  Stream& stream;
  Communicator& pp;                   // the pipeline group; rank i is pipeline stage i
  bool variable_seq_lengths = false;  // exchange shapes before every p2p batch
};

// Runs `ops` (one rank's op list of `spec`) to completion.
void run_schedule(const std::vector<ScheduleOp>& ops, StageProgram& program, StepContext& ctx);

}  // namespace tandem
