// FP8 kernels: Transformer Engine's casts with the arithmetic of kernels/math/fp8.hpp (the
// rounding the CPU tests check), in four launches — each scale block's amax (one thread
// block per scale block, a fixed reduction order), the tensor's amax, each block's scale by
// math::fp8_scale_for, then one code per element — and the inverse (decoding into fp32 or
// bf16) and delayed scaling's history update. Plain CUDA, no FP8 tensor-core intrinsics:
// the FP8 GEMM of the cuda binding runs on cuBLASLt's FP8 tensor cores where it can
// (fp8_lt_plan.hpp), else decodes its operands and runs cuBLAS on them.
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/fp8.hpp"

namespace tandem::kernels::cuda {
namespace {

struct Grid {
  std::int64_t rows, cols;              // of the matrix
  std::int64_t block_rows, block_cols;  // extents (whole dimension when 0 was asked)
  std::int64_t grid_cols;               // scale blocks along a row
  __device__ std::int64_t block_of(std::int64_t i) const {
    return (i / cols) / block_rows * grid_cols + (i % cols) / block_cols;
  }
};

Grid make_grid(std::int64_t rows, std::int64_t cols, cpu::Fp8Blocks b) {
  const std::int64_t br = b.rows > 0 ? b.rows : rows, bc = b.cols > 0 ? b.cols : cols;
  return {rows, cols, br > 0 ? br : 1, bc > 0 ? bc : 1, bc > 0 ? (cols + bc - 1) / bc : 1};
}

// One thread block per scale block: its amax, the threads' partial maxima combined in
// thread order through shared memory.
__global__ void block_amax_kernel(ConstFloats in, Grid g, float* block_amax) {
  const std::int64_t b = blockIdx.x;
  const std::int64_t r0 = b / g.grid_cols * g.block_rows, c0 = b % g.grid_cols * g.block_cols;
  const std::int64_t r1 = r0 + g.block_rows < g.rows ? r0 + g.block_rows : g.rows;
  const std::int64_t c1 = c0 + g.block_cols < g.cols ? c0 + g.block_cols : g.cols;
  const std::int64_t width = c1 - c0, count = (r1 - r0) * width;
  float m = 0.0f;
  for (std::int64_t e = threadIdx.x; e < count; e += blockDim.x)
    m = math::amax_step(m, load(in, (r0 + e / width) * g.cols + c0 + e % width));
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float all = 0.0f;
    for (int t = 0; t < blockDim.x; ++t) all = math::amax_step(all, partial[t]);
    block_amax[b] = all;
  }
}

// Threads for a scale block of `elements`: a warp for MX's 32, up to kThreads, so small
// blocks do not leave most of a 256-thread block idle.
int amax_threads(std::int64_t elements) {
  int threads = 32;
  while (threads < kThreads && threads < elements) threads *= 2;
  return threads;
}

// Raises *amax to the tensor's (a step's quantizations max-accumulate into it): one thread
// block of kThreads, each thread over a stride of the block maxima, then combined in thread
// order (a blockwise recipe's tensor has up to millions of scale blocks).
__global__ void tensor_amax_kernel(const float* block_amax, std::int64_t blocks, float* amax) {
  float m = 0.0f;
  for (std::int64_t b = threadIdx.x; b < blocks; b += blockDim.x)
    m = math::amax_step(m, block_amax[b]);
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float all = *amax;
    for (int t = 0; t < blockDim.x; ++t) all = math::amax_step(all, partial[t]);
    *amax = all;
  }
}

// block_amax is overwritten with each block's scale.
__global__ void scale_kernel(float* block_amax, std::int64_t blocks, math::Fp8ScaleRule rule,
                             const float* given, math::Fp8Format format, float* scale_inv) {
  TANDEM_GRID_STRIDE(b, blocks) {
    const float scale = math::fp8_scale_for(rule, block_amax[b], given ? *given : 0.0f, format);
    block_amax[b] = scale;
    scale_inv[b] = 1.0f / scale;
  }
}

__global__ void encode_kernel(ConstFloats in, Grid g, const float* scale, math::Fp8Format format,
                              std::uint8_t* codes) {
  TANDEM_GRID_STRIDE(i, g.rows * g.cols) {
    codes[i] = math::fp8_encode(load(in, i) * scale[g.block_of(i)], format);
  }
}

__global__ void decode_kernel(const std::uint8_t* codes, const float* scale_inv, Grid g,
                              math::Fp8Format format, Floats out) {
  TANDEM_GRID_STRIDE(i, g.rows * g.cols) {
    store(out, i, math::fp8_decode(codes[i], format) * scale_inv[g.block_of(i)]);
  }
}

// One thread per tensor t: its column of the (length, stride) history shifts down by one row.
__global__ void update_scale_kernel(float* history, std::int64_t length, std::int64_t stride,
                                    std::int64_t n, float* scale, float* amax,
                                    std::uint64_t e5m2_mask, bool use_max, int margin) {
  TANDEM_GRID_STRIDE(t, n) {
    for (std::int64_t i = length - 1; i > 0; --i)
      history[i * stride + t] = history[(i - 1) * stride + t];
    history[t] = amax[t];
    amax[t] = 0.0f;
    float used = history[t];
    if (use_max) {
      used = 0.0f;
      // math::history_amax over a strided column: a NaN entry passed over.
      for (std::int64_t i = 0; i < length; ++i) {
        const float h = history[i * stride + t];
        used = h > used ? h : used;
      }
    }
    const auto format = (e5m2_mask >> t) & 1u ? math::Fp8Format::e5m2 : math::Fp8Format::e4m3;
    scale[t] = math::delayed_scale(used, scale[t], math::fp8_max(format), margin);
  }
}

