// Device, Stream and Event: the compute half of the step program's contract.
// The model issues named, typed ops into streams; each binding decides what an op does:
// the cpu binding runs it (Eigen and our kernels), the cuda binding launches it
// (cuBLAS and our CUDA kernels), the sim binding prices it from its shapes and dtype
// and advances simulated time. Streams and events have CUDA semantics on all three:
// ops on one stream run in order, a stream can wait on an event recorded on another,
// and that is the only way the step program expresses overlap.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/host_turns.hpp"
#include "core/memory_tracker.hpp"
#include "core/tensor.hpp"

namespace tandem {

class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // block the host until the recorded work is done
  virtual bool query() = 0;        // true when the recorded work is done
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual std::string_view name() const = 0;  // "compute", "tp comm", "dp comm", …
  virtual void record(Event& event) = 0;      // event fires when work issued so far is done
  virtual void wait(Event& event) = 0;        // later work waits for the event
  virtual void synchronize() = 0;             // block the host until the stream drains
};

// C = alpha · op(A) · op(B) + beta · C, row-major; op transposes when asked. beta = 1
// accumulates into C (the weight-gradient GEMMs into the fp32 main-grad buffer).
// Epilogues, what Transformer Engine's Linear asks of cuBLASLt (and a binding without them
// runs as the GEMM then Device::bias_add / bias_grad, the same math):
//   bias       (N) added to every row of C; beta must be 0 (C is written)
//   bias_grad  (M) accumulated with the column sums of A held (K, M) — transpose_a — i.e.
//              a weight-gradient GEMM dW = dYᵀ·X reads its bias gradient off dY
struct GemmArgs {
  const Tensor& a;  // (M, K), or (K, M) when transpose_a
  const Tensor& b;  // (K, N), or (N, K) when transpose_b
  Tensor& c;        // (M, N)
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  const Tensor* bias = nullptr;  // (N), compute dtype
  Tensor* bias_grad = nullptr;   // (M), fp32
};

// M, N, K of a GEMM, after checking that the operands conform, C holds M·N and the
// epilogues' rules hold; std::invalid_argument naming what does not.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
};
GemmShape check_gemm(const GemmArgs& a);

struct LayerNormArgs {
  const Tensor& input;  // (rows, C)
  const Tensor& gamma;  // (C)
  const Tensor& beta;   // (C)
  Tensor& output;       // (rows, C)
  Tensor& mean;         // (rows) saved for backward
  Tensor& rstd;         // (rows) saved for backward
  float epsilon = 1e-5f;
};

struct LayerNormBackwardArgs {
  const Tensor& grad_output;  // (rows, C)
  const Tensor& input;        // (rows, C)
  const Tensor& gamma;        // (C)
  const Tensor& mean;         // (rows)
  const Tensor& rstd;         // (rows)
  Tensor& grad_input;         // (rows, C), written
  Tensor& grad_gamma;         // (C), accumulated into
  Tensor& grad_beta;          // (C), accumulated into
};

// Megatron's attention dropout on the softmax probabilities before P·V. The mask is not
// stored: every binding draws it from the stream of (seed, microbatch, layer) with
// kernels/math/dropout.hpp, so forward, recomputation and backward see the same one.
// Element (b, h, i, j) of a rank is element ((b·heads_total + head_offset + h)·T + i)·T + j
// of the stream, whatever the tensor-parallel split.
struct AttentionDropout {
  float p = 0;  // probability of dropping; 0: no dropout
  std::uint64_t seed = 0;
  std::uint64_t microbatch = 0;  // the microbatch's identity (its first sample's index)
  std::uint64_t layer = 0;
  std::int64_t head_offset = 0;  // this rank's first head among all
  std::int64_t heads_total = 0;  // heads over the tensor-parallel group; 0: this rank's
};

// Megatron's hidden dropout (--hidden-dropout) on a (rows, C) activation, after the
// embedding and on each layer's attention and MLP output. As AttentionDropout, no mask is
// stored: element (r, c) of this rank is element (row_offset + r)·C + c of the stream of
// (seed, microbatch, site), the same whatever the tensor or pipeline split.
struct HiddenDropout {
  float p = 0;  // probability of dropping; 0: none
  std::uint64_t seed = 0;
  std::uint64_t microbatch = 0;  // the microbatch's identity (its first sample's index)
  std::uint64_t site = 0;        // which dropout: the model's numbering (model/tensor_parallel.hpp)
  std::int64_t row_offset = 0;   // this rank's first row among the sequence's (sequence parallel)
};

