// Schedule construction: one builder per kind, each following the loop structure of
// Megatron-Core's forward_backward_* functions (schedules.py) so that the op order and
// the p2p calls are the ones Megatron issues. A p2p call whose sends and receives are
// all skipped (first/last stage) is dropped from the list.
#include "schedules/schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace tandem {

std::string_view schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::none:
      return "none";
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved:
      return "interleaved";
    case ScheduleKind::zb_h1:
      return "zb-h1";
  }
  throw std::logic_error("unknown schedule kind");
}

std::optional<ScheduleKind> parse_schedule_kind(std::string_view name) {
  for (auto k : {ScheduleKind::none, ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                 ScheduleKind::interleaved, ScheduleKind::zb_h1})
    if (schedule_kind_name(k) == name) return k;
  return std::nullopt;
}

std::string_view p2p_direction_name(P2PDirection d) {
  switch (d) {
    case P2PDirection::send_next:
      return "send_next";
    case P2PDirection::recv_prev:
      return "recv_prev";
    case P2PDirection::send_prev:
      return "send_prev";
    case P2PDirection::recv_next:
      return "recv_next";
  }
  throw std::logic_error("unknown p2p direction");
}

std::string_view p2p_call_name(P2PCall c) {
  switch (c) {
    case P2PCall::recv_forward:
      return "recv_forward";
    case P2PCall::send_forward:
      return "send_forward";
    case P2PCall::recv_backward:
      return "recv_backward";
    case P2PCall::send_backward:
      return "send_backward";
    case P2PCall::send_forward_recv_backward:
      return "send_forward_recv_backward";
    case P2PCall::send_backward_recv_forward:
      return "send_backward_recv_forward";
    case P2PCall::send_forward_recv_forward:
      return "send_forward_recv_forward";
    case P2PCall::send_backward_recv_backward:
      return "send_backward_recv_backward";
    case P2PCall::send_forward_backward_recv_forward_backward:
      return "send_forward_backward_recv_forward_backward";
  }
  throw std::logic_error("unknown p2p call");
}

std::string describe(const ScheduleOp& op, bool with_chunk) {
  if (op.type == OpType::p2p)
    return std::string(p2p_call_name(op.call)) + (op.overlapped ? "~" : "");
  if (op.type == OpType::p2p_wait) return "wait(" + std::string(p2p_call_name(op.call)) + ")";
  std::string s = op.type == OpType::forward ? "F" : op.type == OpType::backward ? "B" : "W";
  s += std::to_string(op.microbatch);
  if (with_chunk) s += "." + std::to_string(op.chunk);
  if (op.combined) s += "+";
  return s;
}

