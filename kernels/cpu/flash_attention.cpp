// Flash-style attention loops; see flash_attention.hpp. Per-row math is shared with the
// CUDA kernel (kernels/math/flash_attention.hpp); the block products are our GEMMs with
// leading dimensions into the sequence-first tensors, single-threaded inside the
// parallel loop over (batch, head) in forward and (batch, group) in backward (a group's
// key and value gradients then have one writer).
#include "kernels/cpu/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/math/softmax.hpp"

namespace tandem::kernels::cpu {
namespace {

constexpr std::int64_t kBlockQ = 64;
constexpr std::int64_t kBlockK = 64;

// Offsets (elements) and leading dimensions of the grouped layout.
struct Layout {
  FlashShape s;
  std::int64_t VD = s.vd();
  std::int64_t group() const { return math::group_width(s.P, s.HD, VD); }
  std::int64_t kv_group() const { return math::kv_group_width(s.P, s.HD, VD, s.kv_only); }
  std::int64_t ld_src() const { return s.B * s.G * group(); }
  std::int64_t ld_kv() const { return s.B * s.G * kv_group(); }
  std::int64_t ld_out() const { return s.B * s.G * s.P * VD; }
  std::int64_t q(std::int64_t b, std::int64_t h) const {
    return (b * s.G + h / s.P) * group() + (h % s.P) * s.HD;
  }
  std::int64_t k(std::int64_t b, std::int64_t g) const {
    return (b * s.G + g) * kv_group() + math::key_offset(s.P, s.HD, s.kv_only);
  }
  std::int64_t v(std::int64_t b, std::int64_t g) const { return k(b, g) + s.HD; }
  std::int64_t o(std::int64_t b, std::int64_t h) const { return (b * s.G * s.P + h) * VD; }
  std::int64_t lse(std::int64_t b, std::int64_t h) const { return (b * s.G * s.P + h) * s.Tq; }
};

bool visible(const FlashShape& s, std::int64_t i, std::int64_t j) {
  return math::attention_visible(s.mask, s.q_offset + i, s.k_offset + j);
}

// Key blocks past this index are wholly masked for queries up to `last_query` (exclusive end).
std::int64_t key_end(const FlashShape& s, std::int64_t last_query) {
  if (s.mask == math::AttentionMask::none) return s.Tk;
  return std::clamp<std::int64_t>(s.q_offset + last_query - s.k_offset + 1, 0, s.Tk);
}

struct ForwardScratch {
  std::vector<float> scores, acc, max, sum;
  explicit ForwardScratch(std::int64_t hd)
      : scores(kBlockQ * kBlockK),
        acc(static_cast<std::size_t>(kBlockQ * hd)),
        max(kBlockQ),
        sum(kBlockQ) {}
};

void forward_head(const Layout& L, std::int64_t b, std::int64_t h, const float* qs,
                  const float* kvs, float* out, float* lse, ForwardScratch& w) {
  const FlashShape& s = L.s;
  const std::int64_t VD = L.VD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const float* Q = qs + L.q(b, h);
  const float* K = kvs + L.k(b, h / s.P);
  const float* V = kvs + L.v(b, h / s.P);
  for (std::int64_t i0 = 0; i0 < s.Tq; i0 += kBlockQ) {
    const std::int64_t rows = std::min(kBlockQ, s.Tq - i0);
    std::fill(w.acc.begin(), w.acc.end(), 0.0f);
    std::fill(w.max.begin(), w.max.end(), -FLT_MAX);
    std::fill(w.sum.begin(), w.sum.end(), 0.0f);
    if (s.accumulate)
      for (std::int64_t r = 0; r < rows; ++r) {
        math::resume_row(lse[L.lse(b, h) + i0 + r], w.max[r], w.sum[r]);
        if (w.sum[r] == 0) continue;
        const float* o = out + L.o(b, h) + (i0 + r) * L.ld_out();
        std::copy_n(o, VD, w.acc.data() + r * VD);
      }
    const std::int64_t keys = key_end(s, i0 + rows - 1);
    for (std::int64_t j0 = 0; j0 < keys; j0 += kBlockK) {
      const std::int64_t cols = std::min(kBlockK, keys - j0);
      float* S = w.scores.data();
      gemm({.m = rows,
            .n = cols,
            .k = s.HD,
            .transpose_b = true,
            .alpha = scale,
            .lda = L.ld_src(),
            .ldb = L.ld_kv(),
            .ldc = kBlockK},
           Q + i0 * L.ld_src(), K + j0 * L.ld_kv(), S);
      for (std::int64_t r = 0; r < rows; ++r) {
        float* row = S + r * kBlockK;
        float block_max = -FLT_MAX;
        for (std::int64_t c = 0; c < cols; ++c)
          if (visible(s, i0 + r, j0 + c)) block_max = std::max(block_max, row[c]);
        const float m_new = std::max(w.max[r], block_max);
        const float alpha = math::online_rescale(w.max[r], m_new);
        float sum = 0;
        for (std::int64_t c = 0; c < cols; ++c) {
          row[c] = visible(s, i0 + r, j0 + c) ? math::exp_approx(row[c] - m_new) : 0.0f;
          sum += row[c];
        }
        w.sum[r] = w.sum[r] * alpha + sum;
        w.max[r] = m_new;
        float* a = w.acc.data() + r * VD;
        for (std::int64_t d = 0; d < VD; ++d) a[d] *= alpha;
      }
      gemm({.m = rows,
            .n = VD,
            .k = cols,
            .beta = 1.0f,
            .lda = kBlockK,
            .ldb = L.ld_kv(),
            .ldc = VD},
           S, V + j0 * L.ld_kv(), w.acc.data());
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + L.o(b, h) + (i0 + r) * L.ld_out();
      const float inv = w.sum[r] > 0 ? 1.0f / w.sum[r] : 0.0f;
      for (std::int64_t d = 0; d < VD; ++d) o[d] = w.acc[r * VD + d] * inv;
      lse[L.lse(b, h) + i0 + r] = math::row_lse(w.max[r], w.sum[r]);
    }
  }
}

struct BackwardScratch {
  std::vector<float> probs, dS, D;
  BackwardScratch(const FlashShape& s)
      : probs(kBlockQ * kBlockK), dS(kBlockQ * kBlockK), D(static_cast<std::size_t>(s.P * s.Tq)) {}
};

void zero_slot(float* base, std::int64_t rows, std::int64_t ld, std::int64_t hd) {
  for (std::int64_t t = 0; t < rows; ++t) std::fill_n(base + t * ld, hd, 0.0f);
}

void backward_group(const Layout& L, std::int64_t b, std::int64_t g, const float* dout,
                    const float* qs, const float* kvs, const float* out, const float* lse,
                    float* dqs, float* dkvs, BackwardScratch& w) {
  const FlashShape& s = L.s;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  const std::int64_t ld = L.ld_src(), ldk = L.ld_kv(), ldo = L.ld_out(), VD = L.VD;
  const float* K = kvs + L.k(b, g);
  const float* V = kvs + L.v(b, g);
  float* dK = dkvs + L.k(b, g);
  float* dV = dkvs + L.v(b, g);
  if (!s.accumulate) {
    zero_slot(dK, s.Tk, ldk, s.HD);
    zero_slot(dV, s.Tk, ldk, VD);
  }
  for (std::int64_t p = 0; p < s.P; ++p) {
    const std::int64_t h = g * s.P + p;
    if (!s.accumulate) zero_slot(dqs + L.q(b, h), s.Tq, ld, s.HD);
    // D_i = Σ_d dO·O = Σ_j P_ij·dP_ij, the softmax backward's row dot product.
    for (std::int64_t i = 0; i < s.Tq; ++i) {
      const float* o = out + L.o(b, h) + i * ldo;
      const float* d_o = dout + L.o(b, h) + i * ldo;
      float dot = 0;
      for (std::int64_t d = 0; d < VD; ++d) dot += o[d] * d_o[d];
      w.D[static_cast<std::size_t>(p * s.Tq + i)] = dot;
    }
  }
  for (std::int64_t j0 = 0; j0 < s.Tk; j0 += kBlockK) {
    const std::int64_t cols = std::min(kBlockK, s.Tk - j0);
    // Queries before this one see none of the block's keys (causal).
    std::int64_t first = 0;
    if (s.mask == math::AttentionMask::causal)
      first = std::clamp<std::int64_t>(s.k_offset + j0 - s.q_offset, 0, s.Tq) / kBlockQ * kBlockQ;
    for (std::int64_t p = 0; p < s.P; ++p) {
      const std::int64_t h = g * s.P + p;
      const float* Q = qs + L.q(b, h);
      float* dQ = dqs + L.q(b, h);
      const float* dO = dout + L.o(b, h);
      const float* row_lse = lse + L.lse(b, h);
      for (std::int64_t i0 = first; i0 < s.Tq; i0 += kBlockQ) {
        const std::int64_t rows = std::min(kBlockQ, s.Tq - i0);
        float* Pm = w.probs.data();
        float* dS = w.dS.data();
        gemm({.m = rows,
              .n = cols,
              .k = s.HD,
              .transpose_b = true,
              .alpha = scale,
              .lda = ld,
              .ldb = ldk,
              .ldc = kBlockK},
             Q + i0 * ld, K + j0 * ldk, Pm);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c) {
            float& x = Pm[r * kBlockK + c];
            x = visible(s, i0 + r, j0 + c) ? math::prob_from_lse(x, row_lse[i0 + r]) : 0.0f;
          }
        // dV_j += Pᵀ·dO_i
        gemm({.m = cols,
              .n = VD,
              .k = rows,
              .transpose_a = true,
              .beta = 1.0f,
              .lda = kBlockK,
              .ldb = ldo,
              .ldc = ldk},
             Pm, dO + i0 * ldo, dV + j0 * ldk);
        // dP = dO_i·V_jᵀ, then dS = P ⊙ (dP − D)·scale in place
        gemm({.m = rows,
              .n = cols,
              .k = VD,
              .transpose_b = true,
              .lda = ldo,
              .ldb = ldk,
              .ldc = kBlockK},
             dO + i0 * ldo, V + j0 * ldk, dS);
        for (std::int64_t r = 0; r < rows; ++r) {
          const float D = w.D[static_cast<std::size_t>(p * s.Tq + i0 + r)];
          for (std::int64_t c = 0; c < cols; ++c)
            dS[r * kBlockK + c] =
                math::softmax_input_grad(Pm[r * kBlockK + c], dS[r * kBlockK + c], D) * scale;
        }
        // dQ_i += dS·K_j;  dK_j += dSᵀ·Q_i
        gemm({.m = rows, .n = s.HD, .k = cols, .beta = 1.0f, .lda = kBlockK, .ldb = ldk, .ldc = ld},
             dS, K + j0 * ldk, dQ + i0 * ld);
        gemm({.m = cols,
              .n = s.HD,
              .k = rows,
              .transpose_a = true,
              .beta = 1.0f,
              .lda = kBlockK,
              .ldb = ld,
              .ldc = ldk},
             dS, Q + i0 * ld, dK + j0 * ldk);
      }
    }
  }
}

}  // namespace

