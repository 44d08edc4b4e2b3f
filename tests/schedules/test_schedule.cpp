// Schedules: Megatron-Core's orders as golden lists, and the properties every schedule
// must have over a sweep of sizes — each (microbatch, chunk) forwarded once and
// backwarded once after its forward, sends and receives that pair up in order between
// neighbouring stages (proved by playing the exchange with an independent player that
// treats every transfer as a rendezvous), and bounded in-flight activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "schedules/schedule.hpp"

namespace tandem {
namespace {

std::string compute_order(const std::vector<ScheduleOp>& ops, bool chunks) {
  std::string s;
  for (const auto& op : ops)
    if (op.is_compute()) s += (s.empty() ? "" : " ") + describe(op, chunks);
  return s;
}

TEST(Schedule, InterleavedRankZeroMatchesMegatronCore) {
  // The order Megatron-Core runs for pp 4, vpp 2, m 8 on pipeline rank 0 (issue #2).
  const auto ops = make_rank_schedule({ScheduleKind::interleaved, 4, 2, 8}, 0);
  EXPECT_EQ(compute_order(ops, true),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 "
            "F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
}

TEST(Schedule, OneFOneBGoldenOrders) {
  // Written out by hand from the PipeDream-Flush definition: warmup pp − rank − 1
  // forwards, then alternate, then drain the backwards.
  const ScheduleSpec spec{ScheduleKind::one_f_one_b, 4, 1, 8};
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 0), false),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 1), false),
            "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 3), false),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST(Schedule, OneFOneBMiddleStageCallsMegatronsP2P) {
  // Stage 1 of 4, m = 3: warmup 2, steady 1, cooldown 2 — each call as Megatron names it.
  const auto ops = make_rank_schedule({ScheduleKind::one_f_one_b, 4, 1, 3}, 1);
  std::vector<std::string> names;
  for (const auto& op : ops) names.push_back(describe(op, false));
  const std::vector<std::string> want = {"recv_forward",
                                         "F0",
                                         "send_forward",
                                         "recv_forward",
                                         "F1",
                                         "send_forward",
                                         "recv_forward",
                                         "F2",
                                         "send_forward_recv_backward",
                                         "B0",
                                         "send_backward",
                                         "recv_backward",
                                         "B1",
                                         "send_backward",
                                         "recv_backward",
                                         "B2",
                                         "send_backward"};
  EXPECT_EQ(names, want);
}

TEST(Schedule, NoPipeliningAndGPipeOrders) {
  EXPECT_EQ(compute_order(make_rank_schedule({ScheduleKind::none, 1, 1, 3}, 0), false),
            "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(compute_order(make_rank_schedule({ScheduleKind::gpipe, 2, 1, 3}, 1), false),
            "F0 F1 F2 B0 B1 B2");
}

// Megatron-Core's combined_1f1b_schedule_for_no_pipelining: the first forward alone, each
// next forward combined with the previous backward ("+": runs with the op after it), the
// last backward alone; one microbatch: nothing to combine. Evaluation runs plain forwards.
// Pipelined or with a split backward it is refused, naming the rule.
TEST(Schedule, CombinedOneFOneBPairsEachForwardWithThePreviousBackward) {
  ScheduleSpec spec{ScheduleKind::none, 1, 1, 4};
  spec.combined_1f1b = true;
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 0), false), "F0 F1+ B0 F2+ B1 F3+ B2 B3");
  spec.num_microbatches = 1;
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 0), false), "F0 B0");
  spec.num_microbatches = 3;
  spec.forward_only = true;
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 0), false), "F0 F1 F2");
  spec.forward_only = false;
  spec.delay_wgrad_compute = true;
  EXPECT_THROW(make_rank_schedule(spec, 0), ConfigError);
  // Interleaved (Megatron-Core's combined_1f1b_schedule_for_interleaved_pipelining): one
  // warm-up forward more than the plain schedule's, then the steady state combined.
  ScheduleSpec interleaved{ScheduleKind::interleaved, 2, 2, 4};
  EXPECT_EQ(num_warmup_microbatches(interleaved, 0), 4);
  interleaved.combined_1f1b = true;
  EXPECT_EQ(num_warmup_microbatches(interleaved, 0), 5);
  EXPECT_EQ(compute_order(make_rank_schedule(interleaved, 0), true),
            "F0.0 F1.0 F0.1 F1.1 F2.0 F3.0+ B0.1 F2.1+ B1.1 F3.1+ B0.0 B1.0 B2.1 B3.1 B2.0 B3.0");
  ScheduleSpec pipelined{ScheduleKind::one_f_one_b, 2, 1, 4};
  pipelined.combined_1f1b = true;
  try {
    make_rank_schedule(pipelined, 0);
    ADD_FAILURE() << "a pipelined combined 1F1B was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap_moe_expert_parallel_comm"), std::string::npos)
        << e.what();
  }
}

