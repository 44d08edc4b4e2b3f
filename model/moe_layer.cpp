#include "model/moe_layer.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem {

void update_expert_bias(std::vector<float>& bias, const std::vector<float>& counts, float rate) {
  if (counts.size() != bias.size())
    throw std::invalid_argument("update_expert_bias: " + std::to_string(counts.size()) +
                                " counts for " + std::to_string(bias.size()) + " experts");
  if (bias.empty()) return;
  float sum = 0;
  for (float c : counts) sum += c;
  const float average = sum / static_cast<float>(counts.size());
  for (std::size_t e = 0; e < bias.size(); ++e) {
    const float offset = average - counts[e];
    bias[e] += static_cast<float>((offset > 0.0f) - (offset < 0.0f)) * rate;
  }
}

std::vector<std::int64_t> MoeLayer::take_step_counts() {
  std::vector<std::int64_t> out(static_cast<std::size_t>(options_.num_experts), 0);
  std::swap(out, step_counts_);
  step_counts_.assign(out.size(), 0);
  return out;
}

void add_counts(std::vector<std::int64_t>& sum, const std::vector<std::int64_t>& more) {
  sum.resize(std::max(sum.size(), more.size()), 0);
  for (std::size_t e = 0; e < more.size(); ++e) sum[e] += more[e];
}

std::int64_t MoeSplits::send_rows(int j) const {
  std::int64_t n = 0;
  for (int e = j * local_experts(); e < (j + 1) * local_experts(); ++e)
    n += count(ep_rank, tp_rank, e);
  return n;
}

std::int64_t MoeSplits::recv_rows(int i, int j) const {
  std::int64_t n = 0;
  for (int e = first_local(); e < first_local() + local_experts(); ++e) n += count(j, i, e);
  return n;
}

std::int64_t MoeSplits::held_rows(int i) const {
  std::int64_t n = 0;
  for (int j = 0; j < ep; ++j) n += recv_rows(i, j);
  return n;
}

std::int64_t MoeSplits::expert_rows(int e) const {
  std::int64_t n = 0;
  for (int i = 0; i < tp; ++i)
    for (int j = 0; j < ep; ++j) n += count(j, i, first_local() + e);
  return n;
}

namespace {

Tensor rows_of(const Tensor& t, std::int64_t first, std::int64_t rows) {
  const std::int64_t width = t.shape[1];
  return t.view(Shape{rows, width}, first * width);
}

// Row offsets of the chunks (tp rank i, ep rank j, local expert e) in the order the
// exchanges leave them (i, j, e) and in the experts' order (e, i, j).
struct ChunkOffsets {
  std::vector<std::int64_t> exchanged, by_expert, rows;  // indexed (i · ep + j) · E_l + e
};

ChunkOffsets chunk_offsets(const MoeSplits& s) {
  const int El = s.local_experts();
  const auto n = static_cast<std::size_t>(s.tp * s.ep * El);
  ChunkOffsets c{std::vector<std::int64_t>(n), std::vector<std::int64_t>(n),
                 std::vector<std::int64_t>(n)};
  auto at = [&](int i, int j, int e) { return (static_cast<std::size_t>(i) * s.ep + j) * El + e; };
  std::int64_t row = 0;
  for (int i = 0; i < s.tp; ++i)
    for (int j = 0; j < s.ep; ++j)
      for (int e = 0; e < El; ++e) {
        c.rows[at(i, j, e)] = s.count(j, i, s.first_local() + e);
        c.exchanged[at(i, j, e)] = row;
        row += c.rows[at(i, j, e)];
      }
  row = 0;
  for (int e = 0; e < El; ++e)
    for (int i = 0; i < s.tp; ++i)
      for (int j = 0; j < s.ep; ++j) {
        c.by_expert[at(i, j, e)] = row;
        row += c.rows[at(i, j, e)];
      }
  return c;
}

// Copies every chunk from one order into the other (Megatron's sort_chunks_by_idxs), in
// one op.
Tensor reorder_chunks(ModelEnv& env, const Tensor& from, const MoeSplits& s, bool to_experts) {
  if (s.local_experts() == 1 || s.tp * s.ep == 1) return from;
  const ChunkOffsets c = chunk_offsets(s);
  Tensor to = allocate_like(env, from.shape);
  std::vector<RowBlock> blocks;
  for (std::size_t k = 0; k < c.rows.size(); ++k)
    if (c.rows[k] > 0)
      blocks.push_back({to_experts ? c.exchanged[k] : c.by_expert[k],
                        to_experts ? c.by_expert[k] : c.exchanged[k], c.rows[k]});
  env.device.copy_rows(env.stream, {.from = from, .to = to, .blocks = blocks});
  return to;
}

// step(e, first, n) for every local expert e with rows: its n ≥ 1 rows start at `first`
// of the expert-major block.
template <typename Step>
void for_each_expert_block(const std::vector<std::int64_t>& rows, Step step) {
  std::int64_t first = 0;
  for (std::size_t e = 0; e < rows.size(); ++e) {
    if (rows[e] > 0) step(e, first, rows[e]);
    first += rows[e];
  }
}

std::vector<std::int64_t> elements(const std::vector<std::int64_t>& rows, std::int64_t width) {
  std::vector<std::int64_t> out;
  for (std::int64_t r : rows) out.push_back(r * width);
  return out;
}

}  // namespace