// One thread per tensor: its scale (from its amax as current scaling picks it, when given)
// and the scale's inverse.
__global__ void compute_scale_kernel(const float* amax, float* scale, float* scale_inv,
                                     std::int64_t n, std::uint64_t e5m2_mask) {
  TANDEM_GRID_STRIDE(t, n) {
    if (amax) {
      const auto format = (e5m2_mask >> t) & 1u ? math::Fp8Format::e5m2 : math::Fp8Format::e4m3;
      scale[t] = math::current_scale(amax[t], math::fp8_max(format));
    }
    scale_inv[t] = 1.0f / scale[t];
  }
}

}  // namespace

std::int64_t fp8_amax_scratch(std::int64_t n) {
  return (n + kAmaxChunk - 1) / kAmaxChunk;
}

void fp8_amax(Context c, ConstFloats x, std::int64_t n, float* amax, float* scratch) {
  if (n == 0) return;
  // Chunks of kAmaxChunk elements, one thread block each, then their maxima in order.
  const Grid g = make_grid(1, n, {1, kAmaxChunk});
  const std::int64_t blocks = fp8_amax_scratch(n);
  block_amax_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, c.stream>>>(x, g, scratch);
  TANDEM_CUDA_CHECK_LAUNCH();
  tensor_amax_kernel<<<1, kThreads, 0, c.stream>>>(scratch, blocks, amax);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void fp8_compute_scale(Context c, const float* amax, float* scale, float* scale_inv, std::int64_t n,
                       std::uint64_t e5m2_mask) {
  if (n < 1 || n > 64) throw std::invalid_argument("fp8_compute_scale: 1 to 64 tensors per call");
  compute_scale_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(amax, scale, scale_inv, n,
                                                               e5m2_mask);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void fp8_quantize(Context c, const Fp8Quantize& q, std::uint8_t* codes, float* scale_inv,
                  float* amax, float* scratch) {
  const Grid g = make_grid(q.rows, q.cols, q.blocks);
  const std::int64_t blocks = ((q.rows + g.block_rows - 1) / g.block_rows) * g.grid_cols;
  if (q.rows * q.cols == 0) return;
  const int threads = amax_threads(g.block_rows * g.block_cols);
  block_amax_kernel<<<static_cast<unsigned int>(blocks), threads, 0, c.stream>>>(q.input, g,
                                                                                 scratch);
  TANDEM_CUDA_CHECK_LAUNCH();
  if (amax) {
    tensor_amax_kernel<<<1, kThreads, 0, c.stream>>>(scratch, blocks, amax);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
  scale_kernel<<<grid_for(blocks), kThreads, 0, c.stream>>>(scratch, blocks, q.rule, q.scale,
                                                            q.format, scale_inv);
  TANDEM_CUDA_CHECK_LAUNCH();
  encode_kernel<<<grid_for(q.rows * q.cols), kThreads, 0, c.stream>>>(q.input, g, scratch, q.format,
                                                                      codes);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void fp8_dequantize(Context c, const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                    std::int64_t cols, math::Fp8Format format, cpu::Fp8Blocks blocks, Floats out) {
  if (rows * cols == 0) return;
  decode_kernel<<<grid_for(rows * cols), kThreads, 0, c.stream>>>(
      codes, scale_inv, make_grid(rows, cols, blocks), format, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

namespace {
// A 32 × 32 tile through shared memory: reads along the rows of `codes` and writes along
// the rows of `out` are both coalesced; a padded row keeps the column reads off one bank.
constexpr int kTile = 32;
__global__ void transpose_kernel(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                                 std::uint8_t* out) {
  __shared__ std::uint8_t tile[kTile][kTile + 4];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const std::int64_t r = r0 + i, col = c0 + threadIdx.x;
    if (r < rows && col < cols) tile[i][threadIdx.x] = codes[r * cols + col];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const std::int64_t col = c0 + i, r = r0 + threadIdx.x;
    if (col < cols && r < rows) out[col * rows + r] = tile[threadIdx.x][i];
  }
}
}  // namespace

void fp8_transpose(Context c, const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                   std::uint8_t* out) {
  if (rows * cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  if (grid.y > 65535u) throw std::invalid_argument("fp8_transpose: more than 65535·32 rows");
  transpose_kernel<<<grid, dim3(kTile, 8), 0, c.stream>>>(codes, rows, cols, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void fp8_update_scale(Context c, float* history, std::int64_t length, std::int64_t stride,
                      std::int64_t n, float* scale, float* amax, std::uint64_t e5m2_mask,
                      bool use_max, int margin) {
  if (n < 1 || n > 64) throw std::invalid_argument("fp8_update_scale: 1 to 64 tensors per call");
  if (stride < n) throw std::invalid_argument("fp8_update_scale: stride below the tensor count");
  update_scale_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(history, length, stride, n, scale,
                                                              amax, e5m2_mask, use_max, margin);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
