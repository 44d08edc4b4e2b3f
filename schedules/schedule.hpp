// Pipeline schedules as data: a pure function (schedule kind, pp size, vpp size,
// microbatches, pp rank) → the ordered list of ops that rank runs in one iteration —
// forward(mb, chunk), backward(mb, chunk), and the p2p calls between them under
// Megatron-Core's names (recv_forward, send_forward_recv_backward, …). The step
// interpreter runs these lists on a Device; the idealised timeline (timeline.hpp) and
// the simulator time them.
//
// Worked example, 1F1B, pp = 4, m = 8 (compute ops only; warmup = pp − rank − 1):
//   rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7
//   rank 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7
// Interleaved, pp = 4, vpp = 2, m = 8, rank 0 (warmup = (4−0−1)·2 + (2−1)·4 = 10; Fm.c):
//   F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 …
// Combined 1F1B without pipelining, m = 4 (Megatron-Core's combined_1f1b_schedule_for_no_
// pipelining; "+" joins a forward to the backward it runs with): F0 F1+B0 F2+B1 F3+B2 B3
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B's order with each
// backward split into B (the input gradient, which the previous stage waits for) and W
// (the weight gradients, which nothing waits for); stage r runs its first W after its
// (r + 1)-th B, so every stage keeps pp microbatches in flight (the first stage's 1F1B
// peak) and the cool-down's Ws fill the cool-down bubble. pp = 4, m = 8:
//   rank 0: F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7
//   rank 3: F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

enum class ScheduleKind {
  none,         // no pipelining: gradient accumulation, F0 B0 F1 B1 …
  gpipe,        // all forwards, then all backwards
  one_f_one_b,  // PipeDream-Flush: warmup, steady 1F1B, cooldown
  interleaved,  // Megatron-Core's interleaved 1F1B over virtual chunks
  zb_h1,        // zero bubble, handcrafted 1 (Qi et al. 2024): 1F1B with W delayed per stage
};

// "none", "gpipe", "1f1b", "interleaved", "zb-h1"
std::string_view schedule_kind_name(ScheduleKind k);
std::optional<ScheduleKind> parse_schedule_kind(std::string_view name);

// Which way a tensor moves, seen from the rank that runs the op.
enum class P2PDirection {
  send_next,  // activation to the next stage
  recv_prev,  // activation from the previous stage
  send_prev,  // activation gradient to the previous stage
  recv_next,  // activation gradient from the next stage
};
std::string_view p2p_direction_name(P2PDirection d);

// Megatron-Core's p2p_communication entry points; each posts its sends and receives
// as one batch and waits for all of them, or, overlapped (overlap_p2p_comm), posts them
// and leaves the wait to a later p2p_wait op.
enum class P2PCall {
  recv_forward,
  send_forward,
  recv_backward,
  send_backward,
  send_forward_recv_backward,
  send_backward_recv_forward,
  send_forward_recv_forward,
  send_backward_recv_backward,
  send_forward_backward_recv_forward_backward,
};
std::string_view p2p_call_name(P2PCall c);

// One tensor moved by a p2p call. `chunk` is the local model chunk that produced the
// tensor (sends) or will consume it (receives); `peer` is the other end's pp rank.
struct Transfer {
  P2PDirection direction;
  int microbatch = 0;
  int chunk = 0;
  int peer = 0;

  bool operator==(const Transfer&) const = default;
};

// A backward whose (microbatch, chunk) has a weight op later in the same list is split: it
// computes the input gradient only (B) and the weight op the weight gradients (W). Without
// a weight op a backward computes both. A p2p_wait waits for the last overlapped p2p call
// of its `call` (Megatron's fwd_wait_handles / bwd_wait_handles) before what follows it.
enum class OpType { forward, backward, p2p, weight, p2p_wait };

struct ScheduleOp {
  OpType type = OpType::forward;
  int microbatch = 0;                    // forward / backward / weight
  int chunk = 0;                         // forward / backward / weight: virtual pipeline chunk
  P2PCall call = P2PCall::recv_forward;  // p2p and p2p_wait
  std::vector<Transfer> transfers;  // p2p only; never empty (calls with nothing to do are dropped)
  // A forward that runs together with the backward right after it (Megatron-Core's combined
  // 1F1B: the two take turns on the host, core/host_turns.hpp).
  bool combined = false;
  // p2p only: posted and not waited for here; a later p2p_wait of the same call waits.
  bool overlapped = false;

  bool is_compute() const { return type != OpType::p2p && type != OpType::p2p_wait; }
  bool operator==(const ScheduleOp&) const = default;
};

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 1;
  int vpp = 1;
  int num_microbatches = 1;
  int microbatch_group_size = 0;  // interleaved: microbatches per virtual stage group; 0 → pp
  bool forward_only = false;      // evaluation: every forward, in order, and no backward
  // Megatron's delay_wgrad_compute: every backward is split and its weight gradients run
  // after the p2p call that sends its input gradient on (right after the backward where no
  // call follows it), not before. Not with zb_h1, which places its Ws itself.
  bool delay_wgrad_compute = false;
  // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm), without pipelining:
  // F0, then each forward combined with the previous microbatch's backward (F1+B0, F2+B1,
  // …), then the last backward; two microbatches' activations are held at once.
  bool combined_1f1b = false;
  // Megatron-Core's overlap_p2p_comm (its default with interleaving; interleaved only, and
  // not with the combined 1F1B, which keeps the batched path here): each forward posts its
  // send_forward_recv_forward and each backward its send_backward_recv_backward, and the
  // next forward (backward) waits for them first, so a forward's transfers run under the
  // backward after it and a backward's under the next forward. The cool-down's calls block.
  bool overlap_p2p_comm = false;
};

struct Schedule {
  ScheduleSpec spec;
  std::vector<std::vector<ScheduleOp>> ranks;  // ranks[pp rank] = that stage's op list
};

// Throws ConfigError naming the field, the value and the rule (Megatron's rules for
// interleaving included) before building anything.
void validate_schedule_spec(const ScheduleSpec& spec);
std::vector<ScheduleOp> make_rank_schedule(const ScheduleSpec& spec, int pp_rank);
Schedule make_schedule(const ScheduleSpec& spec);

// Interleaving's microbatch → (microbatch, chunk) table, Megatron-Core's get_schedule_table:
// groups of `group_size` microbatches run chunk 0, then chunk 1, …; the last group takes
// what is left. Entry k is the k-th forward's (microbatch, chunk).
struct MicrobatchChunk {
  int microbatch = 0;
  int chunk = 0;
  bool operator==(const MicrobatchChunk&) const = default;
};
std::vector<MicrobatchChunk> interleaved_schedule_table(int num_microbatches, int vpp,
                                                        int group_size);

// Number of warmup forwards before the first backward on `pp_rank` (Megatron-Core's
// get_pp_rank_microbatches).
int num_warmup_microbatches(const ScheduleSpec& spec, int pp_rank);

// Whether `ops` splits the backward of (microbatch, chunk): a weight op of it is in the list.
bool has_weight_op(const std::vector<ScheduleOp>& ops, int microbatch, int chunk);

// "F3", "B0.1", "W2", "send_forward_recv_backward", "send_forward_recv_forward~" (posted,
// overlapped), "wait(send_forward_recv_forward)" — for printing.
std::string describe(const ScheduleOp& op, bool with_chunk);

}  // namespace tandem
