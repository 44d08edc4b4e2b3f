// Megatron-Core's interleaved 1F1B (forward_backward_pipelining_with_interleaving, both
// paths: batched p2p calls that block, or overlap_p2p_comm's posted calls, waited for
// before the next compute of their direction), as an op list. Each stage holds vpp model chunks;
// the k-th "virtual microbatch" of a rank is entry k of the schedule table (forward) or the same
// entry with the chunk mirrored (backward). Tensors travel around the pp ring: the last stage's
// chunk c feeds the first stage's chunk c + 1. Received tensors queue per chunk and are consumed in
// microbatch order, which is how the transfers below get their (microbatch, chunk) identities.
#include <vector>

#include "schedules/schedule.hpp"

namespace tandem {
namespace {

class InterleavedBuilder {
 public:
  InterleavedBuilder(const ScheduleSpec& spec, int rank)
      : pp_(spec.pp),
        vpp_(spec.vpp),
        rank_(rank),
        total_(spec.num_microbatches * spec.vpp),
        forward_only_(spec.forward_only),
        combined_(spec.combined_1f1b && !spec.forward_only),
        overlap_(spec.overlap_p2p_comm && !spec.combined_1f1b),
        warmup_(num_warmup_microbatches(spec, rank)),
        table_(interleaved_schedule_table(
            spec.num_microbatches, spec.vpp,
            spec.microbatch_group_size > 0 ? spec.microbatch_group_size : spec.pp)),
        received_inputs_(spec.vpp, 0),
        received_grads_(spec.vpp, 0) {}

  std::vector<ScheduleOp> build();

 private:
  bool first_stage() const { return rank_ == 0; }
  bool last_stage() const { return rank_ == pp_ - 1; }
  int next_rank() const { return (rank_ + 1) % pp_; }
  int prev_rank() const { return (rank_ + pp_ - 1) % pp_; }

  int chunk_of(int virtual_id, bool forward) const {
    const int c = table_[static_cast<std::size_t>(virtual_id % total_)].chunk;
    return forward ? c : vpp_ - 1 - c;
  }
  int microbatch_of(int virtual_id) const {
    return table_[static_cast<std::size_t>(virtual_id % total_)].microbatch;
  }

  // recv_tensor_from_previous_stage: whether the batch after `virtual_id` receives in
  // direction `forward`, and for which local chunk.
  struct Recv {
    bool recv;
    int chunk;
  };
  Recv recv_from_previous_stage(int virtual_id, bool forward) const;

  // Transfers; each records the tensor identity.
  Transfer send_activation(int virtual_id) const {
    return {P2PDirection::send_next, microbatch_of(virtual_id), chunk_of(virtual_id, true),
            next_rank()};
  }
  Transfer send_gradient(int virtual_id) const {
    return {P2PDirection::send_prev, microbatch_of(virtual_id), chunk_of(virtual_id, false),
            prev_rank()};
  }
  Transfer recv_activation(int chunk) {
    return {P2PDirection::recv_prev, received_inputs_[chunk]++, chunk, prev_rank()};
  }
  Transfer recv_gradient(int chunk) {
    return {P2PDirection::recv_next, received_grads_[chunk]++, chunk, next_rank()};
  }
  // The last stage's last chunk computes the loss: nothing goes downstream.
  bool sends_activation(int virtual_id) const {
    return !(last_stage() && chunk_of(virtual_id, true) == vpp_ - 1);
  }
  // The first stage's first chunk consumes the embedding input: nothing goes upstream.
  bool sends_gradient(int virtual_id) const {
    return !(first_stage() && chunk_of(virtual_id, false) == 0);
  }

  // After forward (backward) k: send its output (input gradient) on, and receive the next
  // one's input (output gradient) unless k is `last` of its phase or nothing comes.
  std::vector<Transfer> forward_transfers(int k, bool last);
  std::vector<Transfer> backward_transfers(int k, bool last);

  void warmup();
  void steady();
  void overlapped_steady_step(int k, int fwd, int bwd);
  void cooldown();
  void forward(int k) {
    ops_.push_back({OpType::forward, microbatch_of(k), chunk_of(k, true), {}, {}});
  }
  void backward(int k) {
    ops_.push_back({OpType::backward, microbatch_of(k), chunk_of(k, false), {}, {}});
  }
  void p2p(P2PCall call, std::vector<Transfer> t) {
    if (!t.empty()) ops_.push_back({OpType::p2p, 0, 0, call, std::move(t)});
  }
  // overlap_p2p_comm: post a call (fwd_wait_handles / bwd_wait_handles) …
  void post(P2PCall call, std::vector<Transfer> t, bool& pending) {
    if (t.empty()) return;
    ScheduleOp op{OpType::p2p, 0, 0, call, std::move(t)};
    op.overlapped = true;
    ops_.push_back(std::move(op));
    pending = true;
  }
  // … and wait for it before the next compute of its direction.
  void wait(P2PCall call, bool& pending) {
    if (!pending) return;
    ops_.push_back({OpType::p2p_wait, 0, 0, call, {}});
    pending = false;
  }
  void wait_forward() { wait(P2PCall::send_forward_recv_forward, forward_pending_); }
  void wait_backward() { wait(P2PCall::send_backward_recv_backward, backward_pending_); }