MoeLayer::MoeLayer(ParameterSet& params, const std::string& prefix, int hidden, const MoeOptions& o,
                   bool swiglu, bool sequence_parallel, int ep_size, int ep_rank, float init_std,
                   float out_std)
    : params_(params),
      options_(o),
      swiglu_(swiglu),
      hidden_(hidden),
      ep_size_(ep_size),
      ep_rank_(ep_rank) {
  if (o.num_experts < 1 || o.top_k < 1 || o.top_k > o.num_experts)
    throw std::invalid_argument("moe_router_topk " + std::to_string(o.top_k) +
                                " must lie in [1, num_experts = " + std::to_string(o.num_experts) +
                                "]");
  if (o.num_experts % ep_size != 0)
    throw std::invalid_argument("num_experts " + std::to_string(o.num_experts) +
                                " is not divisible by expert_model_parallel_size " +
                                std::to_string(ep_size));
  if (o.expert_bias) expert_bias_.assign(static_cast<std::size_t>(o.num_experts), 0.0f);
  step_counts_.assign(static_cast<std::size_t>(o.num_experts), 0);
  const std::int64_t C = hidden;
  // The router is replicated over tp; under sequence parallelism each tp rank routes its
  // own shard, so its gradient is all-reduced over tp (Megatron marks it so).
  router_ = params.add({prefix + "router.weight", Shape{o.num_experts, C}, ShardKind::replicated,
                        init_std, 0, true, false, sequence_parallel});
  const std::int64_t F = o.ffn;
  const std::int64_t fc1_rows = swiglu ? 2 * F : F;
  const ShardKind fc1_kind = swiglu ? ShardKind::glu_rows : ShardKind::rows;
  const int local = o.num_experts / ep_size;
  for (int e = ep_rank * local; e < (ep_rank + 1) * local; ++e) {
    const std::string p = prefix + "experts." + std::to_string(e) + ".";
    ParameterSpec fc1{p + "fc1.weight", Shape{fc1_rows, C}, fc1_kind, init_std, 0, true, false};
    ParameterSpec fc2{p + "fc2.weight", Shape{C, F}, ShardKind::columns, out_std, 0, true, false};
    fc1.expert = fc2.expert = true;
    fc1_.push_back(params.add(std::move(fc1)));
    fc2_.push_back(params.add(std::move(fc2)));
  }
  if (o.shared_ffn > 0) {
    const std::int64_t S = o.shared_ffn;
    shared_fc1_ = params.add({prefix + "shared_experts.fc1.weight", Shape{swiglu ? 2 * S : S, C},
                              fc1_kind, init_std, 0, true, false});
    shared_fc2_ = params.add({prefix + "shared_experts.fc2.weight", Shape{C, S}, ShardKind::columns,
                              out_std, 0, true, false});
  }
}

