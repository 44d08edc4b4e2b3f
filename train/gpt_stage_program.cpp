#include "train/gpt_stage_program.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "core/trace.hpp"

namespace tandem {

GptStageProgram::GptStageProgram(ModelEnv env, std::vector<GptChunk*> chunks, const GptDims& dims)
    : env_(env),
      chunks_(std::move(chunks)),
      dims_(dims),
      backward_done_(chunks_.size(), false),
      weights_done_(chunks_.size(), false) {}

void GptStageProgram::begin_step(StepBatch batch, float loss_scale, bool forward_only) {
  batch_ = std::move(batch);
  loss_scale_ = loss_scale;
  forward_only_ = forward_only;
  loss_sum_ = 0;
  loss_rows_ = 0;
  mtp_loss_sums_.assign(static_cast<std::size_t>(dims_.mtp_num_layers), 0.0);
  loss_microbatches_ = 0;
  backward_done_.assign(chunks_.size(), false);
  weights_done_.assign(chunks_.size(), false);
  ++env_.step;  // FP8 layers quantize their weights once per step
  env_.forward_only = forward_only;
}

double GptStageProgram::mean_loss() const {
  return loss_rows_ > 0 ? loss_sum_ / static_cast<double>(loss_rows_) : 0.0;
}

std::vector<double> GptStageProgram::mean_mtp_losses() const {
  // Only where the loss is (Megatron's tracker is filled there alone).
  if (std::none_of(chunks_.begin(), chunks_.end(),
                   [](const GptChunk* c) { return c->plan().post_process; }))
    return {};
  std::vector<double> out(static_cast<std::size_t>(dims_.mtp_num_layers), 0.0);
  for (std::size_t k = 0; k < out.size() && k < mtp_loss_sums_.size(); ++k)
    out[k] =
        loss_microbatches_ > 0 ? mtp_loss_sums_[k] / static_cast<double>(loss_microbatches_) : 0.0;
  return out;
}

Shape GptStageProgram::activation_shape(int) const {
  // Megatron's tensor_shape (seq [/ tp with sequence parallelism], micro batch, hidden),
  // flattened to rows.
  const std::int64_t rows = static_cast<std::int64_t>(dims_.seq) * dims_.micro_batch;
  return Shape{env_.sequence_parallel ? rows / env_.tp.size() : rows, dims_.hidden};
}

Shape GptStageProgram::received_shape(int microbatch, int chunk, bool input) const {
  const Shape s = activation_shape(microbatch);
  if (mtp_stage_ < 0) return s;
  const int v = chunk * pp_ + pp_rank_;  // the receiving chunk's virtual stage
  const bool concatenated = input ? mtp_stage_ < v : mtp_stage_ <= v;
  return concatenated ? Shape{s[0] * (1 + dims_.mtp_num_layers), s[1]} : s;
}

MicrobatchTensors GptStageProgram::upload_microbatch(int microbatch, const ChunkPlan& plan) {
  const std::int64_t T = dims_.seq, B = dims_.micro_batch, rows = T * B;
  const auto& indices = batch_.microbatches.at(static_cast<std::size_t>(microbatch));
  if (static_cast<std::int64_t>(indices.size()) != B)
    throw std::logic_error("microbatch holds " + std::to_string(indices.size()) +
                           " samples, expected " + std::to_string(B));
  // Row t·B + b (sequence-first): tokens are the first T of each sample, labels the last T
  // (with context parallelism, this rank's T of them: sequence_position).
  auto gather = [&](std::span<std::int32_t> out, std::int64_t shift) {
    const std::int64_t whole = env_.cp != nullptr ? T * env_.cp->size() : T;
    std::vector<std::int32_t> sample(static_cast<std::size_t>(whole + 1));
    for (std::int64_t b = 0; b < B; ++b) {
      batch_.samples->read_sample(indices[static_cast<std::size_t>(b)], sample);
      for (std::int64_t t = 0; t < T; ++t)
        out[static_cast<std::size_t>(t * B + b)] =
            sample[static_cast<std::size_t>(sequence_position(env_, t, T) + shift)];
    }
  };
  Device& d = env_.device;
  MicrobatchTensors mb;
  // Multi-token prediction's rolls (Megatron's roll_tensor on the whole sequence): row t·B + b
  // of depth k holds what row (t + k)·B + b holds, the last k·B rows 0.
  // With context parallelism the roll is the whole sequence's (Megatron's roll_tensor
  // passes the chunks' boundaries between the cp ranks).
  auto rolled = [&](std::int64_t k, std::int64_t shift) {
    Tensor roll = d.allocate(Shape{rows}, DType::int32);
    d.upload(env_.stream, roll, Device::ProduceInts([&](std::span<std::int32_t> out) {
               const std::int64_t whole = env_.cp != nullptr ? T * env_.cp->size() : T;
               std::vector<std::int32_t> sample(static_cast<std::size_t>(whole + 1));
               for (std::int64_t b = 0; b < B; ++b) {
                 batch_.samples->read_sample(indices[static_cast<std::size_t>(b)], sample);
                 for (std::int64_t t = 0; t < T; ++t) {
                   const std::int64_t at = sequence_position(env_, t, T) + k;
                   out[static_cast<std::size_t>(t * B + b)] =
                       at < whole ? sample[static_cast<std::size_t>(at + shift)] : 0;
                 }
               }
             }));
    return roll;
  };
  if (plan.pre_process) {
    mb.tokens = d.allocate(Shape{rows}, DType::int32);
    d.upload(env_.stream, mb.tokens,
             Device::ProduceInts([&](std::span<std::int32_t> out) { gather(out, 0); }));
    mb.positions = d.allocate(Shape{rows}, DType::int32);
    d.upload(env_.stream, mb.positions, Device::ProduceInts([&](std::span<std::int32_t> out) {
               for (std::int64_t r = 0; r < rows; ++r)
                 out[static_cast<std::size_t>(r)] =
                     static_cast<std::int32_t>(sequence_position(env_, r / B, T));
             }));
  }
  if (plan.post_process) {
    mb.labels = d.allocate(Shape{rows}, DType::int32);
    d.upload(env_.stream, mb.labels,
             Device::ProduceInts([&](std::span<std::int32_t> out) { gather(out, 1); }));
  }
  if (plan.mtp_layers > 0)
    for (std::int64_t k = 1; k <= plan.mtp_layers; ++k) mb.mtp_tokens.push_back(rolled(k, 0));
  if (plan.post_process)
    for (std::int64_t k = 1; k <= dims_.mtp_num_layers; ++k) mb.mtp_labels.push_back(rolled(k, 1));
  return mb;
}

std::uint64_t GptStageProgram::dropout_microbatch(int microbatch) const {
  // Its first sample: the same whatever the layout that runs it.
  const auto& indices = batch_.microbatches.at(static_cast<std::size_t>(microbatch));
  return indices.empty() ? static_cast<std::uint64_t>(microbatch)
                         : static_cast<std::uint64_t>(indices.front());
}

Tensor GptStageProgram::forward(int microbatch, int chunk, const Tensor& input) {
  return run_forward(env_, microbatch, chunk, input);
}

Tensor GptStageProgram::run_forward(ModelEnv& env, int microbatch, int chunk, const Tensor& input) {
  const auto start = trace_ ? env_.device.trace_time(env_.stream) : RunTrace::Clock::time_point{};
  GptChunk& c = *chunks_.at(static_cast<std::size_t>(chunk));
  env.dropout_microbatch = dropout_microbatch(microbatch);
  const MicrobatchTensors mb = upload_microbatch(microbatch, c.plan());
  Tensor out = c.forward(env, microbatch, input, mb);
  if (c.plan().post_process) {
    const Tensor& losses = c.row_losses(microbatch);
    std::vector<float> host(static_cast<std::size_t>(losses.numel()));
    env_.device.download(env_.stream, losses, host);
    loss_sum_ += std::accumulate(host.begin(), host.end(), 0.0);
    loss_rows_ += losses.numel();
    // Each MTP depth's loss as Megatron logs it: the mean over this rank's unmasked rows,
    // summed here over the step's microbatches.
    mtp_loss_sums_.resize(static_cast<std::size_t>(dims_.mtp_num_layers), 0.0);
    for (int k = 1; k <= dims_.mtp_num_layers; ++k) {
      const Tensor& depth = c.mtp_row_losses(microbatch, k - 1);
      env_.device.download(env_.stream, depth, host);
      const std::int64_t valid = std::max<std::int64_t>(
          0, depth.numel() - mtp_masked_rows(env_, dims_.seq, dims_.micro_batch, k));
      mtp_loss_sums_[static_cast<std::size_t>(k - 1)] +=
          std::accumulate(host.begin(), host.begin() + valid, 0.0) /
          static_cast<double>(std::max<std::int64_t>(1, valid));
    }
    ++loss_microbatches_;
  }
  if (forward_only_) c.discard(microbatch);
  record('F', microbatch, chunk, start);
  return out;
}

Tensor GptStageProgram::run_backward(ModelEnv& env, int microbatch, int chunk,
                                     const Tensor& grad_output, bool split) {
  const auto start = trace_ ? env_.device.trace_time(env_.stream) : RunTrace::Clock::time_point{};
  env.dropout_microbatch = dropout_microbatch(microbatch);
  const auto c = static_cast<std::size_t>(chunk);
  env.first_backward = !backward_done_.at(c);
  backward_done_[c] = true;
  if (!split) weights_done_[c] = true;
  GptChunk& ch = *chunks_.at(c);
  Tensor g = split ? ch.backward_input(env, microbatch, grad_output, loss_scale_)
                   : ch.backward(env, microbatch, grad_output, loss_scale_);
  record('B', microbatch, chunk, start);
  return g;
}

Tensor GptStageProgram::backward(int microbatch, int chunk, const Tensor& grad_output) {
  return run_backward(env_, microbatch, chunk, grad_output, false);
}

Tensor GptStageProgram::backward_input(int microbatch, int chunk, const Tensor& grad_output) {
  return run_backward(env_, microbatch, chunk, grad_output, true);
}

std::pair<Tensor, Tensor> GptStageProgram::forward_backward(int f_microbatch, int f_chunk,
                                                            const Tensor& input, int b_microbatch,
                                                            int b_chunk,
                                                            const Tensor& grad_output) {
  // Each task its own environment: the microbatch a dropout mask belongs to, whether a
  // backward is the step's first, are the task's.
  ModelEnv forward_env = env_, backward_env = env_;
  Tensor out, in_grad;
  env_.device.host_turns().run(
      [&] { out = run_forward(forward_env, f_microbatch, f_chunk, input); },
      [&] { in_grad = run_backward(backward_env, b_microbatch, b_chunk, grad_output, false); });
  return {std::move(out), std::move(in_grad)};
}

void GptStageProgram::backward_weights(int microbatch, int chunk) {
  const auto start = trace_ ? env_.device.trace_time(env_.stream) : RunTrace::Clock::time_point{};
  const auto c = static_cast<std::size_t>(chunk);
  // Without gradient-accumulation fusion the first weight GEMM of the step writes the buffer.
  env_.first_backward = !weights_done_.at(c);
  weights_done_[c] = true;
  chunks_.at(c)->backward_weights(env_, microbatch);
  record('W', microbatch, chunk, start);
}

void GptStageProgram::drain_output_weight_grads() {
  if (!env_.defer_embedding_wgrad_compute) return;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    if (!chunks_[c]->plan().post_process) continue;
    const auto start = trace_ ? env_.device.trace_time(env_.stream) : RunTrace::Clock::time_point{};
    chunks_[c]->drain_output_weight_grads(env_);
    record('W', -1, static_cast<int>(c), start);
  }
}

