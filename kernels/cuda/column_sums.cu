// Parameter gradients that sum over rows — the bias gradient and the embedding-table
// gradient — and the embedding lookup that the latter mirrors. Sums run in double and in
// a fixed order (no atomics), so a gradient repeats bitwise from run to run:
//   bias: a block of 32 columns × 8 row lanes; lane k sums rows k, k+8, … in order, then
//         the 8 partial sums are added in lane order;
//   embedding table: one thread per column visits the rows in order, so repeated tokens
//         add up in the same order every time (as the CPU kernel does).
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/vocab.hpp"

namespace tandem::kernels::cuda {
namespace {

constexpr int kColumns = 32;  // columns per block (one warp across)
constexpr int kRowLanes = 8;  // row lanes per block

__global__ void bias_backward_kernel(Floats dbias, ConstFloats dout, std::int64_t rows,
                                     std::int64_t C) {
  __shared__ double partial[kRowLanes][kColumns];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  double sum = 0;
  if (col < C)
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes)
      sum += static_cast<double>(load(dout, r * C + col));
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= C) return;
  double total = 0;
  for (int k = 0; k < kRowLanes; ++k) total += partial[k][threadIdx.x];
  store(dbias, col, static_cast<float>(static_cast<double>(load(dbias, col)) + total));
}

__global__ void embedding_forward_kernel(const std::int32_t* tokens, ConstFloats table,
                                         cpu::VocabShard shard, std::int64_t rows, std::int64_t C,
                                         Floats out) {
  TANDEM_GRID_STRIDE(i, rows * C) {
    const std::int64_t r = i / C, col = i % C;
    const std::int64_t row = math::vocab_local_index(tokens[r], shard.begin, shard.size);
    store(out, i, row >= 0 ? load(table, row * C + col) : 0.0f);
  }
}

__global__ void embedding_backward_kernel(const std::int32_t* tokens, ConstFloats dout,
                                          cpu::VocabShard shard, std::int64_t rows, std::int64_t C,
                                          Floats dtable) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= C) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t row = math::vocab_local_index(tokens[r], shard.begin, shard.size);
    if (row < 0) continue;
    const std::int64_t at = row * C + col;
    store(dtable, at, load(dtable, at) + load(dout, r * C + col));
  }
}

}  // namespace

void bias_backward(Context c, Floats dbias, ConstFloats dout, std::int64_t rows, std::int64_t C) {
  if (C == 0) return;
  const auto blocks = static_cast<unsigned int>((C + kColumns - 1) / kColumns);
  bias_backward_kernel<<<blocks, dim3(kColumns, kRowLanes), 0, c.stream>>>(dbias, dout, rows, C);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void embedding_forward(Context c, const std::int32_t* tokens, ConstFloats table,
                       cpu::VocabShard shard, std::int64_t rows, std::int64_t C, Floats out) {
  if (rows * C == 0) return;
  embedding_forward_kernel<<<grid_for(rows * C), kThreads, 0, c.stream>>>(tokens, table, shard,
                                                                          rows, C, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void embedding_backward(Context c, const std::int32_t* tokens, ConstFloats dout,
                        cpu::VocabShard shard, std::int64_t rows, std::int64_t C, Floats dtable) {
  if (rows * C == 0) return;
  constexpr int threads = 64;
  const auto blocks = static_cast<unsigned int>((C + threads - 1) / threads);
  embedding_backward_kernel<<<blocks, threads, 0, c.stream>>>(tokens, dout, shard, rows, C, dtable);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
