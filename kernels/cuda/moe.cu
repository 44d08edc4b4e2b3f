// The mixture-of-experts ops on the GPU: Megatron-Core's TopKRouter (softmax or sigmoid
// scores, group-limited routing, expert bias), its token dropping, and the permute /
// unpermute of its alltoall token dispatcher, with the contracts of
// kernels/cpu/{router,moe}.hpp. The per-row math is kernels/math/{router,moe}.hpp, the
// functions the CPU kernels call:
// - the router runs one thread per token (E may be in the hundreds, k is small): it copies
//   the token's logits into its probs row as fp32, ranks them there (the CPU's ranking,
//   ties to the lower index) or turns the row into the scores first and ranks those (plus
//   the bias), then finishes the scores in place; the per-expert counts are integer atomics
//   (exact, order-free);
// - token dropping decides each routed copy in its own thread (math::moe_copy_kept counts
//   the copies of its expert that rank before it) and places the padding's fillers one
//   thread per token;
// - the permutation is the CPU's stable counting sort (math::moe_count_copies,
//   moe_expert_offsets, moe_group_by_expert) in one thread — O(T·k) integer work — and the
//   row copies run in parallel;
// - combine (unpermute, permute's backward) sums a token's slots in slot order per column,
//   and the gates' gradient is a dot product over the hidden size in double, a warp per
//   copy in a fixed order, so no float atomics anywhere and results repeat bitwise.
// Row maps are not checked on the host (they live on the device): a kernel that meets an
// entry outside [0, T·k) or an expert outside [0, E) prints it and traps, which makes the
// stream's next synchronisation fail with a CudaError rather than read or write out of
// bounds.
#include <cfloat>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/exp.hpp"
#include "kernels/math/moe.hpp"
#include "kernels/math/router.hpp"