void flash_attention_forward(FlashShape s, const float* q_source, const float* kv_source,
                             float* out, float* lse) {
  const Layout L{s};
  const std::int64_t tasks = s.B * s.G * s.P;
#pragma omp parallel
  {
    ForwardScratch w(s.vd());
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < tasks; ++bh)
      forward_head(L, bh / (s.G * s.P), bh % (s.G * s.P), q_source, kv_source, out, lse, w);
  }
}

void flash_attention_backward(FlashShape s, const float* dout, const float* q_source,
                              const float* kv_source, const float* out, const float* lse,
                              float* grad_q_source, float* grad_kv_source) {
  const Layout L{s};
  const std::int64_t tasks = s.B * s.G;
#pragma omp parallel
  {
    BackwardScratch w(s);
#pragma omp for schedule(static)
    for (std::int64_t bg = 0; bg < tasks; ++bg)
      backward_group(L, bg / s.G, bg % s.G, dout, q_source, kv_source, out, lse, grad_q_source,
                     grad_kv_source, w);
  }
}

double flash_visible_pairs(FlashShape s) {
  double pairs = 0;
  for (std::int64_t i = 0; i < s.Tq; ++i) pairs += static_cast<double>(key_end(s, i));
  return pairs;
}

}  // namespace tandem::kernels::cpu
