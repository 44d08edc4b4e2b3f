#include "schedules/step_interpreter.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace tandem {

Tensor StageProgram::backward_input(int microbatch, int chunk, const Tensor&) {
  throw ScheduleError("this stage program cannot split the backward of microbatch " +
                      std::to_string(microbatch) + " chunk " + std::to_string(chunk) +
                      " into input and weight gradients");
}

void StageProgram::backward_weights(int microbatch, int chunk) {
  throw ScheduleError("this stage program has no weight gradients left for microbatch " +
                      std::to_string(microbatch) + " chunk " + std::to_string(chunk));
}

std::pair<Tensor, Tensor> StageProgram::forward_backward(int f_microbatch, int f_chunk,
                                                         const Tensor& input, int b_microbatch,
                                                         int b_chunk, const Tensor& grad_output) {
  Tensor out = forward(f_microbatch, f_chunk, input);
  return {std::move(out), backward(b_microbatch, b_chunk, grad_output)};
}

namespace {

using Key = std::pair<int, int>;  // (microbatch, chunk)

struct InFlight {
  std::map<Key, Tensor> outputs;       // forward outputs waiting for send_next
  std::map<Key, Tensor> input_grads;   // backward results waiting for send_prev
  std::map<Key, Tensor> inputs;        // received activations, by consuming chunk
  std::map<Key, Tensor> output_grads;  // received gradients, by consuming chunk
};

Tensor take(std::map<Key, Tensor>& m, Key k, const char* what) {
  auto it = m.find(k);
  if (it == m.end())
    throw ScheduleError(std::string("step interpreter: no ") + what + " for microbatch " +
                        std::to_string(k.first) + " chunk " + std::to_string(k.second));
  Tensor t = std::move(it->second);
  m.erase(it);
  return t;
}

// A shape on the wire: (rank, dims…) padded to a fixed size so both ends agree on the
// message length before they know the shape; fp32 words (exact below 2²⁴), because
// Device::download reads fp32.
constexpr std::int64_t kShapeWords = 8;

Tensor encode_shape(Device& device, Stream& s, const Shape& shape) {
  if (shape.rank() + 1 > static_cast<std::size_t>(kShapeWords))
    throw ScheduleError("step interpreter: cannot send the shape " + shape.to_string() +
                        " (more than " + std::to_string(kShapeWords - 1) + " dimensions)");
  Tensor t = device.allocate(Shape{kShapeWords}, DType::fp32);
  device.upload(s, t, Device::ProduceFloats([&](std::span<float> out) {
                  std::fill(out.begin(), out.end(), 0.0f);
                  out[0] = static_cast<float>(shape.rank());
                  for (std::size_t i = 0; i < shape.rank(); ++i)
                    out[i + 1] = static_cast<float>(shape[i]);
                }));
  return t;
}

// A phantom shape tensor (the sim binding moves no data) reads as rank 0: the receiver then
// allocates what the program declares (received_shape), the only shape a simulation can
// know.
std::optional<Shape> decode_shape(Device& device, Stream& s, const Tensor& t) {
  std::vector<float> host(static_cast<std::size_t>(kShapeWords));
  device.download(s, t, host);
  const auto rank = static_cast<std::size_t>(host[0]);
  if (rank + 1 > host.size()) throw ScheduleError("step interpreter: received a malformed shape");
  if (rank == 0) return std::nullopt;
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < rank; ++i) dims.push_back(static_cast<std::int64_t>(host[i + 1]));
  return Shape(dims);
}

// Megatron's _communicate_shapes: one batch that sends the shape of every tensor the
// coming batch sends and receives the shape of every tensor it receives, in the same order.
std::vector<std::optional<Shape>> exchange_shapes(const ScheduleOp& op, const InFlight& f,
                                                  StepContext& ctx) {
  std::vector<P2POp> batch;
  std::vector<Tensor> incoming;
  for (const auto& t : op.transfers) {
    const Key key{t.microbatch, t.chunk};
    const bool send =
        t.direction == P2PDirection::send_next || t.direction == P2PDirection::send_prev;
    if (send) {
      const auto& pending = t.direction == P2PDirection::send_next ? f.outputs : f.input_grads;
      auto it = pending.find(key);
      if (it == pending.end()) continue;  // run_p2p reports the missing tensor
      batch.push_back(
          {P2POp::Kind::send, encode_shape(ctx.device, ctx.stream, it->second.shape), t.peer});
    } else {
      incoming.push_back(ctx.device.allocate(Shape{kShapeWords}, DType::fp32));
      batch.push_back({P2POp::Kind::recv, incoming.back(), t.peer});
    }
  }
  ctx.pp.batch_p2p(ctx.stream, batch)->wait();
  std::vector<std::optional<Shape>> shapes;
  for (const auto& t : incoming) shapes.push_back(decode_shape(ctx.device, ctx.stream, t));
  return shapes;
}

// A posted p2p call: its Work, the sends it must keep alive (sent slices may be views of
// tensors nothing else holds) and where each received tensor goes once it has arrived.
struct PostedP2P {
  P2PCall call;
  std::unique_ptr<Work> work;
  std::vector<P2POp> batch;
  struct Arrival {
    std::map<Key, Tensor>* into;
    Key key;
    Tensor buffer;
    Shape full;
  };
  std::vector<Arrival> arrivals;
};