void GptStageProgram::record(char type, int microbatch, int chunk,
                             RunTrace::Clock::time_point start) {
  if (!trace_) return;
  std::string name = type + std::to_string(microbatch);
  if (name_chunks_) name += "." + std::to_string(chunk);
  const char* category = type == 'F' ? "forward" : type == 'B' ? "backward" : "weight";
  trace_->slice(
      name, category, trace_thread::compute_of_task(env_.device.host_turns().current_task()), start,
      env_.device.trace_time(env_.stream), {{"microbatch", microbatch}, {"chunk", chunk}});
}

// Each tp rank sends slice `rank` of the flattened tensor (a view: no copy) and the
// receiver all-gathers the slices over tp into the whole tensor.
Tensor GptStageProgram::to_wire(const Tensor& t) {
  const std::int64_t tp = env_.tp.size();
  if (!scatter_gather_ || tp == 1) return t;
  const std::int64_t slice = t.numel() / tp;
  return t.view(Shape{slice}, slice * env_.tp.rank());
}

Shape GptStageProgram::wire_shape(const Shape& full) const {
  const std::int64_t tp = env_.tp.size();
  if (!scatter_gather_ || tp == 1) return full;
  return Shape{full.numel() / tp};
}

Tensor GptStageProgram::from_wire(const Tensor& received, const Shape& full) {
  if (!scatter_gather_ || env_.tp.size() == 1) return received;
  Tensor whole = env_.device.allocate(full, received.dtype);
  Tensor flat = whole.view(Shape{full.numel()});
  env_.tp.all_gather(env_.stream, received, flat)->wait();
  return whole;
}

}  // namespace tandem
