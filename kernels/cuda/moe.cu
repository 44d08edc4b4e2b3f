// The mixture-of-experts ops on the GPU: Megatron-Core's TopKRouter (softmax scores) and
// the permute / unpermute of its alltoall token dispatcher, with the contracts of
// kernels/cpu/{router,moe}.hpp. The per-row math is kernels/math/{router,moe}.hpp, the
// functions the CPU kernels call:
// - the router runs one thread per token (E may be in the hundreds, k is small): it copies
//   the token's logits into its probs row as fp32, ranks them there (math::router_top_k,
//   the CPU's ranking of the logits, ties to the lower index), then turns the row into the
//   softmax in place; the per-expert counts are integer atomics (exact, order-free);
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
                              std::int32_t* top, float* gates) {
  const auto E = static_cast<std::int32_t>(s.experts);
  const auto k = static_cast<std::int32_t>(s.top_k);
  TANDEM_GRID_STRIDE(t, s.tokens) {
    float* p = probs + t * E;
    for (std::int32_t e = 0; e < E; ++e) p[e] = load(logits, t * E + e);
    std::int32_t* mine = top + t * k;
    // softmax is monotonic: ranking the logits ranks the probabilities, ties included.
    if (s.force_balance)
      math::router_forced_top_k(t, E, k, mine);
    else
      math::router_top_k(p, E, k, mine);
    float picked[kRouterMaxTopK];  // the logits at top
    for (std::int32_t j = 0; j < k; ++j) picked[j] = p[mine[j]];
    math::router_softmax_in_place(p, E);
    float* g = gates + t * k;
    if (s.pre_softmax) {
      for (std::int32_t j = 0; j < k; ++j) g[j] = p[mine[j]];
    } else {
      math::router_softmax_in_place(picked, k);
      for (std::int32_t j = 0; j < k; ++j) g[j] = picked[j];
    }
  }
}