PostedP2P post_p2p(const ScheduleOp& op, StageProgram& program, StepContext& ctx, InFlight& f) {
  const auto shapes =
      ctx.variable_seq_lengths ? exchange_shapes(op, f, ctx) : std::vector<std::optional<Shape>>{};
  std::size_t next_shape = 0;
  PostedP2P posted{op.call, nullptr, {}, {}};
  for (const auto& t : op.transfers) {
    const Key key{t.microbatch, t.chunk};
    switch (t.direction) {
      case P2PDirection::send_next:
        posted.batch.push_back(
            {P2POp::Kind::send, program.to_wire(take(f.outputs, key, "output to send")), t.peer});
        break;
      case P2PDirection::send_prev:
        posted.batch.push_back({P2POp::Kind::send,
                                program.to_wire(take(f.input_grads, key, "input gradient to send")),
                                t.peer});
        break;
      case P2PDirection::recv_prev:
      case P2PDirection::recv_next: {
        std::optional<Shape> shape;
        if (ctx.variable_seq_lengths) shape = shapes.at(next_shape++);
        if (!shape)
          shape =
              program.received_shape(t.microbatch, t.chunk, t.direction == P2PDirection::recv_prev);
        Tensor buf = ctx.device.allocate(program.wire_shape(*shape), program.activation_dtype());
        posted.batch.push_back({P2POp::Kind::recv, buf, t.peer});
        posted.arrivals.push_back(
            {t.direction == P2PDirection::recv_prev ? &f.inputs : &f.output_grads, key, buf,
             *shape});
        break;
      }
    }
  }
  posted.work = ctx.pp.batch_p2p(ctx.stream, posted.batch);
  return posted;
}

void complete_p2p(PostedP2P& posted, StageProgram& program) {
  posted.work->wait();
  posted.batch.clear();
  for (auto& a : posted.arrivals) (*a.into)[a.key] = program.from_wire(a.buffer, a.full);
}

}  // namespace

void run_schedule(const std::vector<ScheduleOp>& ops, StageProgram& program, StepContext& ctx) {
  InFlight f;
  std::vector<PostedP2P> posted;  // overlapped calls not yet waited for, oldest first
  const Tensor none{};
  std::set<Key> split;  // backwards with a weight op later in the list
  for (const auto& op : ops)
    if (op.type == OpType::weight) split.insert({op.microbatch, op.chunk});
  // A tensor still on its way (its call posted, not waited for) is a schedule without its
  // p2p_wait: refuse it rather than run the op without its input.
  auto arriving = [&](const std::map<Key, Tensor>& into, const Key& key) {
    for (const auto& p : posted)
      for (const auto& a : p.arrivals)
        if (a.into == &into && a.key == key)
          throw ScheduleError("step interpreter: microbatch " + std::to_string(key.first) +
                              " chunk " + std::to_string(key.second) + " is still arriving by " +
                              std::string(p2p_call_name(p.call)) + ", which nothing waited for");
  };
  auto input_of = [&](const Key& key) {
    arriving(f.inputs, key);
    return f.inputs.count(key) ? take(f.inputs, key, "input") : none;
  };
  auto grad_of = [&](const Key& key) {
    arriving(f.output_grads, key);
    return f.output_grads.count(key) ? take(f.output_grads, key, "output gradient") : none;
  };
  auto keep_output = [&](const Key& key, Tensor out) {
    if (out.numel() > 0 && !out.shape.dims().empty()) f.outputs[key] = std::move(out);
  };
  auto keep_input_grad = [&](const Key& key, Tensor in_grad) {
    if (!in_grad.shape.dims().empty()) f.input_grads[key] = std::move(in_grad);
  };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ScheduleOp& op = ops[i];
    const Key key{op.microbatch, op.chunk};
    switch (op.type) {
      case OpType::forward: {
        if (op.combined) {
          // Combined 1F1B: this forward and the backward after it, taking turns.
          if (i + 1 >= ops.size() || ops[i + 1].type != OpType::backward)
            throw ScheduleError("step interpreter: " + describe(op, true) +
                                " is combined but no backward follows it");
          const ScheduleOp& b = ops[++i];
          const Key bkey{b.microbatch, b.chunk};
          if (split.count(bkey))
            throw ScheduleError("step interpreter: a combined backward cannot be split");
          auto [out, in_grad] = program.forward_backward(op.microbatch, op.chunk, input_of(key),
                                                         b.microbatch, b.chunk, grad_of(bkey));
          keep_output(key, std::move(out));
          keep_input_grad(bkey, std::move(in_grad));
          break;
        }
        keep_output(key, program.forward(op.microbatch, op.chunk, input_of(key)));
        break;
      }
      case OpType::backward: {
        Tensor grad = grad_of(key);
        keep_input_grad(key, split.count(key)
                                 ? program.backward_input(op.microbatch, op.chunk, grad)
                                 : program.backward(op.microbatch, op.chunk, grad));
        break;
      }
      case OpType::weight:
        program.backward_weights(op.microbatch, op.chunk);
        break;
      case OpType::p2p: {
        PostedP2P p = post_p2p(op, program, ctx, f);
        if (op.overlapped) {
          posted.push_back(std::move(p));
        } else {
          complete_p2p(p, program);
        }
        break;
      }
      case OpType::p2p_wait: {
        auto it = std::find_if(posted.begin(), posted.end(),
                               [&](const PostedP2P& p) { return p.call == op.call; });
        if (it == posted.end())
          throw ScheduleError("step interpreter: " + describe(op, false) +
                              " but no such call is posted");
        complete_p2p(*it, program);
        posted.erase(it);
        break;
      }
    }
  }
  if (!posted.empty())
    throw ScheduleError("step interpreter: " + std::string(p2p_call_name(posted.front().call)) +
                        " was posted and never waited for");
  if (!f.inputs.empty() || !f.output_grads.empty())
    throw ScheduleError(
        "step interpreter: received tensors left unconsumed at the end of the step");
}

}  // namespace tandem