TEST(Schedule, FirstAndLastStagesSkipAbsentTransfers) {
  const auto first = make_rank_schedule({ScheduleKind::one_f_one_b, 2, 1, 2}, 0);
  const auto last = make_rank_schedule({ScheduleKind::one_f_one_b, 2, 1, 2}, 1);
  for (const auto& op : first)
    for (const auto& t : op.transfers) {
      EXPECT_NE(t.direction, P2PDirection::recv_prev);
      EXPECT_NE(t.direction, P2PDirection::send_prev);
    }
  for (const auto& op : last)
    for (const auto& t : op.transfers) {
      EXPECT_NE(t.direction, P2PDirection::send_next);
      EXPECT_NE(t.direction, P2PDirection::recv_next);
    }
}

TEST(Schedule, InterleavedTableFollowsMegatronsExample) {
  // get_schedule_table's docstring example: PP 2, N 3, M 5, VP 2.
  const auto table = interleaved_schedule_table(5, 2, 3);
  std::vector<int> mbs, chunks;
  for (const auto& e : table) {
    mbs.push_back(e.microbatch);
    chunks.push_back(e.chunk);
  }
  EXPECT_EQ(mbs, (std::vector<int>{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(chunks, (std::vector<int>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));
}

TEST(Schedule, WarmupCounts) {
  EXPECT_EQ(num_warmup_microbatches({ScheduleKind::interleaved, 4, 2, 8}, 0), 10);
  EXPECT_EQ(num_warmup_microbatches({ScheduleKind::interleaved, 4, 2, 8}, 3), 4);
  EXPECT_EQ(num_warmup_microbatches({ScheduleKind::interleaved, 4, 2, 8, 6}, 3), 6);
  EXPECT_EQ(num_warmup_microbatches({ScheduleKind::interleaved, 4, 3, 4}, 0), 12);  // capped
  EXPECT_EQ(num_warmup_microbatches({ScheduleKind::one_f_one_b, 8, 1, 3}, 0), 3);   // capped
  EXPECT_EQ(num_warmup_microbatches({ScheduleKind::one_f_one_b, 8, 1, 16}, 2), 5);
}

TEST(Schedule, ZbH1GoldenOrders) {
  // Qi et al. 2024, §3.1 and Figure 3 (top), derived by hand for pp 4, m 8: 1F1B's warm-up
  // (pp − r − 1 forwards) and F/B order, each backward split into B and W, and stage r's
  // first W after its (r + 1)-th B ("adjusts the starting points of W depending on the
  // number of warm-up microbatches"), so every stage holds pp microbatches in flight; after
  // the last B the Ws left run back to back.
  const ScheduleSpec spec{ScheduleKind::zb_h1, 4, 1, 8};
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 0), false),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 1), false),
            "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 2), false),
            "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 3), false),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  // Fewer microbatches than stages: pp 3, m 2 (warm-up capped at m).
  const ScheduleSpec few{ScheduleKind::zb_h1, 3, 1, 2};
  EXPECT_EQ(compute_order(make_rank_schedule(few, 0), false), "F0 F1 B0 W0 B1 W1");
  EXPECT_EQ(compute_order(make_rank_schedule(few, 1), false), "F0 F1 B0 B1 W0 W1");
  EXPECT_EQ(compute_order(make_rank_schedule(few, 2), false), "F0 B0 F1 B1 W0 W1");
}