namespace tandem::kernels::cuda {
namespace {

__global__ void router_kernel(cpu::RouterShape s, ConstFloats logits, float* probs,
                              std::int32_t* top, float* gates, const float* bias,
                              std::int32_t* aux_top) {
  const auto E = static_cast<std::int32_t>(s.experts);
  const auto k = static_cast<std::int32_t>(s.top_k);
  const bool sigmoid = s.score == math::RouterScore::sigmoid;
  // The CPU's choice (kernels/cpu/router.cpp): the logits rank the experts for softmax
  // (monotonic, ties included) unless groups sum the probabilities (pre_softmax); sigmoid
  // ranks its scores plus the bias.
  const bool by_logits = !sigmoid && !(s.pre_softmax && s.num_groups > 0);
  const float* b = sigmoid ? bias : nullptr;
  TANDEM_GRID_STRIDE(t, s.tokens) {
    float* p = probs + t * E;
    for (std::int32_t e = 0; e < E; ++e) p[e] = load(logits, t * E + e);
    // The aux loss's plain top-k ranks the logits (its scores are monotonic in them).
    if (aux_top != nullptr) math::router_top_k(p, E, k, aux_top + t * k);
    auto transform = [&] {
      if (sigmoid)
        for (std::int32_t e = 0; e < E; ++e) p[e] = math::router_sigmoid(p[e]);
      else
        math::router_softmax_in_place(p, E);
    };
    float picked[kRouterMaxTopK];  // the logits at top
    float group_scores[kRouterMaxGroups];
    std::int32_t* mine = top + t * k;
    if (!by_logits) transform();
    if (s.force_balance) {
      math::router_forced_top_k(t, E, k, mine);
    } else {
      if (s.num_groups > 0)
        math::router_group_scores(p, b, E, s.num_groups, k / s.group_topk, group_scores);
      math::router_top_k_limited(p, b, E, k, s.num_groups > 0 ? group_scores : nullptr,
                                 s.num_groups, s.group_topk, mine);
    }
    for (std::int32_t j = 0; j < k; ++j) picked[j] = p[mine[j]];
    if (by_logits) transform();
    float* g = gates + t * k;
    for (std::int32_t j = 0; j < k; ++j) g[j] = !sigmoid && !s.pre_softmax ? picked[j] : p[mine[j]];
    math::router_gates_in_place(s.score, s.pre_softmax, g, k, s.scale);
  }
}

// counts[e] += the copies of top (`copies` slots) for e; −1 slots (dropped) are skipped.
__global__ void count_experts_kernel(const std::int32_t* top, std::int64_t copies,
                                     std::int64_t experts, unsigned long long* counts) {
  TANDEM_GRID_STRIDE(i, copies) {
    const std::int32_t e = top[i];
    if (e == -1) continue;
    if (e < 0 || e >= experts) {
      printf("moe_router: top[%lld] = %d outside [0, %lld)\n", static_cast<long long>(i), e,
             static_cast<long long>(experts));
      __trap();
    }
    atomicAdd(counts + e, 1ull);  // integer: exact whatever the order
  }
}

__global__ void router_backward_kernel(cpu::RouterShape s, const float* probs,
                                       const std::int32_t* top, const float* gates,
                                       const float* grad_gates, const float* aux_grad,
                                       Floats dlogits) {
  const auto E = static_cast<std::int32_t>(s.experts);
  const auto k = static_cast<std::int32_t>(s.top_k);
  const std::int64_t W = s.grad_gates_width > 0 ? s.grad_gates_width : s.top_k;
  TANDEM_GRID_STRIDE(t, s.tokens) {
    math::router_backward_token(s.score, probs + t * E, aux_grad, top + t * k, gates + t * k,
                                grad_gates + t * W, E, k, s.pre_softmax, s.scale,
                                [=](std::int32_t e, float d) { store(dlogits, t * E + e, d); });
  }
}

// Token dropping, step 1: every slot −1 / gate 0 (the padding's slots stay so unless filled).
__global__ void clear_dispatch_kernel(std::int64_t n, std::int32_t* dispatch_top,
                                      float* dispatch_gates) {
  TANDEM_GRID_STRIDE(i, n) {
    dispatch_top[i] = -1;
    dispatch_gates[i] = 0.0f;
  }
}

// Step 2: each routed copy kept or dropped, one thread per copy.
__global__ void keep_copies_kernel(cpu::TokenDropShape s, const std::int32_t* top,
                                   const float* gates, std::int32_t* dispatch_top,
                                   float* dispatch_gates) {
  const std::int64_t k = s.top_k, W = s.width();
  const std::int64_t keep = s.capacity < s.tokens ? s.capacity : s.tokens;
  TANDEM_GRID_STRIDE(i, s.tokens * k) {
    if (math::moe_copy_kept(s.policy, top, gates, s.tokens, k, keep, i)) {
      dispatch_top[(i / k) * W + i % k] = top[i];
      dispatch_gates[(i / k) * W + i % k] = gates[i];
    }
  }
}

// Step 3 (padding): expert e's filler rows are the tokens below bounds[e] not routed to it,
// bounds from its kept count (one thread per expert, O(T·k) each).
__global__ void filler_bounds_kernel(cpu::TokenDropShape s, const std::int32_t* top,
                                     const std::int64_t* kept, std::int64_t* bounds) {
  const std::int64_t keep = s.capacity < s.tokens ? s.capacity : s.tokens;
  TANDEM_GRID_STRIDE(e, s.experts) {
    bounds[e] = math::moe_filler_bound(top, s.tokens, s.top_k, static_cast<std::int32_t>(e),
                                       keep - kept[e]);
  }
}

// Step 4 (padding): each token's fillers in expert order, after its k routed slots.
__global__ void place_fillers_kernel(cpu::TokenDropShape s, const std::int32_t* top,
                                     const std::int64_t* bounds, std::int32_t* dispatch_top) {
  const std::int64_t k = s.top_k, W = s.width();
  TANDEM_GRID_STRIDE(t, s.tokens) {
    std::int64_t slot = k;
    for (std::int64_t e = 0; e < s.experts; ++e)
      if (t < bounds[e] && !math::moe_routed_to(top + t * k, k, static_cast<std::int32_t>(e)))
        dispatch_top[t * W + slot++] = static_cast<std::int32_t>(e);
  }
}

// Host floats into device memory through kernel parameters, which the launch captures:
// the host array may go away as soon as the launch returns, with no stream sync (a
// cudaMemcpyAsync from pageable memory guarantees neither).
constexpr int kUploadChunk = 256;
struct FloatChunk {
  float v[kUploadChunk];
};

__global__ void write_chunk_kernel(FloatChunk chunk, std::int64_t n, float* to) {
  if (threadIdx.x < n) to[threadIdx.x] = chunk.v[threadIdx.x];
}

// The permutation, serial (one thread): the CPU's counting sort, line for line.
// scratch: counts (E), offsets (E + 1), next (E).
__global__ void group_by_expert_kernel(const std::int32_t* top, std::int64_t copies,
                                       std::int64_t experts, std::int64_t* scratch,
                                       std::int64_t* row_of_copy, std::int64_t* source_of_row) {
  for (std::int64_t i = 0; i < copies; ++i)
    if (top[i] < -1 || top[i] >= experts) {
      printf("moe_permute: top[%lld] = %d outside [-1, experts = %lld)\n",
             static_cast<long long>(i), top[i], static_cast<long long>(experts));
      __trap();
    }
  std::int64_t* counts = scratch;
  std::int64_t* offsets = scratch + experts;
  std::int64_t* next = offsets + experts + 1;
  math::moe_count_copies(top, copies, experts, counts);
  math::moe_expert_offsets(counts, experts, offsets);
  math::moe_group_by_expert(top, copies, offsets, experts, next, row_of_copy, source_of_row);
}

__global__ void gather_rows_kernel(cpu::MoeShape s, ConstFloats x,
                                   const std::int64_t* source_of_row, Floats permuted) {
  const std::int64_t H = s.hidden;
  TANDEM_GRID_STRIDE(e, cpu::permuted_rows(s) * H) {
    const std::int64_t row = e / H, c = e % H;
    store(permuted, e, load(x, (source_of_row[row] / s.top_k) * H + c));
  }
}

// Which op and which map a failed row-map check names (device code prints the literal).
enum class RowCheck : int { permute_backward, unpermute, unpermute_backward };

// Every entry of a row map names a row of the permuted (R, H) tensors (row_of_copy, T·k
// entries, −1 for a dropped slot) or a slot in [0, T·k) (source_of_row, R entries).
__global__ void check_rows_kernel(RowCheck op, bool source_of_row, std::int64_t entries,
                                  std::int64_t bound, const std::int64_t* rows) {
  TANDEM_GRID_STRIDE(i, entries) {
    if (rows[i] < (source_of_row ? 0 : -1) || rows[i] >= bound) {
      const char* name = op == RowCheck::permute_backward ? "moe_permute_backward"
                         : op == RowCheck::unpermute      ? "moe_unpermute"
                                                          : "moe_unpermute_backward";
      printf("%s: %s[%lld] = %lld outside [0, %lld)\n", name,
             source_of_row ? "source_of_row" : "row_of_copy", static_cast<long long>(i),
             static_cast<long long>(rows[i]), static_cast<long long>(bound));
      __trap();
    }
  }
}

// math::moe_combine over a Floats buffer: fp32 rows go through the helper itself; bf16
// rows through the same sum (slots in order, weights[slot] · y) with each y loaded from
// bf16, as the helper reads only float rows.
__device__ float combine(ConstFloats rows, std::int64_t H, const std::int64_t* row_of_slot,
                         const float* weights, std::int64_t k, std::int64_t c) {
  if (rows.precision == Precision::fp32)
    return math::moe_combine(static_cast<const float*>(rows.data), H, row_of_slot, weights, k, c);
  float sum = 0;
  for (std::int64_t slot = 0; slot < k; ++slot) {
    if (row_of_slot[slot] < 0) continue;  // a dropped slot
    const float y = load(rows, row_of_slot[slot] * H + c);
    sum += weights != nullptr ? weights[slot] * y : y;
  }
  return sum;
}

// out (T, H) = per token the slot-ordered sum of its copies' rows, weighted or not.
__global__ void combine_kernel(cpu::MoeShape s, ConstFloats rows, const float* weights,
                               const std::int64_t* row_of_copy, Floats out) {
  const std::int64_t H = s.hidden, k = s.top_k;
  TANDEM_GRID_STRIDE(e, s.tokens * H) {
    const std::int64_t t = e / H, c = e % H;
    store(out, e,
          combine(rows, H, row_of_copy + t * k, weights != nullptr ? weights + t * k : nullptr, k,
                  c));
  }
}

__global__ void scatter_grad_kernel(cpu::MoeShape s, ConstFloats dout, const float* gates,
                                    const std::int64_t* source_of_row, Floats dy) {
  const std::int64_t H = s.hidden;
  TANDEM_GRID_STRIDE(e, cpu::permuted_rows(s) * H) {
    const std::int64_t row = e / H, c = e % H;
    const std::int64_t i = source_of_row[row];
    store(dy, e, gates[i] * load(dout, (i / s.top_k) * H + c));
  }
}

constexpr int kCopiesPerBlock = 8;  // a warp per copy

// dgates[i] = <dout[i / k], y[row_of_copy[i]]> in double: each lane sums its columns in
// order, then a fixed shuffle tree — the same result every run.
__global__ void gate_grad_kernel(cpu::MoeShape s, ConstFloats dout, ConstFloats y,
                                 const std::int64_t* row_of_copy, float* dgates) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kCopiesPerBlock + threadIdx.y;
  if (i >= s.tokens * s.top_k) return;
  if (row_of_copy[i] < 0) {  // a dropped slot
    if (threadIdx.x == 0) dgates[i] = 0.0f;
    return;
  }
  const std::int64_t H = s.hidden;
  const std::int64_t g = (i / s.top_k) * H, r = row_of_copy[i] * H;
  double dot = 0;
  for (std::int64_t c = threadIdx.x; c < H; c += 32)
    dot += static_cast<double>(load(dout, g + c)) * static_cast<double>(load(y, r + c));
  dot = warp_sum(dot);
  if (threadIdx.x == 0) dgates[i] = static_cast<float>(dot);
}

void check(const char* op, cpu::RouterShape s) {
  if (s.tokens < 0 || s.top_k < 1 || s.top_k > s.experts || s.top_k > kRouterMaxTopK ||
      s.num_groups > kRouterMaxGroups)
    throw std::invalid_argument(
        std::string(op) + ": tokens " + std::to_string(s.tokens) + ", experts " +
        std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) + ", num_groups " +
        std::to_string(s.num_groups) + ": need tokens ≥ 0 and 1 ≤ top_k ≤ experts, and top_k ≤ " +
        std::to_string(kRouterMaxTopK) + ", num_groups ≤ " + std::to_string(kRouterMaxGroups) +
        " on the GPU");
  cpu::check_router_groups(s);
}