std::vector<int> MoeLayer::parameter_indices() const {
  std::vector<int> out{router_};
  out.insert(out.end(), fc1_.begin(), fc1_.end());
  out.insert(out.end(), fc2_.begin(), fc2_.end());
  for (int i : {shared_fc1_, shared_fc2_})
    if (i >= 0) out.push_back(i);
  return out;
}

Communicator& MoeLayer::ep(ModelEnv& env) const {
  if (env.ep == nullptr || env.ep->size() != ep_size_)
    throw std::logic_error("MoeLayer: the model environment has no expert-parallel group of " +
                           std::to_string(ep_size_));
  return *env.ep;
}

void MoeLayer::activation(ModelEnv& env, const Tensor& in, Tensor& out) {
  if (swiglu_)
    env.device.swiglu(env.stream, in, out);
  else
    env.device.gelu(env.stream, in, out);
}

void MoeLayer::activation_backward(ModelEnv& env, const Tensor& grad, const Tensor& in,
                                   Tensor& grad_in) {
  if (swiglu_)
    env.device.swiglu_backward(env.stream, grad, in, grad_in);
  else
    env.device.gelu_backward(env.stream, grad, in, grad_in);
}

Tensor MoeLayer::dispatch(ModelEnv& env, const Tensor& permuted, const MoeSplits& s) {
  const std::int64_t C = hidden_;
  std::vector<std::int64_t> send, recv;
  for (int j = 0; j < s.ep; ++j) {
    send.push_back(s.send_rows(j));
    recv.push_back(s.recv_rows(s.tp_rank, j));
  }
  const std::int64_t held = s.held_rows(s.tp_rank);
  Tensor received = allocate_like(env, Shape{held, C});
  auto exchange =
      ep(env).all_to_all_v(env.stream, permuted, elements(send, C), received, elements(recv, C));
  // Combined 1F1B: the other microbatch's task issues its work while this all-to-all runs.
  env.device.host_turns().yield();
  exchange->wait();
  Tensor gathered = received;
  if (s.tp > 1) {
    // Every tp rank's copies for these experts (a variable-size all-gather): send ours to
    // each member.
    Tensor tiled = allocate_like(env, Shape{held * s.tp, C});
    std::vector<std::int64_t> rows;
    std::vector<RowBlock> copies;
    std::int64_t total = 0;
    for (int i = 0; i < s.tp; ++i) {
      copies.push_back({0, i * held, held});
      rows.push_back(s.held_rows(i));
      total += rows.back();
    }
    env.device.copy_rows(env.stream, {.from = received, .to = tiled, .blocks = copies});
    gathered = allocate_like(env, Shape{total, C});
    env.tp
        .all_to_all_v(env.stream, tiled, std::vector<std::int64_t>(s.tp, held * C), gathered,
                      elements(rows, C))
        ->wait();
  }
  return reorder_chunks(env, gathered, s, true);
}

Tensor MoeLayer::combine(ModelEnv& env, const Tensor& expert_rows, const MoeSplits& s) {
  const std::int64_t C = hidden_;
  Tensor exchanged = reorder_chunks(env, expert_rows, s, false);
  const std::int64_t held = s.held_rows(s.tp_rank);
  Tensor reduced = exchanged;
  if (s.tp > 1) {
    // Each tp rank's partial sums of every member's rows back to that member, summed there
    // in tp rank order (a variable-size reduce-scatter).
    std::vector<std::int64_t> rows;
    for (int i = 0; i < s.tp; ++i) rows.push_back(s.held_rows(i));
    Tensor parts = allocate_like(env, Shape{held * s.tp, C});
    env.tp
        .all_to_all_v(env.stream, exchanged, elements(rows, C), parts,
                      std::vector<std::int64_t>(s.tp, held * C))
        ->wait();
    reduced = allocate_like(env, Shape{held, C});
    if (held > 0) {
      env.device.add(env.stream, rows_of(parts, 0, held), rows_of(parts, held, held), reduced);
      for (int i = 2; i < s.tp; ++i)
        env.device.add(env.stream, reduced, rows_of(parts, i * held, held), reduced);
    }
  }
  std::vector<std::int64_t> send, recv;
  std::int64_t back_rows = 0;
  for (int j = 0; j < s.ep; ++j) {
    send.push_back(s.recv_rows(s.tp_rank, j));
    recv.push_back(s.send_rows(j));
    back_rows += recv.back();
  }
  Tensor back = allocate_like(env, Shape{back_rows, C});
  auto exchange =
      ep(env).all_to_all_v(env.stream, reduced, elements(send, C), back, elements(recv, C));
  env.device.host_turns().yield();  // as in dispatch
  exchange->wait();
  return back;
}