void validate_schedule_spec(const ScheduleSpec& spec) {
  std::vector<Violation> v;
  auto num = [](int x) { return std::to_string(x); };
  if (spec.pp < 1) v.push_back({"pipeline_model_parallel_size", num(spec.pp), "must be ≥ 1"});
  if (spec.vpp < 1)
    v.push_back({"virtual_pipeline_model_parallel_size", num(spec.vpp), "must be ≥ 1"});
  if (spec.num_microbatches < 1)
    v.push_back({"num_microbatches", num(spec.num_microbatches), "must be ≥ 1"});
  if (!v.empty()) throw ConfigError(v);

  const std::string kind(schedule_kind_name(spec.kind));
  if (spec.kind == ScheduleKind::none && spec.pp != 1)
    v.push_back({"pipeline_model_parallel_size", num(spec.pp),
                 "the 'none' schedule (no pipelining) needs pipeline_model_parallel_size = 1"});
  if (spec.kind != ScheduleKind::interleaved && spec.vpp != 1)
    v.push_back(
        {"virtual_pipeline_model_parallel_size", num(spec.vpp),
         "only the interleaved schedule runs virtual chunks; the '" + kind + "' schedule needs 1"});
  if (spec.kind == ScheduleKind::interleaved) {
    if (spec.pp < 2)
      v.push_back({"pipeline_model_parallel_size", num(spec.pp),
                   "the interleaved schedule needs pipeline_model_parallel_size ≥ 2"});
    if (spec.vpp < 2)
      v.push_back({"virtual_pipeline_model_parallel_size", num(spec.vpp),
                   "the interleaved schedule needs ≥ 2 virtual chunks per stage"});
    const int m = spec.num_microbatches;
    const int g = spec.microbatch_group_size > 0 ? spec.microbatch_group_size : spec.pp;
    if (g < spec.pp || g > m)
      v.push_back({"microbatch_group_size_per_vp_stage", num(g),
                   "must lie in [pipeline_model_parallel_size, num_microbatches] = [" +
                       num(spec.pp) + ", " + num(m) + "] (Megatron-Core's interleaved schedule)"});
    else if (const int rest = m % g; rest > 0 && rest < spec.pp)
      v.push_back({"num_microbatches", num(m),
                   "num_microbatches mod microbatch_group_size_per_vp_stage = " + num(m) + " mod " +
                       num(g) + " = " + num(rest) +
                       " must be 0 or ≥ pipeline_model_parallel_size (" + num(spec.pp) +
                       "); otherwise the interleaved schedule has dependency bubbles"});
  }
  if (spec.kind == ScheduleKind::zb_h1 && spec.pp < 2)
    v.push_back({"pipeline_model_parallel_size", num(spec.pp),
                 "the zb-h1 schedule fills a pipeline's bubble and needs "
                 "pipeline_model_parallel_size ≥ 2 (use 'none' at 1)"});
  if (spec.combined_1f1b && spec.kind != ScheduleKind::none &&
      spec.kind != ScheduleKind::interleaved)
    v.push_back({"overlap_moe_expert_parallel_comm", "true",
                 "the combined 1F1B runs without pipelining or interleaved (Megatron-Core's "
                 "two), not on the '" +
                     kind + "' schedule"});
  if (spec.overlap_p2p_comm && spec.kind != ScheduleKind::interleaved)
    v.push_back(
        {"overlap_p2p_comm", "true",
         "Megatron-Core overlaps p2p communication on the interleaved schedule only; the '" + kind +
             "' schedule needs false"});
  if (spec.combined_1f1b && spec.delay_wgrad_compute)
    v.push_back({"delay_wgrad_compute", "true",
                 "the combined 1F1B runs whole backwards; leave delay_wgrad_compute out"});
  if (spec.kind == ScheduleKind::zb_h1 && spec.delay_wgrad_compute)
    v.push_back({"delay_wgrad_compute", "true",
                 "the zb-h1 schedule places the weight gradients itself; leave "
                 "delay_wgrad_compute out"});
  if (!v.empty()) throw ConfigError(v);
}

bool has_weight_op(const std::vector<ScheduleOp>& ops, int microbatch, int chunk) {
  return std::any_of(ops.begin(), ops.end(), [&](const ScheduleOp& op) {
    return op.type == OpType::weight && op.microbatch == microbatch && op.chunk == chunk;
  });
}

std::vector<MicrobatchChunk> interleaved_schedule_table(int num_microbatches, int vpp,
                                                        int group_size) {
  std::vector<MicrobatchChunk> table;
  for (int first = 0; first < num_microbatches; first += group_size) {
    const int last = first + group_size >= num_microbatches ? num_microbatches : first + group_size;
    for (int chunk = 0; chunk < vpp; ++chunk)
      for (int mb = first; mb < last; ++mb) table.push_back({mb, chunk});
  }
  return table;
}

int num_warmup_microbatches(const ScheduleSpec& spec, int pp_rank) {
  const int total = spec.num_microbatches * spec.vpp;
  if (spec.forward_only) return total;  // Megatron: forward_only runs everything as warmup
  int warmup = 0;
  switch (spec.kind) {
    case ScheduleKind::none:
      warmup = 0;
      break;
    case ScheduleKind::gpipe:
      warmup = total;
      break;
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1:  // the same warm-up (Qi et al. 2024, §3.1)
      warmup = spec.pp - pp_rank - 1;
      break;
    case ScheduleKind::interleaved: {
      const int g = spec.microbatch_group_size > 0 ? spec.microbatch_group_size : spec.pp;
      warmup = (spec.pp - pp_rank - 1) * 2 + (spec.vpp - 1) * g;
      // Combined 1F1B: one forward more, so that no steady step's forward and backward
      // depend on each other (Megatron-Core's get_pp_rank_microbatches).
      if (spec.combined_1f1b) ++warmup;
      break;
    }
  }
  return std::min(warmup, total);
}

namespace {

// Collects ops for one rank; p2p calls with no transfers are dropped.
class OpListBuilder {
 public:
  void forward(int mb, int chunk) { ops_.push_back({OpType::forward, mb, chunk, {}, {}}); }
  void backward(int mb, int chunk) { ops_.push_back({OpType::backward, mb, chunk, {}, {}}); }
  void weight(int mb, int chunk) { ops_.push_back({OpType::weight, mb, chunk, {}, {}}); }
  void p2p(P2PCall call, std::vector<Transfer> transfers) {
    if (!transfers.empty()) ops_.push_back({OpType::p2p, 0, 0, call, std::move(transfers)});
  }
  std::vector<ScheduleOp> take() { return std::move(ops_); }