struct BiasDropoutAddArgs {
  const Tensor& input;     // (rows, C)
  const Tensor* bias;      // (C), or null: no bias
  const Tensor& residual;  // (rows, C)
  Tensor& output;          // (rows, C)
  HiddenDropout dropout{};
};

// Causal scaled-dot-product attention over the heads this tensor-parallel rank holds.
// Activations are sequence-first, Megatron's [s, b, h]: row t·B + b of the (T·B, C) matrix
// holds position t of sequence b, so sequence parallelism shards contiguous rows.
// Shapes come from qkv; output and gradients need only the matching element count.
struct AttentionArgs {
  const Tensor& qkv;  // (T, B, 3, heads, head_dim)
  Tensor& output;     // (T, B, heads, head_dim)
  Tensor& probs;      // (B, heads, T, T) softmax saved for backward (before dropout)
  AttentionDropout dropout{};
};

struct AttentionBackwardArgs {
  const Tensor& grad_output;   // (T, B, heads, head_dim)
  const Tensor& qkv;           // (T, B, 3, heads, head_dim)
  const Tensor& probs;         // (B, heads, T, T)
  Tensor& grad_qkv;            // (T, B, 3, heads, head_dim), written
  AttentionDropout dropout{};  // the forward's
};

// Llama-style layers (Megatron's --normalization RMSNorm): y = x·rstd·γ, no β.
struct RmsNormArgs {
  const Tensor& input;  // (rows, C)
  const Tensor& gamma;  // (C)
  Tensor& output;       // (rows, C)
  Tensor& rstd;         // (rows) fp32, saved for backward
  float epsilon = 1e-5f;
};

struct RmsNormBackwardArgs {
  const Tensor& grad_output;  // (rows, C)
  const Tensor& input;        // (rows, C)
  const Tensor& gamma;        // (C)
  const Tensor& rstd;         // (rows)
  Tensor& grad_input;         // (rows, C), written
  Tensor& grad_gamma;         // (C), accumulated into
};

// Rotary position embedding (Megatron's --position-embedding-type rope, "rotate half"),
// in place on the fused QKV activation in Megatron's grouped layout
// (T, B, groups, heads_per_group + 2, head_dim): the first `rotate_per_group` heads of
// each group (its queries and its key) are rotated, the value passes. Backward is the same
// op with inverse = true on the gradient (the rotation is orthogonal).
// Multi-latent attention's decoupled RoPE rotates only the positional features of a head,
// [first_feature, first_feature + rotary_dim), pairing adjacent features (interleaved;
// kernels/math/rope.hpp says why that is Megatron's mla_rotary_interleaved).
struct RopeArgs {
  Tensor& x;                          // (T, B, groups, per_group, head_dim)
  std::int64_t rotate_per_group = 0;  // heads rotated at the front of each group
  std::int64_t rotary_dim = 0;        // head_dim · rotary_percent, even
  float base = 10000.0f;              // Megatron's rotary_base
  std::int64_t position_offset = 0;   // row t is position position_offset + t
  bool inverse = false;
  std::int64_t first_feature = 0;  // the rotated features start here
  bool interleaved = false;        // pairs (2i, 2i + 1), not the halves (i, i + rotary_dim / 2)
};

// Which (query, key) pairs a fused attention call lets through, by absolute positions.
enum class AttentionMaskKind {
  causal,  // key position ≤ query position
  none,    // all (a key block wholly in the past, as ring attention meets them)
};