std::vector<std::int64_t> MoeLayer::local_expert_rows(const MoeSplits& s) const {
  std::vector<std::int64_t> rows;
  for (int e = 0; e < s.local_experts(); ++e) rows.push_back(s.expert_rows(e));
  return rows;
}

void MoeLayer::experts_forward(ModelEnv& env, const Tensor& in,
                               const std::vector<std::int64_t>& rows, MoeActivations& a,
                               Tensor& y) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t total = in.shape[0];
  a.dispatched = in;
  a.fc1_out = allocate_like(env, Shape{total, params_[fc1_.front()].local_shape[0]});
  a.act = allocate_like(env, Shape{total, params_[fc2_.front()].local_shape[1]});
  for_each_expert_block(rows, [&](std::size_t e, std::int64_t first, std::int64_t n) {
    Tensor h = rows_of(a.fc1_out, first, n);
    d.gemm(
        st,
        {.a = rows_of(in, first, n), .b = params_[fc1_[e]].compute, .c = h, .transpose_b = true});
  });
  if (total > 0) activation(env, a.fc1_out, a.act);
  for_each_expert_block(rows, [&](std::size_t e, std::int64_t first, std::int64_t n) {
    Tensor out = rows_of(y, first, n);
    d.gemm(st, {.a = rows_of(a.act, first, n),
                .b = params_[fc2_[e]].compute,
                .c = out,
                .transpose_b = true});
  });
}

void MoeLayer::experts_backward(ModelEnv& env, const Tensor& dy,
                                const std::vector<std::int64_t>& rows, MoeActivations& a,
                                Tensor& d_in) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t total = dy.shape[0];
  // Per expert: the input gradient of a linear layer and its weight gradient (accumulated).
  auto linear_backward = [&](const Tensor& grad, const Tensor& input, Parameter& w,
                             Tensor& grad_input) {
    d.gemm(st, {.a = grad, .b = w.compute, .c = grad_input});
    accumulate_weight_grad(env, grad, input, w);
  };
  Tensor d_act = allocate_like(env, a.act.shape);
  for_each_expert_block(rows, [&](std::size_t e, std::int64_t first, std::int64_t n) {
    Tensor da = rows_of(d_act, first, n);
    linear_backward(rows_of(dy, first, n), rows_of(a.act, first, n), params_[fc2_[e]], da);
  });
  a.act = Tensor{};
  Tensor d_fc1 = allocate_like(env, a.fc1_out.shape);
  if (total > 0) activation_backward(env, d_act, a.fc1_out, d_fc1);
  d_act = a.fc1_out = Tensor{};
  for_each_expert_block(rows, [&](std::size_t e, std::int64_t first, std::int64_t n) {
    Tensor dx = rows_of(d_in, first, n);
    linear_backward(rows_of(d_fc1, first, n), rows_of(a.dispatched, first, n), params_[fc1_[e]],
                    dx);
  });
  a.dispatched = Tensor{};
}