TEST(Schedule, ZbH1CallsTheP2POf1F1B) {
  // Only compute ops are added: the p2p calls are 1F1B's, in 1F1B's order.
  for (int pp = 2; pp <= 5; ++pp)
    for (int m = 1; m <= 9; ++m)
      for (int r = 0; r < pp; ++r) {
        const auto zb = make_rank_schedule({ScheduleKind::zb_h1, pp, 1, m}, r);
        const auto base = make_rank_schedule({ScheduleKind::one_f_one_b, pp, 1, m}, r);
        std::vector<ScheduleOp> zb_rest;
        for (const auto& op : zb)
          if (op.type != OpType::weight) zb_rest.push_back(op);
        EXPECT_EQ(zb_rest, base) << "pp " << pp << " m " << m << " rank " << r;
      }
  // Where the Ws sit among the calls, pp 2, m 3, the last stage (its Ws one microbatch
  // behind): a steady-state W before send_backward_recv_forward, whose receive waits for
  // the stage ahead's next forward (the W fills that wait: with blocking calls a W after it
  // would idle there), and after the calls that only send.
  std::vector<std::string> names;
  for (const auto& op : make_rank_schedule({ScheduleKind::zb_h1, 2, 1, 3}, 1))
    names.push_back(describe(op, false));
  EXPECT_EQ(names, (std::vector<std::string>{
                       "recv_forward", "F0", "B0", "send_backward_recv_forward", "F1", "B1", "W0",
                       "send_backward_recv_forward", "F2", "B2", "send_backward", "W1", "W2"}));
}

TEST(ScheduleProperties, ZbH1KeepsMemoryWithin1F1Bs) {
  // Per rank, microbatches forwarded and not yet through B (the whole activations) never
  // exceed 1F1B's count on that rank; forwarded and not yet through W (the inputs of the
  // linear layers still held) never exceed min(pp, m), the first stage's 1F1B peak — the
  // paper's "maximum peak memory over all workers does not exceed 1F1B's".
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 20; ++m)
      for (int r = 0; r < pp; ++r) {
        auto peaks = [](const std::vector<ScheduleOp>& ops) {
          int f = 0, b = 0, w = 0, peak_fb = 0, peak_fw = 0;
          bool split = false;
          for (const auto& op : ops) split |= op.type == OpType::weight;
          for (const auto& op : ops) {
            f += op.type == OpType::forward;
            b += op.type == OpType::backward;
            w += op.type == (split ? OpType::weight : OpType::backward);
            peak_fb = std::max(peak_fb, f - b);
            peak_fw = std::max(peak_fw, f - w);
          }
          return std::pair{peak_fb, peak_fw};
        };
        const auto [zb_fb, zb_fw] = peaks(make_rank_schedule({ScheduleKind::zb_h1, pp, 1, m}, r));
        const auto [base_fb, base_fw] =
            peaks(make_rank_schedule({ScheduleKind::one_f_one_b, pp, 1, m}, r));
        EXPECT_LE(zb_fb, base_fb) << "pp " << pp << " m " << m << " rank " << r;
        EXPECT_LE(zb_fw, std::min(pp, m)) << "pp " << pp << " m " << m << " rank " << r;
        EXPECT_EQ(base_fw, std::min(pp - r, m));  // 1F1B's own peak, for reference
      }
}

TEST(Schedule, DelayWgradComputePutsEachWAfterTheCallSendingItsGradient) {
  // 1F1B, pp 2, m 2, stage 1: each W right after the call that sends its B's gradient.
  const ScheduleSpec spec{.kind = ScheduleKind::one_f_one_b,
                          .pp = 2,
                          .num_microbatches = 2,
                          .delay_wgrad_compute = true};
  std::vector<std::string> names;
  for (const auto& op : make_rank_schedule(spec, 1)) names.push_back(describe(op, false));
  EXPECT_EQ(names,
            (std::vector<std::string>{"recv_forward", "F0", "B0", "send_backward_recv_forward",
                                      "W0", "F1", "B1", "send_backward", "W1"}));
  // Stage 0 sends no gradient: its W follows its B.
  EXPECT_EQ(compute_order(make_rank_schedule(spec, 0), false), "F0 F1 B0 W0 B1 W1");
  // Evaluation has no backward to split.
  ScheduleSpec eval = spec;
  eval.forward_only = true;
  EXPECT_EQ(compute_order(make_rank_schedule(eval, 1), false), "F0 F1");
}