// Fused (flash) grouped-query attention, Megatron's --use-flash-attn: no (T, T) matrix is
// kept; forward saves the per-row log-sum-exp and backward recomputes the probabilities.
// Queries come from q_source in the grouped QKV layout (T, B, groups, heads_per_group + 2,
// head_dim); keys and values from kv_source, in the same layout (the same tensor for
// self-attention) or holding keys and values only (Tk, B, groups, 2, head_dim), as ring
// attention passes them around a context-parallel group; at positions q_offset + i and
// k_offset + j. With `accumulate`, output and lse already hold the result over other keys
// for the same queries, and the call extends it (ring attention's merge of blocks).
//
// Multi-latent attention's value heads are narrower than its query and key heads (128
// against 192 in DeepSeek-V3): with v_head_dim set the sources are 4-d, each (t, b, group)
// one row of features [P queries of head_dim | key of head_dim | value of v_head_dim] —
// q_source (Tq, B, G, (P + 1)·head_dim + v_head_dim), kv_source the same or its key and
// value only (Tk, B, G, head_dim + v_head_dim) — the output is (Tq, B, G·P, v_head_dim),
// P comes from the lse and head_dim from the row width. Scores are scaled by
// 1/sqrt(head_dim) either way.
struct FlashAttentionArgs {
  const Tensor& q_source;   // (Tq, B, G, P + 2, head_dim)
  const Tensor& kv_source;  // (Tk, B, G, P + 2, head_dim) or (Tk, B, G, 2, head_dim)
  Tensor& output;           // (Tq, B, G·P, head_dim)
  Tensor& lse;              // (B, G·P, Tq) fp32 log-sum-exp, saved for backward
  AttentionMaskKind mask = AttentionMaskKind::causal;
  std::int64_t q_offset = 0;
  std::int64_t k_offset = 0;
  bool accumulate = false;
  std::int64_t v_head_dim = 0;  // 0: the values are head_dim wide (the 5-d layouts)
};

// Writes the query slots of grad_q_source and the key/value slots of grad_kv_source and
// leaves their other slots alone, so for self-attention both are one tensor; with
// `accumulate` adds into them instead (ring attention, block by block). output and lse are
// the forward's over all keys, so each block's share of the gradients is exact.
struct FlashAttentionBackwardArgs {
  const Tensor& grad_output;  // (Tq, B, G·P, head_dim)
  const Tensor& q_source;
  const Tensor& kv_source;
  const Tensor& output;  // the forward's
  const Tensor& lse;     // the forward's
  Tensor& grad_q_source;
  Tensor& grad_kv_source;
  AttentionMaskKind mask = AttentionMaskKind::causal;
  std::int64_t q_offset = 0;
  std::int64_t k_offset = 0;
  bool accumulate = false;
  std::int64_t v_head_dim = 0;  // as the forward's
};

// The sizes a fused attention call reads off its tensors (FlashAttentionArgs), checked;
// std::invalid_argument naming `op` when the shapes do not fit together.
struct FlashGeometry {
  std::int64_t Tq = 0, Tk = 0, B = 0, G = 0, P = 0;
  std::int64_t head_dim = 0, v_head_dim = 0;  // v_head_dim = head_dim in the 5-d layouts
  bool kv_only = false;                       // kv_source holds keys and values only
};
FlashGeometry flash_geometry(const char* op, const Tensor& q_source, const Tensor& kv_source,
                             const Tensor& output, const Tensor& lse, std::int64_t v_head_dim);

// Megatron's vocab-parallel pieces: each tp rank holds vocabulary rows
// [vocab_begin, vocab_begin + local vocab); tokens outside the shard contribute nothing,
// and the step program all-reduces across the tp group where Megatron does.
struct EmbeddingArgs {
  const Tensor& tokens;  // (rows) int32 global ids
  const Tensor& table;   // (local_vocab, C)
  Tensor& output;        // (rows, C): the table row, or 0 outside the shard
  std::int64_t vocab_begin = 0;
};

struct EmbeddingBackwardArgs {
  const Tensor& tokens;       // (rows) int32
  const Tensor& grad_output;  // (rows, C)
  Tensor& grad_table;         // (local_vocab, C), accumulated into
  std::int64_t vocab_begin = 0;
};

struct CrossEntropyArgs {
  const Tensor& logits;   // (rows, local_vocab)
  const Tensor& targets;  // (rows) int32 global ids
  std::int64_t vocab_begin = 0;
};

// Columns [from_column, from_column + width) of every row of `from` into columns
// [to_column, to_column + width) of `to`, or added to them with `accumulate`: the keys and
// values of the grouped QKV out of it into a block of their own and their gradients back
// (context parallelism passes only those around its group, as Megatron does).
// With count > 1 a row holds count such blocks, block k at from_column + k·from_stride and
// to_column + k·to_stride: multi-latent attention's heads out of their projections into the
// attention's rows and back. from_stride 0 copies one block into every destination block
// (the shared positional key into each head); to_stride 0 sums the count blocks into one
// (its gradient over the heads), added in block order.
struct ColumnCopyArgs {
  const Tensor& from;  // (rows, from columns)
  Tensor& to;          // (rows, to columns), the same dtype
  std::int64_t from_column = 0;
  std::int64_t to_column = 0;
  std::int64_t width = 0;
  bool accumulate = false;
  std::int64_t count = 1;
  std::int64_t from_stride = 0;
  std::int64_t to_stride = 0;
};

