// The idealised timeline: bubble arithmetic against the closed forms of the pipeline
// papers, hand-computed small timelines, deadlock and mismatch detection.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "schedules/timeline.hpp"
#include "schedules/timeline_trace.hpp"

namespace tandem {
namespace {

TEST(Timeline, OneFOneBBubbleIsPMinusOneOverMPlusPMinusOne) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 24; ++m)
      for (double b : {1.0, 2.0}) {
        const auto tl = make_timeline(make_schedule({ScheduleKind::one_f_one_b, p, 1, m}),
                                      {Seconds(1.0), Seconds(b), Seconds(0.0)});
        const double expected = static_cast<double>(p - 1) / (m + p - 1);
        for (int r = 0; r < p; ++r)
          EXPECT_NEAR(tl.bubble_fraction(r), expected, 1e-12)
              << "p=" << p << " m=" << m << " b=" << b;
        EXPECT_DOUBLE_EQ(tl.makespan.value, (m + p - 1) * (1.0 + b));
      }
}

TEST(Timeline, ZbH1IdleIsPMinusOneTimesFPlusBMinusW) {
  // Qi et al. 2024, §3.1: ZB-H1's idle time per stage is (p − 1)(T_F + T_B − T_W) (m ≥ p),
  // against 1F1B's (p − 1)(T_F + T_B + T_W); with T_F = T_B = T_W a third of it. Here F = 1
  // and a whole backward 2 (B = W = 1), so the makespan is 3m + (p − 1).
  for (int p = 2; p <= 8; ++p)
    for (int m = p; m <= 24; ++m) {
      const auto zb = make_timeline(make_schedule({ScheduleKind::zb_h1, p, 1, m}),
                                    {Seconds(1.0), Seconds(2.0), Seconds(0.0)});
      const auto base = make_timeline(make_schedule({ScheduleKind::one_f_one_b, p, 1, m}),
                                      {Seconds(1.0), Seconds(2.0), Seconds(0.0)});
      EXPECT_DOUBLE_EQ(zb.makespan.value, 3.0 * m + (p - 1)) << "p=" << p << " m=" << m;
      EXPECT_DOUBLE_EQ(base.makespan.value, 3.0 * m + 3.0 * (p - 1));
      for (int r = 0; r < p; ++r)
        EXPECT_NEAR(zb.bubble_fraction(r), (p - 1.0) / (3.0 * m + (p - 1)), 1e-12);
    }
  // Fewer microbatches than stages still gain: pp 4, m 2.
  const auto zb = make_timeline(make_schedule({ScheduleKind::zb_h1, 4, 1, 2}), {});
  const auto base = make_timeline(make_schedule({ScheduleKind::one_f_one_b, 4, 1, 2}), {});
  EXPECT_LT(zb.makespan.value, base.makespan.value);
}

TEST(Timeline, GPipeHasTheSameBubbleAsOneFOneB) {
  for (int p = 2; p <= 6; ++p)
    for (int m = 1; m <= 12; ++m) {
      const auto tl = make_timeline(make_schedule({ScheduleKind::gpipe, p, 1, m}),
                                    {Seconds(1.0), Seconds(2.0), Seconds(0.0)});
      EXPECT_NEAR(tl.bubble_fraction(), static_cast<double>(p - 1) / (m + p - 1), 1e-12);
    }
}

TEST(Timeline, InterleavedBubbleShrinksByTheNumberOfChunks) {
  // Each chunk costs 1/v of a stage's forward and backward; the bubble is (p − 1)/v stage
  // times, i.e. a fraction (p − 1) / (v·m + p − 1) of the iteration (Narayanan et al. 2021).
  for (int p = 2; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m : {p, 2 * p, 3 * p, 4 * p}) {
        const auto tl = make_timeline(make_schedule({ScheduleKind::interleaved, p, v, m}),
                                      {Seconds(1.0 / v), Seconds(1.0 / v), Seconds(0.0)});
        const double expected = static_cast<double>(p - 1) / (v * m + p - 1);
        EXPECT_NEAR(tl.bubble_fraction(0), expected, 1e-9) << "p=" << p << " v=" << v << " m=" << m;
        EXPECT_NEAR(tl.makespan.value, 2.0 * m + 2.0 * (p - 1) / v, 1e-9)
            << "p=" << p << " v=" << v << " m=" << m;
      }
}

TEST(Timeline, NoPipeliningHasNoBubble) {
  const auto tl = make_timeline(make_schedule({ScheduleKind::none, 1, 1, 5}), {});
  EXPECT_DOUBLE_EQ(tl.bubble_fraction(), 0.0);
  EXPECT_DOUBLE_EQ(tl.makespan.value, 5 * 3.0);
}

TEST(Timeline, P2PLatencyDelaysTheReceiver) {
  // pp 2, m 1, f = 1, b = 2, p2p = 0.5 by hand: stage 0 F0 [0,1], send [1,1.5];
  // stage 1 recv [0,1.5], F0 [1.5,2.5], B0 [2.5,4.5], send [4.5,5]; stage 0 recv
  // [1.5,5], B0 [5,7].
  const auto tl = make_timeline(make_schedule({ScheduleKind::one_f_one_b, 2, 1, 1}),
                                {Seconds(1.0), Seconds(2.0), Seconds(0.5)});
  EXPECT_DOUBLE_EQ(tl.makespan.value, 7.0);
  const auto& s1 = tl.schedule.ranks[1];
  ASSERT_EQ(s1[1].type, OpType::forward);
  EXPECT_DOUBLE_EQ(tl.ranks[1][1].start.value, 1.5);
}