// ---- properties over a sweep -------------------------------------------------------

std::vector<ScheduleSpec> sweep() {
  std::vector<ScheduleSpec> specs;
  for (int m = 1; m <= 12; ++m) {
    specs.push_back({ScheduleKind::none, 1, 1, m});
    specs.push_back({.kind = ScheduleKind::none, .num_microbatches = m, .combined_1f1b = true});
  }
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 20; ++m) {
      specs.push_back({ScheduleKind::one_f_one_b, pp, 1, m});
      specs.push_back({ScheduleKind::gpipe, pp, 1, m});
      if (pp >= 2) specs.push_back({ScheduleKind::zb_h1, pp, 1, m});
      specs.push_back({.kind = ScheduleKind::one_f_one_b,
                       .pp = pp,
                       .num_microbatches = m,
                       .delay_wgrad_compute = true});
    }
  for (int pp = 2; pp <= 8; ++pp)
    for (int vpp = 2; vpp <= 4; ++vpp)
      for (int m = pp; m <= 3 * pp + 1; ++m)
        for (int g = pp; g <= std::min(m, pp + 2); ++g) {
          ScheduleSpec s{ScheduleKind::interleaved, pp, vpp, m, g};
          const int rest = m % g;
          if (rest == 0 || rest >= pp) specs.push_back(s);
          s.delay_wgrad_compute = true;
          if ((rest == 0 || rest >= pp) && vpp == 2) specs.push_back(s);
          s.delay_wgrad_compute = false;
          s.combined_1f1b = true;
          if (rest == 0 || rest >= pp) specs.push_back(s);
        }
  return specs;
}

std::string name_of(const ScheduleSpec& s) {
  std::ostringstream o;
  o << schedule_kind_name(s.kind) << " pp=" << s.pp << " vpp=" << s.vpp
    << " m=" << s.num_microbatches << " g=" << s.microbatch_group_size
    << (s.delay_wgrad_compute ? " delay_wgrad" : "") << (s.combined_1f1b ? " combined" : "");
  return o.str();
}

TEST(ScheduleProperties, EachMicrobatchChunkForwardedOnceThenBackwardedOnce) {
  for (const auto& spec : sweep()) {
    const auto sched = make_schedule(spec);
    const bool split = spec.kind == ScheduleKind::zb_h1 || spec.delay_wgrad_compute;
    for (int r = 0; r < spec.pp; ++r) {
      std::map<std::pair<int, int>, int> fwd_at, bwd_at, w_at;
      const auto& ops = sched.ranks[r];
      for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
        if (!ops[i].is_compute()) continue;
        auto& seen = ops[i].type == OpType::forward    ? fwd_at
                     : ops[i].type == OpType::backward ? bwd_at
                                                       : w_at;
        const auto key = std::make_pair(ops[i].microbatch, ops[i].chunk);
        ASSERT_FALSE(seen.count(key))
            << name_of(spec) << " rank " << r << " repeats " << describe(ops[i], true);
        seen[key] = i;
      }
      ASSERT_EQ(fwd_at.size(), static_cast<std::size_t>(spec.num_microbatches * spec.vpp))
          << name_of(spec);
      ASSERT_EQ(bwd_at.size(), fwd_at.size()) << name_of(spec);
      for (const auto& [key, i] : bwd_at)
        ASSERT_LT(fwd_at.at(key), i)
            << name_of(spec) << " rank " << r << " backward before forward";
      // Combined 1F1B: each combined forward has a backward right after it, of another
      // (microbatch, chunk), whose own forward ran before (the two are independent); every
      // steady-state forward is combined.
      int combined = 0;
      for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
        if (!ops[i].combined) continue;
        ++combined;
        ASSERT_TRUE(spec.combined_1f1b) << name_of(spec);
        ASSERT_EQ(ops[i].type, OpType::forward) << name_of(spec);
        ASSERT_LT(i + 1, static_cast<int>(ops.size())) << name_of(spec);
        const ScheduleOp& b = ops[i + 1];
        ASSERT_EQ(b.type, OpType::backward) << name_of(spec) << " rank " << r;
        const auto bkey = std::make_pair(b.microbatch, b.chunk);
        ASSERT_NE(std::make_pair(ops[i].microbatch, ops[i].chunk), bkey) << name_of(spec);
        ASSERT_LT(fwd_at.at(bkey), i) << name_of(spec) << " rank " << r;
      }
      if (spec.combined_1f1b) {
        // Without pipelining the first forward runs alone (the warm-up count is 0 there).
        const int total = spec.num_microbatches * spec.vpp;
        const int steady =
            spec.kind == ScheduleKind::none ? total - 1 : total - num_warmup_microbatches(spec, r);
        EXPECT_EQ(combined, steady) << name_of(spec) << " rank " << r;
      }
      // A split backward's W comes once, after its B; an unsplit schedule has none.
      ASSERT_EQ(w_at.size(), split ? bwd_at.size() : 0u) << name_of(spec);
      for (const auto& [key, i] : w_at)
        ASSERT_LT(bwd_at.at(key), i) << name_of(spec) << " rank " << r << " W before B";
    }
  }
}

