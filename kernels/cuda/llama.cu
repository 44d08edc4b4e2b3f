// The Llama-style ops on the GPU: RMSNorm (a warp per row, γ's gradient as column sums in
// double), SwiGLU and RoPE (grid-stride loops), and grouped-query fused attention. The
// element math is kernels/math/{rms_norm,swiglu,rope,flash_attention}.hpp, the functions
// the CPU kernels call. The attention kernels are the simple form of the online softmax —
// one thread per query row forward; backward one thread per query row for dQ and one per
// key row for dK and dV, each recomputing the probabilities from the saved log-sum-exp —
// so no float atomics (results repeat bitwise) and no (Tq, Tk) buffer; they are correct
// rather than fast (a tiled tensor-core kernel would replace them, same contract).
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_util.cuh"
#include "kernels/math/flash_attention.hpp"
#include "kernels/math/rms_norm.hpp"
#include "kernels/math/rope.hpp"
#include "kernels/math/softmax.hpp"
#include "kernels/math/swiglu.hpp"

namespace tandem::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

__global__ void rms_forward_kernel(cpu::RmsNormShape s, ConstFloats in, ConstFloats gamma,
                                   Floats out, float* rstd, float epsilon) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= s.rows) return;
  const int lane = threadIdx.x;
  const std::int64_t base = r * s.C;
  float squares = 0;
  for (std::int64_t c = lane; c < s.C; c += 32) {
    const float x = load(in, base + c);
    squares += x * x;
  }
  const float rs = math::rms_norm_rstd(warp_sum(squares), s.C, epsilon);
  for (std::int64_t c = lane; c < s.C; c += 32)
    store(out, base + c, load(in, base + c) * rs * load(gamma, c));
  if (lane == 0) rstd[r] = rs;
}

__global__ void rms_input_grad_kernel(cpu::RmsNormShape s, ConstFloats dout, ConstFloats in,
                                      ConstFloats gamma, const float* rstd, Floats din) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= s.rows) return;
  const int lane = threadIdx.x;
  const std::int64_t base = r * s.C;
  const float rs = rstd[r];
  float dnorm_norm = 0;
  for (std::int64_t c = lane; c < s.C; c += 32)
    dnorm_norm += load(dout, base + c) * load(gamma, c) * (load(in, base + c) * rs);
  const float mean = warp_sum(dnorm_norm) / static_cast<float>(s.C);
  for (std::int64_t c = lane; c < s.C; c += 32)
    store(din, base + c,
          math::rms_norm_input_grad(load(dout, base + c) * load(gamma, c), load(in, base + c) * rs,
                                    mean, rs));
}

constexpr int kColumns = 32;
constexpr int kRowLanes = 8;

__global__ void rms_gamma_grad_kernel(cpu::RmsNormShape s, ConstFloats dout, ConstFloats in,
                                      const float* rstd, Floats dgamma) {
  __shared__ double partial[kRowLanes][kColumns];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  double sum = 0;
  if (col < s.C)
    for (std::int64_t r = threadIdx.y; r < s.rows; r += kRowLanes)
      sum += static_cast<double>(load(dout, r * s.C + col) * (load(in, r * s.C + col) * rstd[r]));
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= s.C) return;
  double total = 0;
  for (int k = 0; k < kRowLanes; ++k) total += partial[k][threadIdx.x];
  store(dgamma, col, static_cast<float>(static_cast<double>(load(dgamma, col)) + total));
}

__global__ void swiglu_forward_kernel(ConstFloats in, Floats out, std::int64_t rows,
                                      std::int64_t F) {
  TANDEM_GRID_STRIDE(i, rows * F) {
    const std::int64_t r = i / F, c = i % F;
    store(out, i, math::swiglu(load(in, r * 2 * F + c), load(in, r * 2 * F + F + c)));
  }
}

__global__ void swiglu_backward_kernel(ConstFloats dout, ConstFloats in, Floats din,
                                       std::int64_t rows, std::int64_t F) {
  TANDEM_GRID_STRIDE(i, rows * F) {
    const std::int64_t r = i / F, c = i % F;
    const float dy = load(dout, i), g = load(in, r * 2 * F + c), u = load(in, r * 2 * F + F + c);
    store(din, r * 2 * F + c, math::swiglu_gate_grad(dy, g, u));
    store(din, r * 2 * F + F + c, math::swiglu_up_grad(dy, g));
  }
}