 private:
  std::vector<ScheduleOp> ops_;
};

// Appends a transfer when `present`; Megatron passes None / recv=False for absent ones.
void add_if(std::vector<Transfer>& ts, bool present, Transfer t) {
  if (present) ts.push_back(t);
}

std::vector<ScheduleOp> build_no_pipelining(const ScheduleSpec& spec) {
  OpListBuilder b;
  if (spec.combined_1f1b && !spec.forward_only) {
    const int m = spec.num_microbatches;
    b.forward(0, 0);
    for (int mb = 1; mb < m; ++mb) {
      b.forward(mb, 0);
      b.backward(mb - 1, 0);
    }
    b.backward(m - 1, 0);
    std::vector<ScheduleOp> ops = b.take();
    for (std::size_t i = 1; i + 1 < ops.size(); i += 2) ops[i].combined = true;
    return ops;
  }
  for (int mb = 0; mb < spec.num_microbatches; ++mb) {
    b.forward(mb, 0);
    if (!spec.forward_only) b.backward(mb, 0);
  }
  return b.take();
}

struct StageInfo {
  int rank, pp;
  bool first() const { return rank == 0; }
  bool last() const { return rank == pp - 1; }
};

std::vector<ScheduleOp> build_gpipe(const ScheduleSpec& spec, StageInfo st) {
  OpListBuilder b;
  const int m = spec.num_microbatches;
  for (int mb = 0; mb < m; ++mb) {
    b.p2p(P2PCall::recv_forward, [&] {
      std::vector<Transfer> t;
      add_if(t, !st.first(), {P2PDirection::recv_prev, mb, 0, st.rank - 1});
      return t;
    }());
    b.forward(mb, 0);
    b.p2p(P2PCall::send_forward, [&] {
      std::vector<Transfer> t;
      add_if(t, !st.last(), {P2PDirection::send_next, mb, 0, st.rank + 1});
      return t;
    }());
  }
  for (int mb = 0; mb < m && !spec.forward_only; ++mb) {
    b.p2p(P2PCall::recv_backward, [&] {
      std::vector<Transfer> t;
      add_if(t, !st.last(), {P2PDirection::recv_next, mb, 0, st.rank + 1});
      return t;
    }());
    b.backward(mb, 0);
    b.p2p(P2PCall::send_backward, [&] {
      std::vector<Transfer> t;
      add_if(t, !st.first(), {P2PDirection::send_prev, mb, 0, st.rank - 1});
      return t;
    }());
  }
  return b.take();
}

// forward_backward_pipelining_without_interleaving. With `w_delay` ≥ 0 (ZB-H1) every
// backward is split and the Ws follow the Bs `w_delay` microbatches behind: the k-th W
// with the (k + w_delay)-th B, the rest at the end. In the steady state the W goes before
// send_backward_recv_forward: that call also waits for the next forward's input, which the
// stage ahead sends after its own next forward, and the W fills the wait (after the call it
// would idle in it: the timeline then loses one W per stage); after a call that only sends.
std::vector<ScheduleOp> build_one_f_one_b(const ScheduleSpec& spec, StageInfo st,
                                          int w_delay = -1) {
  OpListBuilder b;
  int next_w = 0;  // the next microbatch whose W is due
  auto weight_after = [&](int bwd) {
    if (w_delay >= 0 && bwd >= w_delay) b.weight(next_w++, 0);
  };
  const int m = spec.num_microbatches;
  const int warmup = num_warmup_microbatches(spec, st.rank);
  const int remaining = m - warmup;
  const int prev = st.rank - 1, next = st.rank + 1;
  auto recv_fwd = [&](int mb) {
    std::vector<Transfer> t;
    add_if(t, !st.first(), {P2PDirection::recv_prev, mb, 0, prev});
    return t;
  };
  auto send_fwd = [&](int mb) {
    std::vector<Transfer> t;
    add_if(t, !st.last(), {P2PDirection::send_next, mb, 0, next});
    return t;
  };
  auto recv_bwd = [&](int mb) {
    std::vector<Transfer> t;
    add_if(t, !st.last(), {P2PDirection::recv_next, mb, 0, next});
    return t;
  };
  auto send_bwd = [&](int mb) {
    std::vector<Transfer> t;
    add_if(t, !st.first(), {P2PDirection::send_prev, mb, 0, prev});
    return t;
  };
  auto concat = [](std::vector<Transfer> a, const std::vector<Transfer>& c) {
    a.insert(a.end(), c.begin(), c.end());
    return a;
  };

  for (int i = 0; i < warmup; ++i) {
    b.p2p(P2PCall::recv_forward, recv_fwd(i));
    b.forward(i, 0);
    b.p2p(P2PCall::send_forward, send_fwd(i));
  }
  if (remaining > 0) b.p2p(P2PCall::recv_forward, recv_fwd(warmup));
  for (int i = 0; i < remaining; ++i) {
    const int fwd = warmup + i, bwd = i;
    const bool last_iteration = i == remaining - 1;
    b.forward(fwd, 0);
    b.p2p(P2PCall::send_forward_recv_backward, concat(send_fwd(fwd), recv_bwd(bwd)));
    b.backward(bwd, 0);
    if (last_iteration) {
      b.p2p(P2PCall::send_backward, send_bwd(bwd));
      weight_after(bwd);
    } else {
      weight_after(bwd);
      b.p2p(P2PCall::send_backward_recv_forward, concat(send_bwd(bwd), recv_fwd(fwd + 1)));
    }
  }
  for (int i = 0; i < warmup && !spec.forward_only; ++i) {
    const int bwd = remaining + i;
    b.p2p(P2PCall::recv_backward, recv_bwd(bwd));
    b.backward(bwd, 0);
    b.p2p(P2PCall::send_backward, send_bwd(bwd));
    weight_after(bwd);
  }
  while (w_delay >= 0 && !spec.forward_only && next_w < m) b.weight(next_w++, 0);
  return b.take();
}

// Megatron's delay_wgrad_compute on a schedule of whole backwards: each backward split, its W
// after the p2p call right behind it when that call sends its input gradient (the gradient
// leaves before the weight GEMMs run), else right after it.
std::vector<ScheduleOp> delay_weight_grads(std::vector<ScheduleOp> ops) {
  std::vector<ScheduleOp> out;
  out.reserve(ops.size() * 3 / 2);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    out.push_back(ops[i]);
    if (ops[i].type != OpType::backward) continue;
    const ScheduleOp w{OpType::weight, ops[i].microbatch, ops[i].chunk, {}, {}};
    const bool sends = i + 1 < ops.size() && ops[i + 1].type == OpType::p2p &&
                       std::any_of(ops[i + 1].transfers.begin(), ops[i + 1].transfers.end(),
                                   [&](const Transfer& t) {
                                     return t.direction == P2PDirection::send_prev &&
                                            t.microbatch == w.microbatch && t.chunk == w.chunk;
                                   });
    if (sends) out.push_back(ops[++i]);
    out.push_back(w);
  }
  return out;
}

}  // namespace