TEST(ScheduleProperties, OneFOneBKeepsAtMostPpMinusRankActivationsInFlight) {
  for (const auto& spec : sweep()) {
    if (spec.kind != ScheduleKind::one_f_one_b) continue;
    const auto sched = make_schedule(spec);
    for (int r = 0; r < spec.pp; ++r) {
      int in_flight = 0, peak = 0;
      for (const auto& op : sched.ranks[r]) {
        if (op.type == OpType::forward) peak = std::max(peak, ++in_flight);
        if (op.type == OpType::backward) --in_flight;
      }
      EXPECT_LE(peak, spec.pp - r) << name_of(spec) << " rank " << r;
      EXPECT_EQ(peak, std::min(spec.pp - r, spec.num_microbatches))
          << name_of(spec) << " rank " << r;
    }
  }
}

TEST(ScheduleProperties, InterleavedInFlightBoundedByWarmupPlusOne) {
  for (const auto& spec : sweep()) {
    if (spec.kind != ScheduleKind::interleaved) continue;
    const auto sched = make_schedule(spec);
    for (int r = 0; r < spec.pp; ++r) {
      int in_flight = 0, peak = 0;
      for (const auto& op : sched.ranks[r]) {
        if (op.type == OpType::forward) peak = std::max(peak, ++in_flight);
        if (op.type == OpType::backward) --in_flight;
      }
      const int total = spec.num_microbatches * spec.vpp;
      EXPECT_LE(peak, std::min(total, num_warmup_microbatches(spec, r) + 1)) << name_of(spec);
    }
  }
}

// An independent player: every transfer is a rendezvous. A rank blocked in a p2p call
// completes a transfer when the neighbour's current call holds the matching transfer and
// both are the next unmatched ones on their (sender, receiver, activation|gradient)
// channel; the call returns when all its transfers are done. The moved tensor must be the
// one the receiver expects.
struct Player {
  const Schedule& s;
  std::vector<std::size_t> at;                               // op index per rank
  std::vector<std::vector<bool>> done;                       // per rank: transfers of current op
  std::map<std::tuple<int, int, bool>, int> sent, received;  // per channel counters
  std::map<std::tuple<int, int, bool>, std::vector<std::pair<int, int>>> moved;  // (mb, chunk)

  explicit Player(const Schedule& sched)
      : s(sched), at(sched.ranks.size(), 0), done(sched.ranks.size()) {}

  static bool is_send(P2PDirection d) {
    return d == P2PDirection::send_next || d == P2PDirection::send_prev;
  }
  static bool activation(P2PDirection d) {
    return d == P2PDirection::send_next || d == P2PDirection::recv_prev;
  }