// alltoall: this rank's copies to the experts' ranks and back (dispatch / combine).
Tensor MoeLayer::alltoall_forward(ModelEnv& env, const Tensor& x, MoeActivations& a) {
  Device& d = env.device;
  const std::int64_t N = x.shape[0], C = hidden_, W = a.route_top.shape[1];
  std::int64_t rows = 0;  // this rank's copies (N·k when dropless)
  for (int j = 0; j < a.splits.ep; ++j) rows += a.splits.send_rows(j);
  Tensor permuted = allocate_like(env, Shape{rows, C});
  a.row_of_copy = d.allocate(Shape{N * W}, DType::int64);
  a.source_of_row = d.allocate(Shape{rows}, DType::int64);
  d.moe_permute(env.stream, {.input = x,
                             .top = a.route_top,
                             .permuted = permuted,
                             .row_of_copy = a.row_of_copy,
                             .source_of_row = a.source_of_row,
                             .experts = options_.num_experts});
  Tensor in = dispatch(env, permuted, a.splits);
  permuted = Tensor{};
  Tensor y = allocate_like(env, in.shape);
  experts_forward(env, in, local_expert_rows(a.splits), a, y);
  a.expert_output = combine(env, y, a.splits);
  y = Tensor{};
  Tensor out = allocate_like(env, Shape{N, C});
  d.moe_unpermute(env.stream, {.expert_output = a.expert_output,
                               .gates = a.route_gates,
                               .row_of_copy = a.row_of_copy,
                               .output = out});
  return out;
}

void MoeLayer::alltoall_backward(ModelEnv& env, const Tensor& grad_out, MoeActivations& a,
                                 Tensor& dx, Tensor& d_gates) {
  Device& d = env.device;
  Tensor d_copies = allocate_like(env, a.expert_output.shape);
  d.moe_unpermute_backward(env.stream, {.grad_output = grad_out,
                                        .expert_output = a.expert_output,
                                        .gates = a.route_gates,
                                        .source_of_row = a.source_of_row,
                                        .row_of_copy = a.row_of_copy,
                                        .grad_expert_output = d_copies,
                                        .grad_gates = d_gates});
  a.expert_output = Tensor{};
  Tensor dy = dispatch(env, d_copies, a.splits);
  d_copies = Tensor{};
  Tensor d_rows = allocate_like(env, dy.shape);
  experts_backward(env, dy, local_expert_rows(a.splits), a, d_rows);
  dy = Tensor{};
  Tensor d_permuted = combine(env, d_rows, a.splits);
  d_rows = Tensor{};
  d.moe_permute_backward(
      env.stream, {.grad_permuted = d_permuted, .row_of_copy = a.row_of_copy, .grad_input = dx});
}

// allgather (Megatron's MoEAllGatherTokenDispatcher): every tp-ep member's tokens and
// routing gathered, the copies for this rank's experts taken from their permutation (a
// contiguous block: experts are numbered rank by rank), the other rows left at zero, and
// the outputs reduce-scattered back, which also sums the experts' tp partial sums.
Tensor MoeLayer::allgather_forward(ModelEnv& env, const Tensor& x, MoeActivations& a) {
  Device& d = env.device;
  Stream& st = env.stream;
  Communicator& group = tp_ep(env);
  const std::int64_t N = x.shape[0], C = hidden_, W = a.route_top.shape[1], G = group.size();
  Tensor xg = allocate_like(env, Shape{N * G, C});
  group.all_gather(st, x, xg)->wait();
  Tensor top = d.allocate(Shape{N * G, W}, DType::int32);
  group.all_gather(st, a.route_top, top)->wait();
  a.gathered_gates = allocate_fp32(d, Shape{N * G, W});
  group.all_gather(st, a.route_gates, a.gathered_gates)->wait();
  std::int64_t copies = 0;  // every member's copies (N·G·k when dropless)
  for (std::int64_t c : a.splits.counts) copies += c;
  a.permuted = allocate_like(env, Shape{copies, C});
  a.row_of_copy = d.allocate(Shape{N * G * W}, DType::int64);
  a.source_of_row = d.allocate(Shape{copies}, DType::int64);
  d.moe_permute(st, {.input = xg,
                     .top = top,
                     .permuted = a.permuted,
                     .row_of_copy = a.row_of_copy,
                     .source_of_row = a.source_of_row,
                     .experts = options_.num_experts});
  xg = top = Tensor{};
  const auto [first, rows] = local_block(a.splits);
  a.expert_output = allocate_like(env, a.permuted.shape);
  d.fill(st, a.expert_output, 0.0f);
  Tensor y = rows_of(a.expert_output, first, rows);
  experts_forward(env, rows_of(a.permuted, first, rows), local_expert_rows(a.splits), a, y);
  Tensor partial = allocate_like(env, Shape{N * G, C});
  d.moe_unpermute(st, {.expert_output = a.expert_output,
                       .gates = a.gathered_gates,
                       .row_of_copy = a.row_of_copy,
                       .output = partial});
  Tensor out = allocate_like(env, Shape{N, C});
  group.reduce_scatter(st, partial, out, ReduceOp::sum)->wait();
  return out;
}