// Mixture of experts: Megatron-Core's TopKRouter (softmax or sigmoid scores, group-limited
// routing, the aux-loss-free expert bias, aux_loss balancing), its token dropping, and the
// permute / unpermute of its alltoall token dispatcher. The experts are GEMMs on row
// blocks (gemm) and the exchange is Communicator::all_to_all_v.
// The router writes how many routed copies each expert got to the host: they are the
// dispatcher's split sizes, which the host needs before it can issue the exchange
// (Megatron copies them to the CPU too). With force_balance the experts come from the
// position, not the scores: copy i = t·k + slot goes to expert i mod E (Megatron's
// moe_router_force_load_balancing, for benchmarks; the simulator's uniform routing).
// kernels/math/router.hpp has the math of every attribute.
enum class MoeScoreFunction { softmax, sigmoid };  // moe_router_score_function

struct MoeRouterArgs {
  const Tensor& logits;      // (T, E)
  Tensor& probs;             // (T, E) fp32: the scores (softmax over all experts, or
                             // sigmoid per expert), saved for backward
  Tensor& top;               // (T, k) int32: the k experts of each token, best first
  Tensor& gates;             // (T, k) fp32: their weights in the combine
  bool pre_softmax = false;  // softmax: gates = probs at top; else the softmax of the
                             // logits at top (sigmoid: the scores at top over their sum)
  bool force_balance = false;
  MoeScoreFunction score_function = MoeScoreFunction::softmax;
  // Group-limited routing (moe_router_num_groups / moe_router_group_topk; 0: off).
  int num_groups = 0;
  int group_topk = 0;
  float topk_scaling_factor = 1.0f;         // on the gates (1: none)
  std::span<const float> expert_bias = {};  // (E) on the host, sigmoid only; empty: none
  // (E) on the host, written when not empty: the copies per expert of the plain top-k of
  // the scores (no bias, no groups), which the aux loss counts.
  std::span<std::int64_t> aux_tokens_per_expert = {};
};

// grad_logits (T, E) written: the gates' gradient back through their softmax (or into the
// probabilities, pre_softmax; or through the sigmoid and its normalisation), plus
// aux_grad[e] into every aux-loss score (T, e) — the load-balancing loss's gradient, the
// same for every token — back through the softmax over all experts (or the sigmoid scores
// normalised over their row). grad_gates may be wider than k (the dispatch's (T, k + E)
// table under padding): its first k columns are the gates'.
struct MoeRouterBackwardArgs {
  const Tensor& probs;              // (T, E) the forward's
  const Tensor& top;                // (T, k)
  const Tensor& gates;              // (T, k)
  const Tensor& grad_gates;         // (T, W ≥ k) fp32
  std::span<const float> aux_grad;  // (E) on the host; empty: none
  Tensor& grad_logits;              // (T, E) written
  bool pre_softmax = false;
  MoeScoreFunction score_function = MoeScoreFunction::softmax;
  float topk_scaling_factor = 1.0f;
};

// Token dropping (moe_expert_capacity_factor, moe_token_drop_policy,
// moe_pad_expert_input_to_capacity): each expert keeps at most `capacity` of the routed
// copies, by gate (probs) or by token order (position); dispatch_top / dispatch_gates
// (T, W) are what the dispatcher moves: the router's slots with −1 and gate 0 where
// dropped, and with padding (W = k + E) each token's filler rows (gate 0) so that every
// expert gets exactly min(capacity, T) rows. tokens_per_expert (E, host) = the rows each
// expert gets.
enum class MoeDropPolicy { probs, position };

// Megatron's get_capacity(T·k, E, factor): ceil(T·k / E · factor), in double as Python
// computes it, for a rank's T tokens.
inline std::int64_t moe_expert_capacity(std::int64_t tokens, std::int64_t top_k,
                                        std::int64_t experts, double capacity_factor) {
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(tokens * top_k) /
                                             static_cast<double>(experts) * capacity_factor));
}