  bool step_rank(int r) {
    bool moved_any = false;
    while (at[r] < s.ranks[r].size()) {
      const auto& op = s.ranks[r][at[r]];
      if (op.is_compute()) {
        ++at[r];
        moved_any = true;
        continue;
      }
      if (done[r].size() != op.transfers.size()) done[r].assign(op.transfers.size(), false);
      for (std::size_t t = 0; t < op.transfers.size(); ++t) {
        if (done[r][t]) continue;
        const auto& tr = op.transfers[t];
        if (!is_send(tr.direction)) continue;  // sends drive the matching
        moved_any |= try_match(r, t, tr);
      }
      if (std::all_of(done[r].begin(), done[r].end(), [](bool b) { return b; })) {
        ++at[r];
        done[r].clear();
        moved_any = true;
        continue;
      }
      break;
    }
    return moved_any;
  }

  bool try_match(int r, std::size_t t, const Transfer& tr) {
    const int peer = tr.peer;
    if (at[peer] >= s.ranks[peer].size()) return false;
    const auto& pop = s.ranks[peer][at[peer]];
    if (pop.is_compute()) return false;
    if (done[peer].size() != pop.transfers.size()) done[peer].assign(pop.transfers.size(), false);
    const bool act = activation(tr.direction);
    const auto want = act ? P2PDirection::recv_prev : P2PDirection::recv_next;
    for (std::size_t u = 0; u < pop.transfers.size(); ++u) {
      const auto& pr = pop.transfers[u];
      if (done[peer][u] || pr.direction != want || pr.peer != r) continue;
      const auto ch = std::make_tuple(r, peer, act);
      const bool wraps = act ? (r == s.spec.pp - 1) : (r == 0);
      const int chunk_at_receiver = wraps ? tr.chunk + (act ? 1 : -1) : tr.chunk;
      EXPECT_EQ(pr.microbatch, tr.microbatch)
          << name_of(s.spec) << " channel " << r << "->" << peer;
      EXPECT_EQ(pr.chunk, chunk_at_receiver) << name_of(s.spec) << " channel " << r << "->" << peer;
      ++sent[ch];
      ++received[ch];
      done[r][t] = true;
      done[peer][u] = true;
      return true;
    }
    return false;
  }

  bool run() {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) progress |= step_rank(r);
    }
    for (std::size_t r = 0; r < s.ranks.size(); ++r)
      if (at[r] != s.ranks[r].size()) return false;
    return true;
  }
};

TEST(ScheduleProperties, SendsAndReceivesPairUpWithoutDeadlock) {
  for (const auto& spec : sweep()) {
    const auto sched = make_schedule(spec);
    Player player(sched);
    ASSERT_TRUE(player.run()) << name_of(spec) << " deadlocks";
    // Every activation crossing a stage boundary is sent exactly once per (mb, chunk).
    int sends = 0;
    for (const auto& ops : sched.ranks)
      for (const auto& op : ops)
        for (const auto& t : op.transfers) sends += Player::is_send(t.direction) ? 1 : 0;
    const int boundaries = spec.pp * spec.vpp - 1;  // virtual stages minus one
    EXPECT_EQ(sends, 2 * boundaries * spec.num_microbatches) << name_of(spec);
  }
}

// ---- validation ---------------------------------------------------------------------

std::string violated_field(const ScheduleSpec& spec) {
  try {
    validate_schedule_spec(spec);
  } catch (const ConfigError& e) {
    return e.violations().at(0).field + "=" + e.violations().at(0).value;
  }
  return "accepted";
}