void MoeLayer::allgather_backward(ModelEnv& env, const Tensor& grad_out, MoeActivations& a,
                                  Tensor& dx, Tensor& d_gates) {
  Device& d = env.device;
  Stream& st = env.stream;
  Communicator& group = tp_ep(env);
  const std::int64_t N = grad_out.shape[0], C = hidden_, W = d_gates.shape[1], G = group.size();
  Tensor dg = allocate_like(env, Shape{N * G, C});
  group.all_gather(st, grad_out, dg)->wait();
  Tensor d_copies = allocate_like(env, a.expert_output.shape);
  Tensor d_gates_all = allocate_fp32(d, Shape{N * G, W});
  d.moe_unpermute_backward(st, {.grad_output = dg,
                                .expert_output = a.expert_output,
                                .gates = a.gathered_gates,
                                .source_of_row = a.source_of_row,
                                .row_of_copy = a.row_of_copy,
                                .grad_expert_output = d_copies,
                                .grad_gates = d_gates_all});
  dg = a.expert_output = a.gathered_gates = Tensor{};
  // Each member's gates got this rank's experts' share of their gradient.
  group.reduce_scatter(st, d_gates_all, d_gates, ReduceOp::sum)->wait();
  d_gates_all = Tensor{};
  const auto [first, rows] = local_block(a.splits);
  Tensor d_permuted = allocate_like(env, d_copies.shape);
  d.fill(st, d_permuted, 0.0f);
  Tensor d_rows = rows_of(d_permuted, first, rows);
  experts_backward(env, rows_of(d_copies, first, rows), local_expert_rows(a.splits), a, d_rows);
  d_copies = a.permuted = Tensor{};
  Tensor dxg = allocate_like(env, Shape{N * G, C});
  d.moe_permute_backward(
      st, {.grad_permuted = d_permuted, .row_of_copy = a.row_of_copy, .grad_input = dxg});
  d_permuted = Tensor{};
  group.reduce_scatter(st, dxg, dx, ReduceOp::sum)->wait();
}

std::pair<std::int64_t, std::int64_t> MoeLayer::local_block(const MoeSplits& s) const {
  std::int64_t first = 0, rows = 0;
  for (int e = 0; e < s.experts; ++e) {
    std::int64_t all = 0;
    for (int j = 0; j < s.ep; ++j)
      for (int i = 0; i < s.tp; ++i) all += s.count(j, i, e);
    if (e < s.first_local())
      first += all;
    else if (e < s.first_local() + s.local_experts())
      rows += all;
  }
  return {first, rows};
}

Communicator& MoeLayer::tp_ep(ModelEnv& env) const {
  if (env.tp_ep == nullptr || env.tp_ep->size() != env.tp.size() * ep_size_)
    throw std::logic_error("MoeLayer: the allgather dispatcher needs the tp-ep group of " +
                           std::to_string(env.tp.size() * ep_size_) + " ranks");
  return *env.tp_ep;
}