__global__ void count_experts_kernel(const std::int32_t* top, std::int64_t copies,
                                     std::int64_t experts, unsigned long long* counts) {
  TANDEM_GRID_STRIDE(i, copies) {
    const std::int32_t e = top[i];
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
  TANDEM_GRID_STRIDE(t, s.tokens) {
    math::router_backward_token(probs + t * E, aux_grad, top + t * k, gates + t * k,
                                grad_gates + t * k, E, k, s.pre_softmax,
                                [=](std::int32_t e, float d) { store(dlogits, t * E + e, d); });
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
    if (top[i] < 0 || top[i] >= experts) {
      printf("moe_permute: top[%lld] = %d outside [0, experts = %lld)\n", static_cast<long long>(i),
             top[i], static_cast<long long>(experts));
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
  TANDEM_GRID_STRIDE(e, s.tokens * s.top_k * H) {
    const std::int64_t row = e / H, c = e % H;
    store(permuted, e, load(x, (source_of_row[row] / s.top_k) * H + c));
  }
}

// Which op and which map a failed row-map check names (device code prints the literal).
enum class RowCheck : int { permute_backward, unpermute, unpermute_backward };

// Every entry of a row map (T·k) names a row of the permuted (T·k, H) tensors.
__global__ void check_rows_kernel(RowCheck op, bool source_of_row, std::int64_t copies,
                                  const std::int64_t* rows) {
  TANDEM_GRID_STRIDE(i, copies) {
    if (rows[i] < 0 || rows[i] >= copies) {
      const char* name = op == RowCheck::permute_backward ? "moe_permute_backward"
                         : op == RowCheck::unpermute      ? "moe_unpermute"
                                                          : "moe_unpermute_backward";
      printf("%s: %s[%lld] = %lld outside [0, T·k = %lld)\n", name,
             source_of_row ? "source_of_row" : "row_of_copy", static_cast<long long>(i),
             static_cast<long long>(rows[i]), static_cast<long long>(copies));
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
  TANDEM_GRID_STRIDE(e, s.tokens * s.top_k * H) {
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
  const std::int64_t H = s.hidden;
  const std::int64_t g = (i / s.top_k) * H, r = row_of_copy[i] * H;
  double dot = 0;
  for (std::int64_t c = threadIdx.x; c < H; c += 32)
    dot += static_cast<double>(load(dout, g + c)) * static_cast<double>(load(y, r + c));
  dot = warp_sum(dot);
  if (threadIdx.x == 0) dgates[i] = static_cast<float>(dot);
}

void check(const char* op, cpu::RouterShape s) {
  if (s.tokens < 0 || s.top_k < 1 || s.top_k > s.experts || s.top_k > kRouterMaxTopK)
    throw std::invalid_argument(std::string(op) + ": tokens " + std::to_string(s.tokens) +
                                ", experts " + std::to_string(s.experts) + ", top_k " +
                                std::to_string(s.top_k) +
                                ": need tokens ≥ 0 and 1 ≤ top_k ≤ experts, and top_k ≤ " +
                                std::to_string(kRouterMaxTopK) + " on the GPU");
}

void check(const char* op, cpu::MoeShape s) {
  if (s.tokens < 0 || s.hidden < 1 || s.experts < 1 || s.top_k < 1)
    throw std::invalid_argument(std::string(op) + ": tokens " + std::to_string(s.tokens) +
                                ", hidden " + std::to_string(s.hidden) + ", experts " +
                                std::to_string(s.experts) + ", top_k " + std::to_string(s.top_k) +
                                ": need tokens ≥ 0, hidden ≥ 1, experts ≥ 1 and top_k ≥ 1");
}

void check_rows(Context c, RowCheck op, bool source_of_row, std::int64_t copies,
                const std::int64_t* rows) {
  if (copies == 0) return;
  check_rows_kernel<<<grid_for(copies), kThreads, 0, c.stream>>>(op, source_of_row, copies, rows);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void router_top_k(Context c, cpu::RouterShape s, ConstFloats logits, float* probs,
                  std::int32_t* top, float* gates, std::int64_t* counts) {
  check("router_top_k", s);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(
      counts, 0, static_cast<std::size_t>(s.experts) * sizeof(std::int64_t), c.stream));
  if (s.tokens == 0) return;
  router_kernel<<<grid_for(s.tokens, 128), 128, 0, c.stream>>>(s, logits, probs, top, gates);
  TANDEM_CUDA_CHECK_LAUNCH();
  const std::int64_t copies = s.tokens * s.top_k;
  static_assert(sizeof(unsigned long long) == sizeof(std::int64_t));
  count_experts_kernel<<<grid_for(copies), kThreads, 0, c.stream>>>(
      top, copies, s.experts, reinterpret_cast<unsigned long long*>(counts));
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
  gather_rows_kernel<<<grid_for(copies * s.hidden), kThreads, 0, c.stream>>>(s, x, source_of_row,
                                                                             permuted);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_permute_backward(Context c, cpu::MoeShape s, ConstFloats dpermuted,
                          const std::int64_t* row_of_copy, Floats dx) {
  check("moe_permute_backward", s);
  if (s.tokens == 0) return;
  check_rows(c, RowCheck::permute_backward, false, s.tokens * s.top_k, row_of_copy);
  combine_kernel<<<grid_for(s.tokens * s.hidden), kThreads, 0, c.stream>>>(s, dpermuted, nullptr,
                                                                           row_of_copy, dx);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void moe_unpermute(Context c, cpu::MoeShape s, ConstFloats y, const float* gates,
                   const std::int64_t* row_of_copy, Floats out) {
  check("moe_unpermute", s);
  if (s.tokens == 0) return;
  check_rows(c, RowCheck::unpermute, false, s.tokens * s.top_k, row_of_copy);
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
  check_rows(c, RowCheck::unpermute_backward, true, copies, source_of_row);
  check_rows(c, RowCheck::unpermute_backward, false, copies, row_of_copy);
  scatter_grad_kernel<<<grid_for(copies * s.hidden), kThreads, 0, c.stream>>>(s, dout, gates,
                                                                              source_of_row, dy);
  TANDEM_CUDA_CHECK_LAUNCH();
  const auto blocks = static_cast<unsigned int>((copies + kCopiesPerBlock - 1) / kCopiesPerBlock);
  gate_grad_kernel<<<blocks, dim3(32, kCopiesPerBlock), 0, c.stream>>>(s, dout, y, row_of_copy,
                                                                       dgates);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
