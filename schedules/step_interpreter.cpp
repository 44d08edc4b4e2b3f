#include "schedules/step_interpreter.hpp"

#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace tandem {
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

void run_p2p(const ScheduleOp& op, StageProgram& program, StepContext& ctx, InFlight& f) {
  std::vector<P2POp> batch;
  std::vector<std::pair<Key, bool>> received;  // (key, is activation)
  for (const auto& t : op.transfers) {
    const Key key{t.microbatch, t.chunk};
    switch (t.direction) {
      case P2PDirection::send_next:
        batch.push_back({P2POp::Kind::send, take(f.outputs, key, "output to send"), t.peer});
        break;
      case P2PDirection::send_prev:
        batch.push_back(
            {P2POp::Kind::send, take(f.input_grads, key, "input gradient to send"), t.peer});
        break;
      case P2PDirection::recv_prev:
      case P2PDirection::recv_next: {
        Tensor buf =
            ctx.device.allocate(program.activation_shape(t.microbatch), program.activation_dtype());
        batch.push_back({P2POp::Kind::recv, buf, t.peer});
        const bool act = t.direction == P2PDirection::recv_prev;
        (act ? f.inputs : f.output_grads)[key] = buf;
        received.emplace_back(key, act);
        break;
      }
    }
  }
  ctx.pp.batch_p2p(ctx.stream, batch)->wait();
}

}  // namespace

void run_schedule(const std::vector<ScheduleOp>& ops, StageProgram& program, StepContext& ctx) {
  InFlight f;
  const Tensor none{};
  for (const auto& op : ops) {
    const Key key{op.microbatch, op.chunk};
    switch (op.type) {
      case OpType::forward: {
        auto it = f.inputs.find(key);
        Tensor input = it == f.inputs.end() ? none : take(f.inputs, key, "input");
        Tensor out = program.forward(op.microbatch, op.chunk, input);
        if (out.numel() > 0 && !out.shape.dims().empty()) f.outputs[key] = std::move(out);
        break;
      }
      case OpType::backward: {
        auto it = f.output_grads.find(key);
        Tensor grad =
            it == f.output_grads.end() ? none : take(f.output_grads, key, "output gradient");
        Tensor in_grad = program.backward(op.microbatch, op.chunk, grad);
        if (!in_grad.shape.dims().empty()) f.input_grads[key] = std::move(in_grad);
        break;
      }
      case OpType::p2p:
        run_p2p(op, program, ctx, f);
        break;
    }
  }
  if (!f.inputs.empty() || !f.output_grads.empty())
    throw ScheduleError(
        "step interpreter: received tensors left unconsumed at the end of the step");
}

}  // namespace tandem