Tensor MoeLayer::forward(ModelEnv& env, const Tensor& x, MoeActivations& a) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t N = x.shape[0], E = options_.num_experts, k = options_.top_k;
  a.input = x;
  // Router.
  Tensor logits = linear_forward(env, x, params_[router_], nullptr);
  a.probs = allocate_fp32(d, Shape{N, E});
  a.top = d.allocate(Shape{N, k}, DType::int32);
  a.gates = allocate_fp32(d, Shape{N, k});
  std::vector<std::int64_t> local(static_cast<std::size_t>(E));
  // The aux loss counts the plain top-k (no bias, no groups, no dropping): its own counts
  // when anything made the dispatch's differ.
  const bool dropping = options_.capacity_factor > 0;
  const bool aux_own =
      options_.aux_loss_coeff > 0 && (dropping || options_.num_groups > 0 || !expert_bias_.empty());
  std::vector<std::int64_t> aux_local(aux_own ? static_cast<std::size_t>(E) : 0);
  d.moe_router(st,
               {.logits = logits,
                .probs = a.probs,
                .top = a.top,
                .gates = a.gates,
                .pre_softmax = options_.pre_softmax,
                .force_balance = options_.force_balance,
                .score_function = options_.score_function,
                .num_groups = options_.num_groups,
                .group_topk = options_.group_topk,
                .topk_scaling_factor = options_.topk_scaling_factor,
                .expert_bias = expert_bias_,
                .aux_tokens_per_expert = aux_local},
               local);
  logits = Tensor{};
  a.route_top = a.top;
  a.route_gates = a.gates;
  if (dropping) {
    // Megatron's apply_router_token_dropping on this rank's tokens: the capacity counts the
    // rank's own N (its sequence shard under sequence parallelism), as Megatron's router
    // sees it.
    const std::int64_t W = options_.pad_to_capacity ? k + E : k;
    a.route_top = d.allocate(Shape{N, W}, DType::int32);
    a.route_gates = allocate_fp32(d, Shape{N, W});
    d.moe_drop_tokens(st,
                      {.top = a.top,
                       .gates = a.gates,
                       .dispatch_top = a.route_top,
                       .dispatch_gates = a.route_gates,
                       .capacity = moe_expert_capacity(N, k, E, options_.capacity_factor),
                       .policy = options_.drop_policy,
                       .pad_to_capacity = options_.pad_to_capacity},
                      local);
  }
  // Who sends whom what: the tp group's counts, then every ep member's.
  Communicator& expert = ep(env);
  MoeSplits& s = a.splits;
  s = MoeSplits{expert.size(), env.tp.size(),       expert.rank(),
                env.tp.rank(), static_cast<int>(E), {}};
  std::vector<std::int64_t> tp_counts(static_cast<std::size_t>(s.tp * E));
  env.tp.all_gather_counts(st, local, tp_counts);
  s.counts.resize(static_cast<std::size_t>(s.ep) * tp_counts.size());
  expert.all_gather_counts(st, tp_counts, s.counts);
  // The load-balancing loss counts the whole sequence: the tp shards (and cp chunks).
  a.sequence_counts.assign(static_cast<std::size_t>(E), 0);
  if (aux_own) {
    std::vector<std::int64_t> tp_aux(static_cast<std::size_t>(s.tp * E));
    env.tp.all_gather_counts(st, aux_local, tp_aux);
    for (int i = 0; i < s.tp; ++i)
      for (int e = 0; e < E; ++e)
        a.sequence_counts[e] += tp_aux[static_cast<std::size_t>(i * E + e)];
  } else {
    for (int i = 0; i < s.tp; ++i)
      for (int e = 0; e < E; ++e) a.sequence_counts[e] += s.count(s.ep_rank, i, e);
  }
  a.sequence_tokens = N * s.tp;
  if (env.cp != nullptr) {
    std::vector<std::int64_t> cp_counts(a.sequence_counts.size() * env.cp->size());
    env.cp->all_gather_counts(st, a.sequence_counts, cp_counts);
    for (std::size_t e = 0; e < a.sequence_counts.size(); ++e) {
      a.sequence_counts[e] = 0;
      for (int r = 0; r < env.cp->size(); ++r)
        a.sequence_counts[e] += cp_counts[r * a.sequence_counts.size() + e];
    }
    a.sequence_tokens *= env.cp->size();
  }
  // Dispatch, the local experts, and back.
  Tensor out =
      options_.allgather_dispatcher ? allgather_forward(env, x, a) : alltoall_forward(env, x, a);
  if (shared_fc1_ >= 0) {
    a.shared_fc1_out = column_parallel_forward(env, x, params_[shared_fc1_], nullptr);
    a.shared_act =
        allocate_like(env, Shape{a.shared_fc1_out.shape[0], params_[shared_fc2_].local_shape[1]});
    activation(env, a.shared_fc1_out, a.shared_act);
    Tensor shared = row_parallel_forward(env, a.shared_act, params_[shared_fc2_], nullptr);
    d.add(st, out, shared, out);
  }
  return out;
}