__global__ void rope_kernel(cpu::RopeShape s, Floats x, bool inverse) {
  const std::int64_t half = s.rotary_dim / 2, heads = s.groups * s.per_group;
  TANDEM_GRID_STRIDE(e, s.T * s.B * heads * half) {
    const std::int64_t i = e % half, row_head = e / half;  // (t, b, head)
    if ((row_head % heads) % s.per_group >= s.rotate_per_group) continue;
    const std::int64_t t = row_head / (s.B * heads);
    const float theta = math::rope_angle(s.position_offset + t, i, s.rotary_dim, s.base);
    const std::int64_t at = row_head * s.head_dim + s.first_feature;
    const auto pair = math::rope_pair(i, s.rotary_dim, s.interleaved);
    const auto r = math::rope_rotate(load(x, at + pair.first), load(x, at + pair.second),
                                     cosf(theta), sinf(theta), inverse);
    store(x, at + pair.first, r.first);
    store(x, at + pair.second, r.second);
  }
}

// ---- fused attention -----------------------------------------------------------------------

constexpr int kMaxHeadDim = 256;

struct Layout {
  cpu::FlashShape s;
  std::int64_t VD = s.vd();
  __device__ std::int64_t group() const { return math::group_width(s.P, s.HD, VD); }
  __device__ std::int64_t kv_group() const {
    return math::kv_group_width(s.P, s.HD, VD, s.kv_only);
  }
  __device__ std::int64_t ld_src() const { return s.B * s.G * group(); }
  __device__ std::int64_t ld_kv() const { return s.B * s.G * kv_group(); }
  __device__ std::int64_t ld_out() const { return s.B * s.G * s.P * VD; }
  __device__ std::int64_t q(std::int64_t t, std::int64_t b, std::int64_t h) const {
    return t * ld_src() + (b * s.G + h / s.P) * group() + (h % s.P) * s.HD;
  }
  __device__ std::int64_t k(std::int64_t t, std::int64_t b, std::int64_t g) const {
    return t * ld_kv() + (b * s.G + g) * kv_group() + math::key_offset(s.P, s.HD, s.kv_only);
  }
  __device__ std::int64_t v(std::int64_t t, std::int64_t b, std::int64_t g) const {
    return k(t, b, g) + s.HD;
  }
  __device__ std::int64_t o(std::int64_t t, std::int64_t b, std::int64_t h) const {
    return t * ld_out() + (b * s.G * s.P + h) * VD;
  }
  __device__ std::int64_t lse(std::int64_t i, std::int64_t b, std::int64_t h) const {
    return (b * s.G * s.P + h) * s.Tq + i;
  }
  __device__ bool visible(std::int64_t i, std::int64_t j) const {
    return math::attention_visible(s.mask, s.q_offset + i, s.k_offset + j);
  }
  __device__ float score(ConstFloats qs, ConstFloats kvs, std::int64_t i, std::int64_t j,
                         std::int64_t b, std::int64_t h, float scale) const {
    float dot = 0;
    const std::int64_t qa = q(i, b, h), ka = k(j, b, h / s.P);
    for (std::int64_t d = 0; d < s.HD; ++d) dot += load(qs, qa + d) * load(kvs, ka + d);
    return dot * scale;
  }
};