struct MoeDropTokensArgs {
  const Tensor& top;       // (T, k) int32
  const Tensor& gates;     // (T, k) fp32
  Tensor& dispatch_top;    // (T, W) int32 written
  Tensor& dispatch_gates;  // (T, W) fp32 written
  std::int64_t capacity = 0;
  MoeDropPolicy policy = MoeDropPolicy::probs;
  bool pad_to_capacity = false;  // W = k + E, else W = k
};

// The T·k routed copies of the rows of `input`, grouped by expert (expert-major, then
// token, then slot), and the two maps between the orders (kernels/math/moe.hpp). A top
// entry of −1 (a dropped slot) has no copy and a row_of_copy of −1; then the permuted rows
// R (the copies) are fewer than the slots T·k, and "T·k" below reads R for rows.
struct MoePermuteArgs {
  const Tensor& input;    // (T, H)
  const Tensor& top;      // (T, k) int32
  Tensor& permuted;       // (R, H) written
  Tensor& row_of_copy;    // (T·k) int64 written: the permuted row of copy t·k + slot
  Tensor& source_of_row;  // (R) int64 written: the copy a permuted row holds
  std::int64_t experts = 0;
};

// grad_input[t] = Σ_slot grad_permuted[row_of_copy[t·k + slot]], k = row_of_copy / T.
struct MoePermuteBackwardArgs {
  const Tensor& grad_permuted;  // (T·k, H)
  const Tensor& row_of_copy;    // (T·k)
  Tensor& grad_input;           // (T, H) written
};

// The combine: output[t] = Σ_slot gates[t, slot] · expert_output[row_of_copy[t·k + slot]].
struct MoeUnpermuteArgs {
  const Tensor& expert_output;  // (T·k, H) in permuted order
  const Tensor& gates;          // (T, k)
  const Tensor& row_of_copy;    // (T·k)
  Tensor& output;               // (T, H) written
};

// grad_expert_output[row] = gates[i] · grad_output[i / k] for i = source_of_row[row];
// grad_gates[t, slot] = <grad_output[t], expert_output[row_of_copy[t·k + slot]]>, 0 for a
// dropped slot. Expert rows (R, H) as in MoePermuteArgs.
struct MoeUnpermuteBackwardArgs {
  const Tensor& grad_output;    // (T, H)
  const Tensor& expert_output;  // (T·k, H)
  const Tensor& gates;          // (T, k)
  const Tensor& source_of_row;  // (T·k)
  const Tensor& row_of_copy;    // (T·k)
  Tensor& grad_expert_output;   // (T·k, H) written
  Tensor& grad_gates;           // (T, k) fp32 written
};

// Blocks of rows of `from` into places in `to` (same dtype and row width), in one op: the
// mixture-of-experts dispatcher's regrouping of its chunks (Megatron's
// sort_chunks_by_idxs) and its copies of a block for every tp rank. Blocks may be empty.
struct RowBlock {
  std::int64_t from_row = 0, to_row = 0, rows = 0;
};
struct RowCopyArgs {
  const Tensor& from;  // (rows, C)
  Tensor& to;          // (rows', C)
  std::span<const RowBlock> blocks;
};

// Decoupled-weight-decay Adam (AdamW) on fp32 main parameters; the gradient is multiplied
// by grad_scale first (the clipping coefficient), so clipping adds no pass and no branch.
struct AdamArgs {
  Tensor& param;       // fp32 main parameters
  const Tensor& grad;  // fp32 main gradients
  Tensor& exp_avg;     // fp32 first moment
  Tensor& exp_avg_sq;  // fp32 second moment
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0;
  float grad_scale = 1;
  std::int64_t step = 1;  // 1-based, for bias correction
};

// FP8 (Transformer Engine's recipes in Megatron-Core's linear layers; kernels/math/fp8.hpp
// holds the arithmetic). The two formats, and how an FP8 tensor's scales are laid out.
enum class Fp8Format { e4m3, e5m2 };
enum class Fp8Scaling {
  tensor,  // one scale: delayed (given) or current (from this tensor's amax)
  block,   // power-of-two scale per block_rows × block_cols (TE's Float8BlockScaling)
  mx,      // E8M0 scale per block of 32 (MXFP8)
};
std::string_view fp8_format_name(Fp8Format f);  // "e4m3", "e5m2"