TEST(ScheduleValidation, RejectsWithFieldAndValue) {
  EXPECT_EQ(violated_field({ScheduleKind::one_f_one_b, 0, 1, 4}), "pipeline_model_parallel_size=0");
  EXPECT_EQ(violated_field({ScheduleKind::one_f_one_b, 2, 1, 0}), "num_microbatches=0");
  EXPECT_EQ(violated_field({ScheduleKind::none, 2, 1, 4}), "pipeline_model_parallel_size=2");
  EXPECT_EQ(violated_field({ScheduleKind::one_f_one_b, 2, 2, 4}),
            "virtual_pipeline_model_parallel_size=2");
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 1, 2, 4}), "pipeline_model_parallel_size=1");
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 2, 1, 4}),
            "virtual_pipeline_model_parallel_size=1");
  // Group size must lie in [pp, m].
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 4, 2, 3}),
            "microbatch_group_size_per_vp_stage=4");
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 4, 2, 8, 3}),
            "microbatch_group_size_per_vp_stage=3");
  // m mod group must be 0 or ≥ pp: 9 mod 4 = 1.
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 4, 2, 9}), "num_microbatches=9");
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 4, 2, 12}), "accepted");
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 2, 2, 5}),
            "num_microbatches=5");  // 5 mod 2 = 1
  EXPECT_EQ(violated_field({ScheduleKind::interleaved, 2, 2, 5, 3}),
            "accepted");  // 5 mod 3 = 2 ≥ 2
}

TEST(ScheduleValidation, MessageNamesTheRule) {
  try {
    validate_schedule_spec({ScheduleKind::interleaved, 4, 2, 9});
    FAIL() << "accepted m = 9 with pp = 4";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("num_microbatches = 9"), std::string::npos) << msg;
    EXPECT_NE(msg.find("≥ pipeline_model_parallel_size (4)"), std::string::npos) << msg;
  }
}

// ---- overlap_p2p_comm ------------------------------------------------------------------

std::vector<ScheduleSpec> overlapped_sweep() {
  std::vector<ScheduleSpec> specs;
  for (int pp = 2; pp <= 6; ++pp)
    for (int vpp = 2; vpp <= 3; ++vpp)
      for (int m = pp; m <= 3 * pp + 1; ++m)
        for (int g = pp; g <= std::min(m, pp + 1); ++g) {
          const int rest = m % g;
          if (rest != 0 && rest < pp) continue;
          ScheduleSpec s{ScheduleKind::interleaved, pp, vpp, m, g};
          s.overlap_p2p_comm = true;
          specs.push_back(s);
          s.delay_wgrad_compute = true;
          specs.push_back(s);
          s.delay_wgrad_compute = false;
          s.forward_only = true;
          specs.push_back(s);
        }
  return specs;
}

std::vector<std::tuple<int, int, int, int>> transfers_of(const std::vector<ScheduleOp>& ops) {
  std::vector<std::tuple<int, int, int, int>> out;
  for (const auto& op : ops)
    for (const auto& t : op.transfers)
      out.emplace_back(static_cast<int>(t.direction), t.microbatch, t.chunk, t.peer);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ScheduleProperties, OverlappedP2PRunsTheSameComputeAndTransfersAndWaitsBeforeUse) {
  for (ScheduleSpec spec : overlapped_sweep()) {
    ScheduleSpec batched = spec;
    batched.overlap_p2p_comm = false;
    for (int r = 0; r < spec.pp; ++r) {
      const auto ops = make_rank_schedule(spec, r);
      const auto ref = make_rank_schedule(batched, r);
      // Megatron-Core's two paths run the same forwards and backwards in the same order and
      // move the same tensors; only where the calls post and wait differs.
      ASSERT_EQ(compute_order(ops, true), compute_order(ref, true)) << name_of(spec) << " " << r;
      ASSERT_EQ(transfers_of(ops), transfers_of(ref)) << name_of(spec) << " rank " << r;
      // At most one call of each kind in flight; a wait only for a posted call; every
      // received tensor waited for before the compute that consumes it; nothing left over.
      std::map<P2PCall, std::vector<Transfer>> in_flight;
      std::set<std::pair<int, int>> inputs, grads;  // arrived, by (microbatch, chunk)
      auto arrive = [&](const std::vector<Transfer>& ts) {
        for (const auto& t : ts) {
          if (t.direction == P2PDirection::recv_prev) inputs.insert({t.microbatch, t.chunk});
          if (t.direction == P2PDirection::recv_next) grads.insert({t.microbatch, t.chunk});
        }
      };
      const int last_chunk = spec.vpp - 1;
      for (const auto& op : ops) {
        const auto key = std::make_pair(op.microbatch, op.chunk);
        switch (op.type) {
          case OpType::p2p:
            if (!op.overlapped) {
              arrive(op.transfers);
              break;
            }
            ASSERT_TRUE(op.call == P2PCall::send_forward_recv_forward ||
                        op.call == P2PCall::send_backward_recv_backward)
                << name_of(spec);
            ASSERT_FALSE(in_flight.count(op.call))
                << name_of(spec) << " rank " << r << ": posted twice without a wait";
            in_flight[op.call] = op.transfers;
            break;
          case OpType::p2p_wait:
            ASSERT_TRUE(in_flight.count(op.call)) << name_of(spec) << " waits for nothing";
            arrive(in_flight[op.call]);
            in_flight.erase(op.call);
            break;
          case OpType::forward:
            if (!(r == 0 && op.chunk == 0)) {
              ASSERT_TRUE(inputs.count(key)) << name_of(spec) << " rank " << r << ": "
                                             << describe(op, true) << " before its input arrived";
            }
            break;
          case OpType::backward:
            if (!(r == spec.pp - 1 && op.chunk == last_chunk)) {
              ASSERT_TRUE(grads.count(key))
                  << name_of(spec) << " rank " << r << ": " << describe(op, true)
                  << " before its output gradient arrived";
            }
            break;
          case OpType::weight:
            break;
        }
      }
      ASSERT_TRUE(in_flight.empty())
          << name_of(spec) << " rank " << r << " ends with a call posted";
    }
  }
}