// One thread per (b, h, i).
__global__ void flash_forward_kernel(Layout L, ConstFloats qs, ConstFloats kvs, Floats out,
                                     float* lse) {
  const cpu::FlashShape& s = L.s;
  const float scale = rsqrtf(static_cast<float>(s.HD));
  TANDEM_GRID_STRIDE(e, s.B * s.G * s.P * s.Tq) {
    const std::int64_t i = e % s.Tq, bh = e / s.Tq, h = bh % (s.G * s.P), b = bh / (s.G * s.P);
    const std::int64_t VD = L.VD;
    float acc[kMaxHeadDim];
    for (std::int64_t d = 0; d < VD; ++d) acc[d] = 0;
    float m = -FLT_MAX, l = 0;
    if (s.accumulate) {
      math::resume_row(lse[L.lse(i, b, h)], m, l);
      if (l > 0)
        for (std::int64_t d = 0; d < VD; ++d) acc[d] = load(out, L.o(i, b, h) + d);
    }
    for (std::int64_t j = 0; j < s.Tk; ++j) {
      if (!L.visible(i, j)) continue;
      const float sc = L.score(qs, kvs, i, j, b, h, scale);
      const float m_new = sc > m ? sc : m;
      const float alpha = math::online_rescale(m, m_new);
      const float p = math::exp_approx(sc - m_new);
      l = l * alpha + p;
      m = m_new;
      const std::int64_t va = L.v(j, b, h / s.P);
      for (std::int64_t d = 0; d < VD; ++d) acc[d] = acc[d] * alpha + p * load(kvs, va + d);
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (std::int64_t d = 0; d < VD; ++d) store(out, L.o(i, b, h) + d, acc[d] * inv);
    lse[L.lse(i, b, h)] = math::row_lse(m, l);
  }
}

// D = Σ_d dO·O per (b, h, i), and dQ of that row.
__global__ void flash_dq_kernel(Layout L, ConstFloats dout, ConstFloats qs, ConstFloats kvs,
                                ConstFloats out, const float* lse, Floats dqs) {
  const cpu::FlashShape& s = L.s;
  const float scale = rsqrtf(static_cast<float>(s.HD));
  TANDEM_GRID_STRIDE(e, s.B * s.G * s.P * s.Tq) {
    const std::int64_t i = e % s.Tq, bh = e / s.Tq, h = bh % (s.G * s.P), b = bh / (s.G * s.P);
    const std::int64_t g = h / s.P, oa = L.o(i, b, h), VD = L.VD;
    float D = 0;
    for (std::int64_t d = 0; d < VD; ++d) D += load(dout, oa + d) * load(out, oa + d);
    float dq[kMaxHeadDim];
    const std::int64_t qa = L.q(i, b, h);
    for (std::int64_t d = 0; d < s.HD; ++d) dq[d] = s.accumulate ? load(dqs, qa + d) : 0.0f;
    const float row_lse = lse[L.lse(i, b, h)];
    for (std::int64_t j = 0; j < s.Tk; ++j) {
      if (!L.visible(i, j)) continue;
      const float p = math::prob_from_lse(L.score(qs, kvs, i, j, b, h, scale), row_lse);
      float dp = 0;
      const std::int64_t va = L.v(j, b, g), ka = L.k(j, b, g);
      for (std::int64_t d = 0; d < VD; ++d) dp += load(dout, oa + d) * load(kvs, va + d);
      const float ds = math::softmax_input_grad(p, dp, D) * scale;
      for (std::int64_t d = 0; d < s.HD; ++d) dq[d] += ds * load(kvs, ka + d);
    }
    for (std::int64_t d = 0; d < s.HD; ++d) store(dqs, qa + d, dq[d]);
  }
}

// dK and dV of key row j of group g, summed over the group's query heads.
__global__ void flash_dkv_kernel(Layout L, ConstFloats dout, ConstFloats qs, ConstFloats kvs,
                                 ConstFloats out, const float* lse, Floats dkvs) {
  const cpu::FlashShape& s = L.s;
  const float scale = rsqrtf(static_cast<float>(s.HD));
  TANDEM_GRID_STRIDE(e, s.B * s.G * s.Tk) {
    const std::int64_t j = e % s.Tk, bg = e / s.Tk, g = bg % s.G, b = bg / s.G;
    float dk[kMaxHeadDim], dv[kMaxHeadDim];
    const std::int64_t va = L.v(j, b, g), ka = L.k(j, b, g), VD = L.VD;
    for (std::int64_t d = 0; d < s.HD; ++d) dk[d] = s.accumulate ? load(dkvs, ka + d) : 0.0f;
    for (std::int64_t d = 0; d < VD; ++d) dv[d] = s.accumulate ? load(dkvs, va + d) : 0.0f;
    for (std::int64_t p_ = 0; p_ < s.P; ++p_) {
      const std::int64_t h = g * s.P + p_;
      for (std::int64_t i = 0; i < s.Tq; ++i) {
        if (!L.visible(i, j)) continue;
        const std::int64_t oa = L.o(i, b, h), qa = L.q(i, b, h);
        const float p =
            math::prob_from_lse(L.score(qs, kvs, i, j, b, h, scale), lse[L.lse(i, b, h)]);
        float D = 0, dp = 0;
        for (std::int64_t d = 0; d < VD; ++d) {
          const float g_o = load(dout, oa + d);
          D += g_o * load(out, oa + d);
          dp += g_o * load(kvs, va + d);
        }
        const float ds = math::softmax_input_grad(p, dp, D) * scale;
        for (std::int64_t d = 0; d < VD; ++d) dv[d] += p * load(dout, oa + d);
        for (std::int64_t d = 0; d < s.HD; ++d) dk[d] += ds * load(qs, qa + d);
      }
    }
    for (std::int64_t d = 0; d < s.HD; ++d) store(dkvs, ka + d, dk[d]);
    for (std::int64_t d = 0; d < VD; ++d) store(dkvs, va + d, dv[d]);
  }
}

unsigned int row_blocks(std::int64_t rows) {
  return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

void check_head_dim(const cpu::FlashShape& s) {
  if (s.HD > kMaxHeadDim || s.vd() > kMaxHeadDim)
    throw std::invalid_argument("flash_attention (cuda): head_dim " + std::to_string(s.HD) +
                                " or value head_dim " + std::to_string(s.vd()) + " exceeds " +
                                std::to_string(kMaxHeadDim));
}

}  // namespace

void rms_norm_forward(Context c, cpu::RmsNormShape s, ConstFloats in, ConstFloats gamma, Floats out,
                      float* rstd, float epsilon) {
  if (s.rows == 0) return;
  rms_forward_kernel<<<row_blocks(s.rows), dim3(32, kRowsPerBlock), 0, c.stream>>>(
      s, in, gamma, out, rstd, epsilon);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(Context c, cpu::RmsNormShape s, ConstFloats dout, ConstFloats in,
                       ConstFloats gamma, const float* rstd, Floats din, Floats dgamma) {
  if (s.rows == 0 || s.C == 0) return;
  rms_input_grad_kernel<<<row_blocks(s.rows), dim3(32, kRowsPerBlock), 0, c.stream>>>(
      s, dout, in, gamma, rstd, din);
  TANDEM_CUDA_CHECK_LAUNCH();
  const auto blocks = static_cast<unsigned int>((s.C + kColumns - 1) / kColumns);
  rms_gamma_grad_kernel<<<blocks, dim3(kColumns, kRowLanes), 0, c.stream>>>(s, dout, in, rstd,
                                                                            dgamma);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(Context c, ConstFloats in, Floats out, std::int64_t rows, std::int64_t F) {
  if (rows * F == 0) return;
  swiglu_forward_kernel<<<grid_for(rows * F), kThreads, 0, c.stream>>>(in, out, rows, F);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(Context c, ConstFloats dout, ConstFloats in, Floats din, std::int64_t rows,
                     std::int64_t F) {
  if (rows * F == 0) return;
  swiglu_backward_kernel<<<grid_for(rows * F), kThreads, 0, c.stream>>>(dout, in, din, rows, F);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void rope_apply(Context c, cpu::RopeShape s, Floats x, bool inverse) {
  const std::int64_t n = s.T * s.B * s.groups * s.per_group * (s.rotary_dim / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, c.stream>>>(s, x, inverse);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void flash_attention_forward(Context c, cpu::FlashShape s, ConstFloats q_source,
                             ConstFloats kv_source, Floats out, float* lse) {
  check_head_dim(s);
  const std::int64_t n = s.B * s.G * s.P * s.Tq;
  if (n == 0) return;
  flash_forward_kernel<<<grid_for(n, 128), 128, 0, c.stream>>>(Layout{s}, q_source, kv_source, out,
                                                               lse);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void flash_attention_backward(Context c, cpu::FlashShape s, ConstFloats dout, ConstFloats q_source,
                              ConstFloats kv_source, ConstFloats out, const float* lse,
                              Floats grad_q_source, Floats grad_kv_source) {
  check_head_dim(s);
  const std::int64_t rows = s.B * s.G * s.P * s.Tq, keys = s.B * s.G * s.Tk;
  if (rows > 0) {
    flash_dq_kernel<<<grid_for(rows, 128), 128, 0, c.stream>>>(Layout{s}, dout, q_source, kv_source,
                                                               out, lse, grad_q_source);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
  if (keys > 0) {
    flash_dkv_kernel<<<grid_for(keys, 128), 128, 0, c.stream>>>(
        Layout{s}, dout, q_source, kv_source, out, lse, grad_kv_source);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tandem::kernels::cuda