// forward_backward_pipelining_with_interleaving (the path without overlap_p2p_comm) lives
// in schedule_interleaved.cpp.
std::vector<ScheduleOp> build_interleaved_schedule(const ScheduleSpec& spec, int pp_rank);

std::vector<ScheduleOp> make_rank_schedule(const ScheduleSpec& spec, int pp_rank) {
  validate_schedule_spec(spec);
  if (pp_rank < 0 || pp_rank >= spec.pp)
    throw ConfigError(
        "pp_rank", std::to_string(pp_rank),
        "must lie in [0, pipeline_model_parallel_size) = [0, " + std::to_string(spec.pp) + ")");
  const StageInfo st{pp_rank, spec.pp};
  auto delayed = [&](std::vector<ScheduleOp> ops) {
    return spec.delay_wgrad_compute && !spec.forward_only ? delay_weight_grads(std::move(ops))
                                                          : ops;
  };
  switch (spec.kind) {
    case ScheduleKind::none:
      return delayed(build_no_pipelining(spec));
    case ScheduleKind::gpipe:
      return delayed(build_gpipe(spec, st));
    case ScheduleKind::one_f_one_b:
      return delayed(build_one_f_one_b(spec, st));
    case ScheduleKind::interleaved:
      return delayed(build_interleaved_schedule(spec, pp_rank));
    case ScheduleKind::zb_h1:
      // Stage r's Ws trail its Bs by r microbatches (Qi et al. 2024, §3.1: "adjusts the
      // starting points of W depending on the number of warm-up microbatches").
      return build_one_f_one_b(spec, st, pp_rank);
  }
  throw std::logic_error("unknown schedule kind");
}

Schedule make_schedule(const ScheduleSpec& spec) {
  validate_schedule_spec(spec);
  Schedule s{spec, {}};
  for (int r = 0; r < spec.pp; ++r) s.ranks.push_back(make_rank_schedule(spec, r));
  return s;
}

}  // namespace tandem