TEST(Schedule, OverlappedSteadyStatePostsAfterEachComputeAndWaitsBeforeTheNext) {
  // Megatron-Core's loop with overlap_p2p_comm, traced by hand for the last stage of pp 2 ×
  // vpp 2 × m 4 (warm-up 2: F0.0, F1.0): each forward waits for the forward call, runs, and
  // posts send_forward_recv_forward; each backward waits for the backward call (none is
  // posted before B0.1: the last stage receives no gradient for its last chunk), runs, and
  // posts send_backward_recv_backward.
  ScheduleSpec spec{ScheduleKind::interleaved, 2, 2, 4};
  spec.overlap_p2p_comm = true;
  const auto ops = make_rank_schedule(spec, 1);
  std::size_t first_backward = 0;
  while (ops[first_backward].type != OpType::backward) ++first_backward;
  std::string steady;
  for (std::size_t i = first_backward - 3; i <= first_backward + 6; ++i)
    steady += (steady.empty() ? "" : " ") + describe(ops[i], true);
  EXPECT_EQ(steady,
            "wait(send_forward_recv_forward) F0.1 send_forward_recv_forward~ B0.1 "
            "send_backward_recv_backward~ wait(send_forward_recv_forward) F1.1 "
            "send_forward_recv_forward~ wait(send_backward_recv_backward) B1.1");
  // The cool-down's calls block; the first stage's last forward sends its output, and the
  // step waits for that send last.
  for (int r = 0; r < 2; ++r) {
    const auto rank_ops = make_rank_schedule(spec, r);
    std::size_t cooldown = 0;  // after the wait for the last steady backward's call
    for (std::size_t i = 0; i < rank_ops.size(); ++i)
      if (describe(rank_ops[i], false) == "wait(send_backward_recv_backward)") cooldown = i;
    ASSERT_GT(cooldown, 0u) << "rank " << r;
    for (std::size_t i = cooldown; i < rank_ops.size(); ++i)
      EXPECT_FALSE(rank_ops[i].overlapped) << "rank " << r << " op " << i;
  }
  const auto first = make_rank_schedule(spec, 0);
  EXPECT_EQ(describe(first.back(), false), "wait(send_forward_recv_forward)");
}

TEST(ScheduleValidation, OverlappedP2PIsInterleavedOnly) {
  ScheduleSpec spec{ScheduleKind::one_f_one_b, 4, 1, 8};
  spec.overlap_p2p_comm = true;
  EXPECT_EQ(violated_field(spec), "overlap_p2p_comm=true");
}

}  // namespace
}  // namespace tandem