// How an FP8 matrix is held: its format and the blocks that share a scale (block extents
// of 0 span the dimension): TE's 1 × 128 and 128 × 128 blocks, MX's 1 × 32 or 32 × 1.
struct Fp8Layout {
  Fp8Format format = Fp8Format::e4m3;
  Fp8Scaling scaling = Fp8Scaling::tensor;
  std::int64_t block_rows = 0, block_cols = 0;
};

// A (rows, cols) matrix in FP8: one code per element, stored packed four to an int32
// element (the dtypes have no 8-bit type; the bytes counted are the codes' own, rounded up
// to 4), and the inverse scales (fp32) its blocks share: (1, 1) per tensor, or
// (ceil(rows / block_rows), ceil(cols / block_cols)).
struct Fp8Tensor {
  Tensor codes;      // (ceil(rows · cols / 4)) int32
  Tensor scale_inv;  // fp32
  std::int64_t rows = 0, cols = 0;
  Fp8Layout layout{};
};

// input (rows, cols) in the compute dtype → output. With `scale` (delayed scaling) the one
// given scale; else current scaling: per tensor from its amax, per block from each block's.
// `amax` (1) fp32 when given: raised to the largest |input| (max-accumulated over the
// quantizations of a step, for delayed scaling's history).
struct Fp8QuantizeArgs {
  const Tensor& input;
  Fp8Tensor& output;
  const Tensor* scale = nullptr;  // (1) fp32
  Tensor* amax = nullptr;         // (1) fp32
  // The codes of a quantization just made, again, as the second copy TE holds for the
  // backward (its transposed copy): TE's cast_transpose writes both in the first cast's
  // pass, so a binding that prices kernels charges this one no traffic of its own. The
  // codes are computed all the same.
  bool transposed_copy = false;
};

// C = alpha · op(A) · op(B) + beta · C with A and B in FP8 (the product of the decoded
// values times their scale_inv, accumulated in fp32); C in the compute dtype or fp32.
struct Fp8GemmArgs {
  const Fp8Tensor& a;  // (M, K), or (K, M) when transpose_a
  const Fp8Tensor& b;  // (K, N), or (N, K) when transpose_b
  Tensor& c;           // (M, N)
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  // Hopper's FP8 tensor cores keep partial sums in less than fp32 between promotions unless
  // the GEMM splits its accumulator (cuBLASLt's FAST_ACCUM off). Transformer Engine splits
  // it for dgrad and wgrad and not for the forward GEMM (_2X_ACC_FPROP False, _DGRAD and
  // _WGRAD True). The cuda binding follows the flag; the cpu binding sums in fp32 either way.
  bool split_accumulator = true;
};

// Delayed scaling's update of n tensors at once (TE's fused amax-and-scale update): each
// recorded amax enters its history and is reset to 0; the new scale is fp8_max / amax(history)
// / 2^margin (the history's max, or its newest entry), kept when that amax is 0 or not
// finite. fp8_max is per tensor: `formats` holds each one's (E4M3 or E5M2).
struct Fp8ScaleUpdateArgs {
  Tensor& amax_history;                // (history, n) fp32, row 0 the newest
  Tensor& scale;                       // (n) fp32
  Tensor& amax;                        // (n) fp32, max-accumulated since the last update; zeroed
  std::span<const Fp8Format> formats;  // (n)
  bool use_max = false;                // amax_compute_algo max; else most_recent
  int margin = 0;
};

// The scales of n per-tensor FP8 tensors at once (TE's compute_scale_and_scale_inv, and
// the reciprocal of delayed scales its cast of master weights takes): with `amax`, each
// scale from its tensor's amax as current scaling picks it; without, the scales as they are.
// Either way each scale_inv = 1 / scale.
struct Fp8ComputeScaleArgs {
  const Tensor* amax = nullptr;        // (n) fp32, or null
  Tensor& scale;                       // (n) fp32
  Tensor& scale_inv;                   // (n) fp32
  std::span<const Fp8Format> formats;  // (n)
};

// The op set below by method name ("gemm", "bias_add", …, "upload", "download"): what a
// cost model prices, a calibration row names and tandem calibrate measures.
const std::vector<std::string>& device_op_names();