TEST(Timeline, OverlappedP2PHidesTransfersUnderComputeWithoutChangingTheIdealBubble) {
  // With free transfers where a call waits cannot matter: both paths give the papers'
  // (p − 1) / (v·m + p − 1). With a cost, the overlapped path waits for a forward's
  // transfers only after the backward behind it, so it is no slower than the batched one,
  // strictly faster once the pipeline has a steady state, and never faster than free
  // transfers.
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m : {p, 2 * p, 4 * p}) {
        ScheduleSpec batched{ScheduleKind::interleaved, p, v, m};
        ScheduleSpec overlapped = batched;
        overlapped.overlap_p2p_comm = true;
        const IdealCosts free{Seconds(1.0 / v), Seconds(2.0 / v), Seconds(0.0)};
        const IdealCosts costly{Seconds(1.0 / v), Seconds(2.0 / v), Seconds(0.25 / v)};
        const auto ideal = make_timeline(make_schedule(overlapped), free);
        EXPECT_NEAR(ideal.bubble_fraction(0), static_cast<double>(p - 1) / (v * m + p - 1), 1e-9)
            << "p=" << p << " v=" << v << " m=" << m;
        const double t_free = make_timeline(make_schedule(batched), free).makespan.value;
        EXPECT_NEAR(ideal.makespan.value, t_free, 1e-9);
        const double t_batched = make_timeline(make_schedule(batched), costly).makespan.value;
        const double t_overlap = make_timeline(make_schedule(overlapped), costly).makespan.value;
        EXPECT_GE(t_overlap, t_free - 1e-9) << "p=" << p << " v=" << v << " m=" << m;
        if (m > p)
          EXPECT_LT(t_overlap, t_batched - 1e-9) << "p=" << p << " v=" << v << " m=" << m;
        else
          EXPECT_LE(t_overlap, t_batched + 1e-9) << "p=" << p << " v=" << v << " m=" << m;
      }
}

TEST(Timeline, AWaitForACallNeverPostedIsReported) {
  Schedule s{{ScheduleKind::interleaved, 2, 2, 2}, {}};
  s.ranks.resize(2);
  s.ranks[0].push_back({OpType::p2p_wait, 0, 0, P2PCall::send_forward_recv_forward, {}});
  try {
    make_timeline(s, {});
    FAIL() << "accepted";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("never posted"), std::string::npos) << e.what();
  }
}

TEST(Timeline, UnpairedSendIsReported) {
  auto s = make_schedule({ScheduleKind::one_f_one_b, 2, 1, 2});
  // Drop stage 1's first receive: stage 0's first send has no partner.
  auto& ops = s.ranks[1];
  ops.erase(ops.begin());
  EXPECT_THROW(pair_transfers(s), ScheduleError);
}

TEST(Timeline, MismatchedTensorIsReported) {
  auto s = make_schedule({ScheduleKind::one_f_one_b, 2, 1, 2});
  for (auto& op : s.ranks[1])
    for (auto& t : op.transfers)
      if (t.direction == P2PDirection::recv_prev) t.microbatch += 1;
  try {
    pair_transfers(s);
    FAIL() << "mismatched microbatch accepted";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("expects microbatch"), std::string::npos) << e.what();
  }
}

TEST(Timeline, DeadlockNamesTheBlockedOps) {
  // Swap stage 1's recv_forward behind its first send: both stages wait on each other.
  auto s = make_schedule({ScheduleKind::one_f_one_b, 2, 1, 1});
  // Stage 0: F0, send_forward, recv_backward, B0. Make stage 0 wait for the gradient
  // before sending the activation.
  auto& ops = s.ranks[0];
  std::swap(ops[1], ops[2]);
  try {
    make_timeline(s, {});
    FAIL() << "deadlock not detected";
  } catch (const ScheduleError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("deadlocks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 1"), std::string::npos) << msg;
  }
}

TEST(TimelineTrace, IsAWellFormedChromeTrace) {
  const auto tl = make_timeline(make_schedule({ScheduleKind::interleaved, 4, 2, 8}),
                                {Seconds(1e-3), Seconds(2e-3), Seconds(1e-4)});
  const auto j = timeline_to_trace(tl).to_json();
  const auto problems = check_trace(j);
  EXPECT_TRUE(problems.empty()) << problems.front();
  int slices = 0, flows = 0;
  for (const auto& e : j["traceEvents"]) {
    slices += e["ph"] == "X" ? 1 : 0;
    flows += e["ph"] == "s" ? 1 : 0;
  }
  EXPECT_EQ(flows, 2 * (4 * 2 - 1) * 8);  // one arrow per send
  EXPECT_GE(slices, 4 * 2 * 8 * 2);       // every F and B at least
}

TEST(TimelineTrace, ZbH1WeightOpsAreAClassOfTheirOwn) {
  const auto tl = make_timeline(make_schedule({ScheduleKind::zb_h1, 2, 1, 3}), {});
  const auto j = timeline_to_trace(tl).to_json();
  std::map<std::string, int> by_category;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") ++by_category[e["cat"].get<std::string>()];
  EXPECT_EQ(by_category["forward"], 2 * 3);
  EXPECT_EQ(by_category["backward"], 2 * 3);
  EXPECT_EQ(by_category["weight"], 2 * 3);
}

}  // namespace
}  // namespace tandem