void check(const char* op, cpu::MoeShape s) {
  if (s.tokens < 0 || s.hidden < 1 || s.experts < 1 || s.top_k < 1)
    throw std::invalid_argument(std::string(op) + ": tokens " + std::to_string(s.tokens) +
                                ", hidden " + std::to_string(s.hidden) + ", experts " +
                                std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) +
                                ": need tokens ≥ 0, hidden ≥ 1, experts ≥ 1 and top_k ≥ 1");
}

void check_rows(Context c, RowCheck op, bool source_of_row, cpu::MoeShape s,
                const std::int64_t* rows) {
  const std::int64_t slots = s.tokens * s.top_k, R = cpu::permuted_rows(s);
  const std::int64_t entries = source_of_row ? R : slots, bound = source_of_row ? slots : R;
  if (entries == 0) return;
  check_rows_kernel<<<grid_for(entries), kThreads, 0, c.stream>>>(op, source_of_row, entries, bound,
                                                                  rows);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void router_top_k(Context c, cpu::RouterShape s, ConstFloats logits, float* probs,
                  std::int32_t* top, float* gates, std::int64_t* counts, const float* expert_bias,
                  std::int32_t* aux_top, std::int64_t* aux_counts) {
  check("router_top_k", s);
  const auto bytes = static_cast<std::size_t>(s.experts) * sizeof(std::int64_t);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(counts, 0, bytes, c.stream));
  if (aux_counts != nullptr) TANDEM_CUDA_CHECK(cudaMemsetAsync(aux_counts, 0, bytes, c.stream));
  if (s.tokens == 0) return;
  router_kernel<<<grid_for(s.tokens, 128), 128, 0, c.stream>>>(s, logits, probs, top, gates,
                                                               expert_bias, aux_top);
  TANDEM_CUDA_CHECK_LAUNCH();
  const std::int64_t copies = s.tokens * s.top_k;
  static_assert(sizeof(unsigned long long) == sizeof(std::int64_t));
  count_experts_kernel<<<grid_for(copies), kThreads, 0, c.stream>>>(
      top, copies, s.experts, reinterpret_cast<unsigned long long*>(counts));
  TANDEM_CUDA_CHECK_LAUNCH();
  if (aux_counts == nullptr) return;
  count_experts_kernel<<<grid_for(copies), kThreads, 0, c.stream>>>(
      aux_top != nullptr ? aux_top : top, copies, s.experts,
      reinterpret_cast<unsigned long long*>(aux_counts));
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_drop_tokens(Context c, cpu::TokenDropShape s, const std::int32_t* top, const float* gates,
                     std::int32_t* dispatch_top, float* dispatch_gates, std::int64_t* counts,
                     std::int64_t* scratch) {
  if (s.tokens < 0 || s.top_k < 1 || s.top_k > s.experts || s.capacity < 0)
    throw std::invalid_argument(
        "moe_drop_tokens: tokens " + std::to_string(s.tokens) + ", experts " +
        std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) + ", capacity " +
        std::to_string(s.capacity) + ": need tokens ≥ 0, 1 ≤ top_k ≤ experts and capacity ≥ 0");
  const auto bytes = static_cast<std::size_t>(s.experts) * sizeof(std::int64_t);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(counts, 0, bytes, c.stream));
  const std::int64_t slots = s.tokens * s.width();
  if (slots == 0) return;
  auto* ull = reinterpret_cast<unsigned long long*>(counts);
  clear_dispatch_kernel<<<grid_for(slots), kThreads, 0, c.stream>>>(slots, dispatch_top,
                                                                    dispatch_gates);
  TANDEM_CUDA_CHECK_LAUNCH();
  keep_copies_kernel<<<grid_for(s.tokens * s.top_k), kThreads, 0, c.stream>>>(
      s, top, gates, dispatch_top, dispatch_gates);
  TANDEM_CUDA_CHECK_LAUNCH();
  count_experts_kernel<<<grid_for(slots), kThreads, 0, c.stream>>>(dispatch_top, slots, s.experts,
                                                                   ull);
  TANDEM_CUDA_CHECK_LAUNCH();
  if (!s.pad_to_capacity) return;
  filler_bounds_kernel<<<grid_for(s.experts), kThreads, 0, c.stream>>>(s, top, counts, scratch);
  TANDEM_CUDA_CHECK_LAUNCH();
  place_fillers_kernel<<<grid_for(s.tokens), kThreads, 0, c.stream>>>(s, top, scratch,
                                                                      dispatch_top);
  TANDEM_CUDA_CHECK_LAUNCH();
  TANDEM_CUDA_CHECK(cudaMemsetAsync(counts, 0, bytes, c.stream));
  count_experts_kernel<<<grid_for(slots), kThreads, 0, c.stream>>>(dispatch_top, slots, s.experts,
                                                                   ull);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void router_backward(Context c, cpu::RouterShape s, const float* probs, const std::int32_t* top,
                     const float* gates, const float* grad_gates, const float* aux_grad,
                     Floats dlogits) {
  check("router_backward", s);
  if (s.tokens == 0) return;
  router_backward_kernel<<<grid_for(s.tokens, 128), 128, 0, c.stream>>>(
      s, probs, top, gates, grad_gates, aux_grad, dlogits);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void upload_by_launch(Context c, const float* host, std::int64_t n, float* device) {
  for (std::int64_t at = 0; at < n; at += kUploadChunk) {
    const std::int64_t m = n - at < kUploadChunk ? n - at : kUploadChunk;
    FloatChunk chunk{};
    for (std::int64_t i = 0; i < m; ++i) chunk.v[i] = host[at + i];
    write_chunk_kernel<<<1, kUploadChunk, 0, c.stream>>>(chunk, m, device + at);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
}

void moe_permute(Context c, cpu::MoeShape s, ConstFloats x, const std::int32_t* top,
                 Floats permuted, std::int64_t* source_of_row, std::int64_t* row_of_copy,
                 std::int64_t* scratch) {
  check("moe_permute", s);
  const std::int64_t copies = s.tokens * s.top_k;
  if (copies == 0) return;
  group_by_expert_kernel<<<1, 1, 0, c.stream>>>(top, copies, s.experts, scratch, row_of_copy,
                                                source_of_row);
  TANDEM_CUDA_CHECK_LAUNCH();
  if (cpu::permuted_rows(s) == 0) return;
  gather_rows_kernel<<<grid_for(cpu::permuted_rows(s) * s.hidden), kThreads, 0, c.stream>>>(
      s, x, source_of_row, permuted);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_permute_backward(Context c, cpu::MoeShape s, ConstFloats dpermuted,
                          const std::int64_t* row_of_copy, Floats dx) {
  check("moe_permute_backward", s);
  if (s.tokens == 0) return;
  check_rows(c, RowCheck::permute_backward, false, s, row_of_copy);
  combine_kernel<<<grid_for(s.tokens * s.hidden), kThreads, 0, c.stream>>>(s, dpermuted, nullptr,
                                                                           row_of_copy, dx);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_unpermute(Context c, cpu::MoeShape s, ConstFloats y, const float* gates,
                   const std::int64_t* row_of_copy, Floats out) {
  check("moe_unpermute", s);
  if (s.tokens == 0) return;
  check_rows(c, RowCheck::unpermute, false, s, row_of_copy);
  combine_kernel<<<grid_for(s.tokens * s.hidden), kThreads, 0, c.stream>>>(s, y, gates, row_of_copy,
                                                                           out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_unpermute_backward(Context c, cpu::MoeShape s, ConstFloats dout, ConstFloats y,
                            const float* gates, const std::int64_t* source_of_row,
                            const std::int64_t* row_of_copy, Floats dy, float* dgates) {
  check("moe_unpermute_backward", s);
  const std::int64_t copies = s.tokens * s.top_k;
  if (copies == 0) return;
  check_rows(c, RowCheck::unpermute_backward, true, s, source_of_row);
  check_rows(c, RowCheck::unpermute_backward, false, s, row_of_copy);
  if (cpu::permuted_rows(s) > 0) {
    scatter_grad_kernel<<<grid_for(cpu::permuted_rows(s) * s.hidden), kThreads, 0, c.stream>>>(
        s, dout, gates, source_of_row, dy);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
  const auto blocks = static_cast<unsigned int>((copies + kCopiesPerBlock - 1) / kCopiesPerBlock);
  gate_grad_kernel<<<blocks, dim3(32, kCopiesPerBlock), 0, c.stream>>>(s, dout, y, row_of_copy,
                                                                       dgates);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
