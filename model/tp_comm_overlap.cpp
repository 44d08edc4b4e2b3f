#include "model/tp_comm_overlap.hpp"

#include <array>
#include <memory>
#include <stdexcept>
#include <string>

#include "model/library_call.hpp"

namespace tandem {
namespace {

Tensor row_block(const Tensor& t, std::int64_t block, std::int64_t rows) {
  const std::int64_t cols = t.shape[1];
  return t.view(Shape{rows, cols}, block * rows * cols);
}

// Rows [block · rows, (block + 1) · rows) of a per-tensor-scaled FP8 matrix, sharing its
// scale; the codes are packed four to an int32, so a block starts on a whole element.
Fp8Tensor fp8_row_block(const Fp8Tensor& t, std::int64_t block, std::int64_t rows) {
  const std::int64_t codes = rows * t.cols;
  if (codes % 4 != 0 || t.layout.scaling != Fp8Scaling::tensor)
    throw std::logic_error("fp8_row_block: blocks of " + std::to_string(rows) + " x " +
                           std::to_string(t.cols) +
                           " codes need a multiple of 4 codes and per-tensor scaling");
  Fp8Tensor b = t;
  b.codes = t.codes.view(Shape{codes / 4}, block * (codes / 4));
  b.rows = rows;
  return b;
}

}  // namespace

Tensor ring_exchange_gather_fp8_gemm(ModelEnv& env, const Fp8Tensor& x, const Fp8Tensor& w,
                                     bool transpose_w, Fp8Tensor* gathered) {
  const int tp = env.tp.size(), r = env.tp.rank();
  const std::int64_t n = x.rows;
  const std::int64_t out_cols = transpose_w ? w.rows : w.cols;
  const LibraryCall call(env);
  const SplitGemm blocks(env);
  Tensor y = allocate_like(env, Shape{n * tp, out_cols});
  Fp8Tensor total = allocate_fp8(env.device, n * tp, x.cols, x.layout);
  total.scale_inv = x.scale_inv;  // one delayed scale on every rank
  auto block_of = [&](int j) { return j == r ? x : fp8_row_block(total, j, n); };
  for (int k = 0; k < tp; ++k) {
    const int held = (r + k) % tp;
    std::unique_ptr<Work> exchange;
    if (k + 1 < tp) {
      const std::array<P2POp, 2> ops{
          P2POp{P2POp::Kind::send, block_of(held).codes, (r - 1 + tp) % tp},
          P2POp{P2POp::Kind::recv, fp8_row_block(total, (held + 1) % tp, n).codes, (r + 1) % tp}};
      exchange = env.tp.batch_p2p(env.stream, ops);
    }
    Tensor y_block = row_block(y, held, n);
    // The forward GEMM (W held (out, in), transposed) accumulates fast as TE's fprop; the
    // row-parallel dgrad (W as held) splits its accumulator.
    env.device.fp8_gemm(env.stream, {.a = block_of(held),
                                     .b = w,
                                     .c = y_block,
                                     .transpose_b = transpose_w,
                                     .split_accumulator = !transpose_w});
    if (exchange) exchange->wait();
  }
  if (gathered) {
    Fp8Tensor own = fp8_row_block(total, r, n);
    env.device.copy(env.stream, x.codes, own.codes);
    *gathered = total;
  }
  return y;
}

Tensor fp8_gemm_pipelined_reduce_scatter(ModelEnv& env, const Fp8Tensor& x, const Fp8Tensor& w) {
  const int tp = env.tp.size(), r = env.tp.rank();
  const std::int64_t n = x.rows / tp, out_cols = w.rows;
  const LibraryCall call(env);
  const SplitGemm blocks(env);
  Tensor sum;
  std::unique_ptr<Work> exchange;
  Tensor received;
  for (int k = 0; k < tp; ++k) {
    const int block = ((r - 1 - k) % tp + tp) % tp;
    Tensor part = allocate_like(env, Shape{n, out_cols});
    env.device.fp8_gemm(env.stream, {.a = fp8_row_block(x, block, n),
                                     .b = w,
                                     .c = part,
                                     .transpose_b = true,
                                     .split_accumulator = false});  // TE's fprop
    if (exchange) {
      exchange->wait();
      env.device.add(env.stream, part, received, part);
    }
    sum = part;
    if (k + 1 < tp) {
      received = allocate_like(env, Shape{n, out_cols});
      const std::array<P2POp, 2> ops{P2POp{P2POp::Kind::send, sum, (r + 1) % tp},
                                     P2POp{P2POp::Kind::recv, received, (r - 1 + tp) % tp}};
      exchange = env.tp.batch_p2p(env.stream, ops);
    } else {
      exchange.reset();
    }
  }
  return sum;
}

Tensor ring_exchange_gather_gemm(ModelEnv& env, const Tensor& x, const Tensor& w, bool transpose_w,
                                 Tensor* gathered) {
  const int tp = env.tp.size(), r = env.tp.rank();
  const std::int64_t n = x.shape[0];
  const std::int64_t out_cols = transpose_w ? w.shape[0] : w.shape[1];
  const LibraryCall call(env);
  const SplitGemm blocks(env);
  Tensor y = allocate_like(env, Shape{n * tp, out_cols});
  // Blocks arrive into their place in the gathered input; this rank's own stays in x.
  Tensor total = allocate_like(env, Shape{n * tp, x.shape[1]});
  auto block_of = [&](int j) { return j == r ? x : row_block(total, j, n); };
  for (int k = 0; k < tp; ++k) {
    const int held = (r + k) % tp;
    std::unique_ptr<Work> exchange;
    if (k + 1 < tp) {  // pass the held block on while it is multiplied
      const std::array<P2POp, 2> ops{
          P2POp{P2POp::Kind::send, block_of(held), (r - 1 + tp) % tp},
          P2POp{P2POp::Kind::recv, row_block(total, (held + 1) % tp, n), (r + 1) % tp}};
      exchange = env.tp.batch_p2p(env.stream, ops);
    }
    Tensor y_block = row_block(y, held, n);
    env.device.gemm(env.stream,
                    {.a = block_of(held), .b = w, .c = y_block, .transpose_b = transpose_w});
    if (exchange) exchange->wait();
  }
  if (gathered) {
    Tensor own = row_block(total, r, n);
    env.device.copy(env.stream, x, own);
    *gathered = total;
  }
  return y;
}

Tensor gemm_pipelined_reduce_scatter(ModelEnv& env, const Tensor& x, const Tensor& w) {
  const int tp = env.tp.size(), r = env.tp.rank();
  const std::int64_t n = x.shape[0] / tp, out_cols = w.shape[0];
  const LibraryCall call(env);
  const SplitGemm blocks(env);
  Tensor sum;  // the running partial sum this rank passes on
  std::unique_ptr<Work> exchange;
  Tensor received;
  for (int k = 0; k < tp; ++k) {
    const int block = ((r - 1 - k) % tp + tp) % tp;
    Tensor part = allocate_like(env, Shape{n, out_cols});
    env.device.gemm(env.stream,
                    {.a = row_block(x, block, n), .b = w, .c = part, .transpose_b = true});
    if (exchange) {  // the previous step's partial sum of this block, from rank r − 1
      exchange->wait();
      env.device.add(env.stream, part, received, part);
    }
    sum = part;
    if (k + 1 < tp) {
      received = allocate_like(env, Shape{n, out_cols});
      const std::array<P2POp, 2> ops{P2POp{P2POp::Kind::send, sum, (r + 1) % tp},
                                     P2POp{P2POp::Kind::recv, received, (r - 1 + tp) % tp}};
      exchange = env.tp.batch_p2p(env.stream, ops);
    } else {
      exchange.reset();
    }
  }
  return sum;  // after tp steps: the sum of this rank's own rows
}

}  // namespace tandem