class Device;
// An Fp8Tensor of `layout` for a (rows, cols) matrix, its codes and scales allocated on d.
Fp8Tensor allocate_fp8(Device& d, std::int64_t rows, std::int64_t cols, const Fp8Layout& layout,
                       MemoryUse use = MemoryUse::activations);

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view kind() const = 0;  // "cpu", "cuda", "sim"

  // Two host tasks issuing work in turns (core/host_turns.hpp: Megatron-Core's combined
  // 1F1B). Host threads unless the binding says otherwise.
  virtual HostTurns& host_turns();

  // Memory: every allocation goes through the tracker, identically on all bindings, counted
  // under what it holds (activations unless the step says otherwise).
  virtual Tensor allocate(const Shape& shape, DType dtype, MemoryUse use) = 0;
  Tensor allocate(const Shape& shape, DType dtype) {
    return allocate(shape, dtype, MemoryUse::activations);
  }
  virtual const MemoryTracker& memory() const = 0;

  virtual Stream& default_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream(std::string name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;

  // When the work issued so far on `s` completes, on the trace clock (the host's monotonic
  // clock for real runs; the simulated time, from the clock's epoch, in the simulator).
  // Traces of forward/backward slices read it, so they show where the stream ran, not
  // where the host issued. Real bindings may synchronize the stream to answer.
  virtual std::chrono::steady_clock::time_point trace_time(Stream& s) = 0;

  // Host → device: `produce` writes the t.numel() values into the host span it is given.
  // The sim binding never calls it (phantom tensors hold no data), so producing host data
  // costs nothing in a simulation of a model that would not fit in memory.
  using ProduceFloats = std::function<void(std::span<float>)>;
  using ProduceInts = std::function<void(std::span<std::int32_t>)>;
  virtual void upload(Stream& s, Tensor& t, const ProduceFloats& produce) = 0;
  virtual void upload(Stream& s, Tensor& t, const ProduceInts& produce) = 0;
  // Device → host, synchronous (waits for the stream). Phantom tensors read as zeros.
  virtual void download(Stream& s, const Tensor& t, std::span<float> host) = 0;

  // The op set of the GPT step, forward and backward.
  virtual void gemm(Stream& s, const GemmArgs& args) = 0;
  virtual void bias_add(Stream& s, Tensor& x, const Tensor& bias) = 0;  // x(rows, C) += bias(C)
  virtual void bias_grad(Stream& s, const Tensor& grad, Tensor& grad_bias) = 0;  // += col sums
  virtual void layer_norm(Stream& s, const LayerNormArgs& args) = 0;
  virtual void layer_norm_backward(Stream& s, const LayerNormBackwardArgs& args) = 0;
  virtual void attention(Stream& s, const AttentionArgs& args) = 0;
  virtual void attention_backward(Stream& s, const AttentionBackwardArgs& args) = 0;
  virtual void gelu(Stream& s, const Tensor& input, Tensor& output) = 0;
  // grad_input = grad_output · gelu'(input)
  virtual void gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                             Tensor& grad_input) = 0;
  // Megatron's fused bias-GeLU (--bias-gelu-fusion): output = gelu(input + bias(C)) over
  // (rows, C), one kernel where bias_add and gelu are two; input stays without the bias.
  virtual void bias_gelu(Stream& s, const Tensor& input, const Tensor& bias, Tensor& output) = 0;
  // grad_input = grad_output · gelu'(input + bias), written (Megatron's bias_gelu_back).
  virtual void bias_gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                                  const Tensor& bias, Tensor& grad_input) = 0;
  // Megatron's fused bias-dropout-add (--bias-dropout-fusion): output = residual +
  // dropout(input + bias(C)) over (rows, C), one kernel where bias_add, dropout and add are
  // up to three. output may be input or residual.
  virtual void bias_dropout_add(Stream& s, const BiasDropoutAddArgs& args) = 0;
  // Megatron's hidden dropout alone (the embedding's, and the unfused path): output =
  // dropout(input); grad_input = grad_output through the same mask. Outputs may alias inputs.
  virtual void dropout(Stream& s, const Tensor& input, Tensor& output,
                       const HiddenDropout& dropout) = 0;
  virtual void dropout_backward(Stream& s, const Tensor& grad_output, Tensor& grad_input,
                                const HiddenDropout& dropout) = 0;
  // Llama-style layers: RMSNorm, SwiGLU over the fused gate+up output (rows, 2F) → (rows, F),
  // RoPE and fused grouped-query attention.
  virtual void rms_norm(Stream& s, const RmsNormArgs& args) = 0;
  virtual void rms_norm_backward(Stream& s, const RmsNormBackwardArgs& args) = 0;
  virtual void swiglu(Stream& s, const Tensor& input, Tensor& output) = 0;
  // grad_input (rows, 2F) written from grad_output (rows, F) and the forward's input.
  virtual void swiglu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                               Tensor& grad_input) = 0;
  virtual void rope(Stream& s, const RopeArgs& args) = 0;
  virtual void flash_attention(Stream& s, const FlashAttentionArgs& args) = 0;
  virtual void flash_attention_backward(Stream& s, const FlashAttentionBackwardArgs& args) = 0;
  virtual void embedding(Stream& s, const EmbeddingArgs& args) = 0;
  virtual void embedding_backward(Stream& s, const EmbeddingBackwardArgs& args) = 0;
  // Phase 1: per-row max of the local logits, (rows).
  virtual void cross_entropy_max(Stream& s, const CrossEntropyArgs& args, Tensor& row_max) = 0;
  // Phase 2: per-row sum of exp(logit − max) and the target logit if local (else 0).
  virtual void cross_entropy_sums(Stream& s, const CrossEntropyArgs& args, const Tensor& row_max,
                                  Tensor& sum_exp, Tensor& target_logit) = 0;
  // Per-row loss = log(sum_exp) + max − target_logit.
  virtual void cross_entropy_loss(Stream& s, const Tensor& row_max, const Tensor& sum_exp,
                                  const Tensor& target_logit, Tensor& loss) = 0;
  // grad_logits = (softmax − onehot) · grad_loss(row); may alias logits (in place).
  virtual void cross_entropy_backward(Stream& s, const CrossEntropyArgs& args,
                                      const Tensor& row_max, const Tensor& sum_exp,
                                      const Tensor& grad_loss, Tensor& grad_logits) = 0;
  virtual void add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) = 0;  // out = a + b
  virtual void scale(Stream& s, Tensor& x, float factor) = 0;                      // x *= factor
  virtual void fill(Stream& s, Tensor& x, float value) = 0;
  virtual void copy(Stream& s, const Tensor& from, Tensor& to) = 0;
  virtual void copy_columns(Stream& s, const ColumnCopyArgs& args) = 0;
  virtual void copy_rows(Stream& s, const RowCopyArgs& args) = 0;
  // Mixture of experts (MoeRouterArgs): the router blocks the host until its counts are
  // there (E entries in tokens_per_expert).
  virtual void moe_router(Stream& s, const MoeRouterArgs& args,
                          std::span<std::int64_t> tokens_per_expert) = 0;
  virtual void moe_router_backward(Stream& s, const MoeRouterBackwardArgs& args) = 0;
  // Blocks the host until the counts are there (E entries), as the router does.
  virtual void moe_drop_tokens(Stream& s, const MoeDropTokensArgs& args,
                               std::span<std::int64_t> tokens_per_expert) = 0;
  virtual void moe_permute(Stream& s, const MoePermuteArgs& args) = 0;
  virtual void moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& args) = 0;
  virtual void moe_unpermute(Stream& s, const MoeUnpermuteArgs& args) = 0;
  virtual void moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& args) = 0;
  // FP8 linear layers (Fp8QuantizeArgs, Fp8GemmArgs, Fp8ScaleUpdateArgs).
  virtual void fp8_quantize(Stream& s, const Fp8QuantizeArgs& args) = 0;
  virtual void fp8_gemm(Stream& s, const Fp8GemmArgs& args) = 0;
  virtual void fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& args) = 0;
  // amax(0) = max(amax(0), max |x|) (TE's compute_amax: a NaN stays a NaN).
  virtual void fp8_amax(Stream& s, const Tensor& x, Tensor& amax) = 0;
  virtual void fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& args) = 0;
  // out(0) += Σ x², accumulated in double and stored as fp32 (for the global grad norm).
  virtual void sum_squares(Stream& s, const Tensor& x, Tensor& out) = 0;
  // Loss scaling (fp16): x *= inv_scale, and found(0) = 1 where any element of x is an inf or
  // a NaN, else left as it is (PyTorch's _amp_foreach_non_finite_check_and_unscale_, which
  // Megatron's fp16 optimizer runs over the main gradients). x fp32, found (1) fp32.
  virtual void check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale, Tensor& found) = 0;
  virtual void adam(Stream& s, const AdamArgs& args) = 0;

 private:
  std::unique_ptr<HostTurns> host_turns_;
};

}  // namespace tandem