  int pp_, vpp_, rank_, total_;
  bool forward_only_;
  bool combined_;
  bool overlap_;
  bool forward_pending_ = false, backward_pending_ = false;  // posted, not yet waited for
  int warmup_;
  std::vector<MicrobatchChunk> table_;
  std::vector<int> received_inputs_;  // per chunk: activations received so far
  std::vector<int> received_grads_;   // per chunk: gradients received so far
  std::vector<ScheduleOp> ops_;
};

InterleavedBuilder::Recv InterleavedBuilder::recv_from_previous_stage(int virtual_id,
                                                                      bool forward) const {
  // The leading stage (first in forward, last in backward) is pp − 1 virtual microbatches
  // ahead of the stage that feeds it around the ring.
  const bool leading = forward ? first_stage() : last_stage();
  if (!leading) return {true, chunk_of(virtual_id + 1, forward)};
  const int last_chunk = forward ? vpp_ - 1 : 0;
  bool recv = true;
  int chunk = 0;
  if (virtual_id < pp_ - 1) {
    recv = false;  // the feeding stage has produced nothing yet
    chunk = chunk_of(virtual_id + 1, forward);
  } else {
    chunk = chunk_of(virtual_id - (pp_ - 1), forward);
  }
  if (chunk == last_chunk) recv = false;
  return {recv, forward ? chunk + 1 : chunk - 1};
}

std::vector<Transfer> InterleavedBuilder::forward_transfers(int k, bool last) {
  const auto [recv_prev, next_chunk] = recv_from_previous_stage(k, true);
  std::vector<Transfer> t;
  if (sends_activation(k)) t.push_back(send_activation(k));
  if (recv_prev && !last) t.push_back(recv_activation(next_chunk));
  return t;
}

std::vector<Transfer> InterleavedBuilder::backward_transfers(int k, bool last) {
  const auto [recv_next, next_chunk] = recv_from_previous_stage(k, false);
  std::vector<Transfer> t;
  if (sends_gradient(k)) t.push_back(send_gradient(k));
  if (recv_next && !last) t.push_back(recv_gradient(next_chunk));
  return t;
}

void InterleavedBuilder::warmup() {
  if (!first_stage()) p2p(P2PCall::recv_forward, {recv_activation(0)});
  const bool all_warmup = warmup_ == total_;
  for (int k = 0; k < warmup_; ++k) {
    wait_forward();
    forward(k);
    std::vector<Transfer> t = forward_transfers(k, k == total_ - 1);
    if (overlap_) {
      post(P2PCall::send_forward_recv_forward, std::move(t), forward_pending_);
      if (k == warmup_ - 1 && !all_warmup && !forward_only_ && !last_stage())
        post(P2PCall::send_backward_recv_backward, {recv_gradient(vpp_ - 1)}, backward_pending_);
      continue;
    }
    if (k == warmup_ - 1 && !all_warmup && !forward_only_) {
      // Last warmup step also posts the first gradient receive for the last chunk.
      if (!last_stage()) t.push_back(recv_gradient(vpp_ - 1));
      p2p(P2PCall::send_forward_backward_recv_forward_backward, std::move(t));
    } else {
      p2p(P2PCall::send_forward_recv_forward, std::move(t));
    }
  }
}

void InterleavedBuilder::steady() {
  const int remaining = total_ - warmup_;
  for (int k = 0; k < remaining; ++k) {
    const int fwd = k + warmup_, bwd = k;
    if (overlap_) {
      overlapped_steady_step(k, fwd, bwd);
      continue;
    }
    forward(fwd);
    ops_.back().combined = combined_;  // combined 1F1B: with the backward after it
    backward(bwd);
    auto [recv_prev, next_fwd_chunk] = recv_from_previous_stage(fwd, true);
    auto [recv_next, next_bwd_chunk] = recv_from_previous_stage(bwd, false);
    if (k == remaining - 1) recv_prev = false;
    std::vector<Transfer> t;
    if (sends_activation(fwd)) t.push_back(send_activation(fwd));
    if (sends_gradient(bwd)) t.push_back(send_gradient(bwd));
    if (recv_prev) t.push_back(recv_activation(next_fwd_chunk));
    if (recv_next) t.push_back(recv_gradient(next_bwd_chunk));
    p2p(P2PCall::send_forward_backward_recv_forward_backward, std::move(t));
  }
}

void InterleavedBuilder::overlapped_steady_step(int k, int fwd, int bwd) {
  const int remaining = total_ - warmup_;
  wait_forward();
  forward(fwd);
  post(P2PCall::send_forward_recv_forward, forward_transfers(fwd, k == remaining - 1),
       forward_pending_);
  wait_backward();
  backward(bwd);
  post(P2PCall::send_backward_recv_backward, backward_transfers(bwd, false), backward_pending_);
}

void InterleavedBuilder::cooldown() {
  const int remaining = total_ - warmup_;
  wait_backward();
  if (warmup_ == total_ && !last_stage()) p2p(P2PCall::recv_backward, {recv_gradient(vpp_ - 1)});
  for (int k = remaining; k < total_; ++k) {
    backward(k);
    p2p(P2PCall::send_backward_recv_backward, backward_transfers(k, k == total_ - 1));
  }
}

std::vector<ScheduleOp> InterleavedBuilder::build() {
  warmup();
  if (forward_only_) {
    wait_forward();
    return std::move(ops_);
  }
  steady();
  cooldown();
  wait_forward();  // the last forward's send, which nothing before waited for
  return std::move(ops_);
}

}  // namespace

std::vector<ScheduleOp> build_interleaved_schedule(const ScheduleSpec& spec, int pp_rank) {
  return InterleavedBuilder(spec, pp_rank).build();
}

}  // namespace tandem
