#include "model/context_parallel_attention.hpp"

#include <array>
#include <optional>
#include <stdexcept>

namespace tandem {
namespace {

// This rank's two chunks and views by sequence rows of the grouped QKV, of a keys-and-
// values block (rows, B, G, 2, head_dim), of the output and of the lse.
struct Chunks {
  std::int64_t local = 0, chunk = 0, cp = 1, rank = 0;
  std::int64_t B = 0, G = 0, P = 0, HD = 0;
  std::int64_t position(std::int64_t owner, int j) const {
    return j == 0 ? owner * chunk : (2 * cp - 1 - owner) * chunk;
  }
  Tensor q_rows(const Tensor& qkv, int j) const {
    return qkv.view(Shape{chunk, B, G, P + 2, HD}, j * chunk * B * G * (P + 2) * HD);
  }
  Shape kv_shape(std::int64_t rows) const { return Shape{rows, B, G, 2, HD}; }
  Tensor kv_rows(const Tensor& kv, std::int64_t first, std::int64_t rows) const {
    return kv.view(kv_shape(rows), first * B * G * 2 * HD);
  }
  Tensor output(const Tensor& out, int j) const {
    return out.view(Shape{chunk, B, G * P, HD}, j * chunk * B * G * P * HD);
  }
  Tensor lse(const Tensor& lse, int j) const {
    return lse.view(Shape{B, G * P, chunk}, j * B * G * P * chunk);
  }
};

Chunks chunks_of(const ModelEnv& env, const Shape& grouped) {
  if (grouped.rank() != 5 || grouped[0] % 2 != 0)
    throw std::invalid_argument(
        "context-parallel attention: expected the grouped QKV of an even "
        "number of sequence rows, got " +
        grouped.to_string());
  return {.local = grouped[0],
          .chunk = grouped[0] / 2,
          .cp = env.cp->size(),
          .rank = env.cp->rank(),
          .B = grouped[1],
          .G = grouped[2],
          .P = grouped[3] - 2,
          .HD = grouped[4]};
}

// The keys and values of a grouped QKV into a block of their own.
Tensor take_keys_and_values(ModelEnv& env, const Chunks& k, const Tensor& qkv) {
  Tensor kv = allocate_like(env, k.kv_shape(k.local));
  const std::int64_t rows = k.local * k.B * k.G;
  Tensor to = kv.view(Shape{rows, 2 * k.HD});
  env.device.copy_columns(env.stream, {.from = qkv.view(Shape{rows, (k.P + 2) * k.HD}),
                                       .to = to,
                                       .from_column = k.P * k.HD,
                                       .width = 2 * k.HD});
  return kv;
}

// A block's key and value gradients added into the grouped QKV's gradient.
void add_key_value_grads(ModelEnv& env, const Chunks& k, const Tensor& dkv, Tensor& dqkv) {
  const std::int64_t rows = k.local * k.B * k.G;
  Tensor to = dqkv.view(Shape{rows, (k.P + 2) * k.HD});
  env.device.copy_columns(env.stream, {.from = dkv.view(Shape{rows, 2 * k.HD}),
                                       .to = to,
                                       .to_column = k.P * k.HD,
                                       .width = 2 * k.HD,
                                       .accumulate = true});
}

// The cp ranks' key/value blocks (rank q's rows hold its chunks q and 2·cp − 1 − q) put in
// sequence order, or with `to_ranks` back into the ranks' order.
void reorder(ModelEnv& env, const Chunks& k, const Tensor& from, Tensor& to, bool to_ranks) {
  for (std::int64_t q = 0; q < k.cp; ++q)
    for (int j = 0; j < 2; ++j) {
      const std::int64_t by_rank = q * k.local + j * k.chunk, in_sequence = k.position(q, j);
      Tensor dst = k.kv_rows(to, to_ranks ? by_rank : in_sequence, k.chunk);
      env.device.copy(env.stream, k.kv_rows(from, to_ranks ? in_sequence : by_rank, k.chunk), dst);
    }
}

// Queries at q_position meet keys at k_position: causal on the diagonal, whole before it.
std::optional<AttentionMaskKind> pair_mask(std::int64_t q_position, std::int64_t k_position) {
  if (k_position > q_position) return std::nullopt;
  return k_position == q_position ? AttentionMaskKind::causal : AttentionMaskKind::none;
}

// Sends `block` to the next rank of the ring and receives the previous rank's into `into`.
std::unique_ptr<Work> pass_on(ModelEnv& env, const Chunks& k, const Tensor& block, Tensor& into) {
  const std::array<P2POp, 2> ops{
      P2POp{P2POp::Kind::send, block, static_cast<int>((k.rank + 1) % k.cp)},
      P2POp{P2POp::Kind::recv, into, static_cast<int>((k.rank + k.cp - 1) % k.cp)}};
  return env.cp->batch_p2p(env.stream, ops);
}

// Walks the ring from this rank's own block: at each step `visit(block, owner)` sees the
// key/value block held (rank owner's) while the next one travels from the previous rank.
template <typename Visit>
void around_the_ring(ModelEnv& env, const Chunks& k, Tensor block, Visit visit) {
  for (std::int64_t step = 0; step < k.cp; ++step) {
    std::unique_ptr<Work> next_arrives;
    Tensor next;
    if (step + 1 < k.cp) {
      next = allocate_like(env, block.shape);
      next_arrives = pass_on(env, k, block, next);
    }
    visit(block, (k.rank - step + k.cp) % k.cp);
    if (next_arrives) {
      next_arrives->wait();
      block = next;
    }
  }
}

// The pairs of this rank's query chunk j and rank owner's key chunk l that see each other,
// with their mask and positions: visit(j, l, mask, q_position, k_position).
template <typename Visit>
void visible_pairs(const Chunks& k, std::int64_t owner, Visit visit) {
  for (int j = 0; j < 2; ++j)
    for (int l = 0; l < 2; ++l) {
      const std::int64_t q_at = k.position(k.rank, j), k_at = k.position(owner, l);
      if (const auto mask = pair_mask(q_at, k_at)) visit(j, l, *mask, q_at, k_at);
    }
}

}  // namespace

CpCommType parse_cp_comm_type(const std::string& name) {
  if (name == "p2p") return CpCommType::p2p;
  if (name == "all_gather") return CpCommType::all_gather;
  throw std::invalid_argument("cp_comm_type \"" + name + "\": the step runs p2p or all_gather");
}

ContextAttentionSaved context_parallel_attention_forward(ModelEnv& env, CpCommType comm,
                                                         const Tensor& qkv) {
  Device& d = env.device;
  Stream& s = env.stream;
  const Chunks k = chunks_of(env, qkv.shape);
  ContextAttentionSaved saved;
  saved.output = allocate_like(env, Shape{k.local * k.B, k.G * k.P * k.HD});
  saved.lse = allocate_fp32(d, Shape{2, k.B, k.G * k.P, k.chunk});
  Tensor mine = take_keys_and_values(env, k, qkv);
  if (comm == CpCommType::all_gather) {
    Tensor gathered = allocate_like(env, k.kv_shape(k.cp * k.local));
    env.cp->all_gather(s, mine, gathered)->wait();
    saved.kv = allocate_like(env, gathered.shape);
    reorder(env, k, gathered, saved.kv, false);
    for (int j = 0; j < 2; ++j) {
      const std::int64_t at = k.position(k.rank, j);
      const Tensor q = k.q_rows(qkv, j), kv = k.kv_rows(saved.kv, 0, at + k.chunk);
      Tensor out = k.output(saved.output, j), lse = k.lse(saved.lse, j);
      d.flash_attention(s, {q, kv, out, lse, AttentionMaskKind::causal, at, 0});
    }
    return saved;
  }
  std::array<bool, 2> started{false, false};
  around_the_ring(env, k, mine, [&](const Tensor& block, std::int64_t owner) {
    visible_pairs(k, owner,
                  [&](int j, int l, AttentionMaskKind mask, std::int64_t q_at, std::int64_t k_at) {
                    const Tensor q = k.q_rows(qkv, j), kv = k.kv_rows(block, l * k.chunk, k.chunk);
                    Tensor out = k.output(saved.output, j), lse = k.lse(saved.lse, j);
                    d.flash_attention(s, {q, kv, out, lse, mask, q_at, k_at, started[j]});
                    started[j] = true;
                  });
  });
  saved.kv = mine;
  return saved;
}

Tensor context_parallel_attention_backward(ModelEnv& env, CpCommType comm,
                                           const Tensor& grad_output, const Tensor& qkv,
                                           const ContextAttentionSaved& saved) {
  Device& d = env.device;
  Stream& s = env.stream;
  const Chunks k = chunks_of(env, qkv.shape);
  // Query gradients add up over the key blocks; key/value slots get theirs at the end.
  Tensor dqkv = allocate_like(env, qkv.shape);
  d.fill(s, dqkv, 0.0f);
  auto backward = [&](int j, const Tensor& kv, Tensor& dkv, AttentionMaskKind mask,
                      std::int64_t q_at, std::int64_t k_at) {
    const Tensor d_out = k.output(grad_output, j), q = k.q_rows(qkv, j);
    const Tensor out = k.output(saved.output, j), lse = k.lse(saved.lse, j);
    Tensor dq = k.q_rows(dqkv, j);
    d.flash_attention_backward(s, {d_out, q, kv, out, lse, dq, dkv, mask, q_at, k_at, true});
  };
  if (comm == CpCommType::all_gather) {
    Tensor d_all = allocate_like(env, saved.kv.shape);
    d.fill(s, d_all, 0.0f);
    for (int j = 0; j < 2; ++j) {
      const std::int64_t at = k.position(k.rank, j);
      const Tensor kv = k.kv_rows(saved.kv, 0, at + k.chunk);
      Tensor dkv = k.kv_rows(d_all, 0, at + k.chunk);
      backward(j, kv, dkv, AttentionMaskKind::causal, at, 0);
    }
    // Back to the ranks' order, then each rank's rows summed over the group.
    Tensor d_gathered = allocate_like(env, d_all.shape);
    reorder(env, k, d_all, d_gathered, true);
    d_all = Tensor{};
    Tensor d_mine = allocate_like(env, k.kv_shape(k.local));
    env.cp->reduce_scatter(s, d_gathered, d_mine, ReduceOp::sum)->wait();
    add_key_value_grads(env, k, d_mine, dqkv);
    return dqkv;
  }
  // The blocks go round again. Each rank adds its share of a block's gradient to what the
  // block's earlier holders gave it and passes the sum on, as the block itself moves on:
  // both passes run while the next block is attended to. After cp steps every block's
  // gradient is back with its owner.
  Tensor d_sending, d_arriving;     // the held block's gradient passed on; the next one's
  std::unique_ptr<Work> d_arrives;  // its pass from the previous rank
  around_the_ring(env, k, saved.kv, [&](const Tensor& block, std::int64_t owner) {
    Tensor d_block = allocate_like(env, block.shape);
    d.fill(s, d_block, 0.0f);
    visible_pairs(k, owner,
                  [&](int j, int l, AttentionMaskKind mask, std::int64_t q_at, std::int64_t k_at) {
                    const Tensor kv = k.kv_rows(block, l * k.chunk, k.chunk);
                    Tensor dkv = k.kv_rows(d_block, l * k.chunk, k.chunk);
                    backward(j, kv, dkv, mask, q_at, k_at);
                  });
    if (d_arrives) {
      d_arrives->wait();
      d.add(s, d_block, d_arriving, d_block);
    }
    // Both ends of a pass stay allocated until it is waited for.
    d_sending = d_block;
    d_arriving = allocate_like(env, block.shape);
    d_arrives = pass_on(env, k, d_sending, d_arriving);
  });
  d_arrives->wait();
  add_key_value_grads(env, k, d_arriving, dqkv);
  return dqkv;
}

}  // namespace tandem