Tensor MoeLayer::backward(ModelEnv& env, const Tensor& grad_out, MoeActivations& a,
                          float loss_scale) {
  Device& d = env.device;
  Stream& st = env.stream;
  const std::int64_t N = a.input.shape[0], C = hidden_, E = options_.num_experts,
                     k = options_.top_k;
  const MoeSplits& s = a.splits;
  routed_.resize(static_cast<std::size_t>(E), 0);
  for (int e = 0; e < E; ++e) {
    routed_[e] += s.count(s.ep_rank, s.tp_rank, e);
    step_counts_[static_cast<std::size_t>(e)] += s.count(s.ep_rank, s.tp_rank, e);
  }
  Tensor dx = allocate_like(env, Shape{N, C});
  // The shared expert.
  Tensor d_shared;
  if (shared_fc1_ >= 0) {
    Tensor d_act =
        row_parallel_backward(env, a.shared_act, grad_out, params_[shared_fc2_], nullptr);
    Tensor d_h = allocate_like(env, a.shared_fc1_out.shape);
    activation_backward(env, d_act, a.shared_fc1_out, d_h);
    d_act = a.shared_act = Tensor{};
    d_shared = column_parallel_backward(env, a.input, d_h, params_[shared_fc1_], nullptr);
    a.shared_fc1_out = Tensor{};
  }
  // The combine, the local experts and the dispatch, backward.
  Tensor d_gates = allocate_fp32(d, a.route_gates.shape);  // (N, W): the dispatch's slots
  if (options_.allgather_dispatcher)
    allgather_backward(env, grad_out, a, dx, d_gates);
  else
    alltoall_backward(env, grad_out, a, dx, d_gates);
  // The router: the gates' gradient and the load-balancing loss's.
  std::vector<float> aux;
  if (options_.aux_loss_coeff > 0 && a.sequence_tokens > 0) {
    // The LM loss's scale divides by cp as well (each cp rank's loss is a mean over its
    // chunks, summed over dp × cp); the aux loss is one per sequence, whose gradient the cp
    // ranks share, so it takes the cp factor back.
    const double cp = env.cp != nullptr ? static_cast<double>(env.cp->size()) : 1.0;
    const double T = static_cast<double>(a.sequence_tokens);
    const double scale = static_cast<double>(loss_scale) * cp * options_.aux_loss_coeff *
                         static_cast<double>(E) / (static_cast<double>(k) * T * T);
    for (std::int64_t f : a.sequence_counts)
      aux.push_back(static_cast<float>(scale * static_cast<double>(f)));
  }
  Tensor d_logits = allocate_like(env, Shape{N, E});
  d.moe_router_backward(st, {.probs = a.probs,
                             .top = a.top,
                             .gates = a.gates,
                             .grad_gates = d_gates,
                             .aux_grad = aux,
                             .grad_logits = d_logits,
                             .pre_softmax = options_.pre_softmax,
                             .score_function = options_.score_function,
                             .topk_scaling_factor = options_.topk_scaling_factor});
  Tensor d_router = linear_input_grad(env, d_logits, params_[router_]);
  linear_weight_grad(env, a.input, d_logits, params_[router_], nullptr);
  d.add(st, dx, d_router, dx);
  if (shared_fc1_ >= 0) d.add(st, dx, d_shared, dx);
  a = MoeActivations{};
  return dx;
}

}  // namespace tandem
