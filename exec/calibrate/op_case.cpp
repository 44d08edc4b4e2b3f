// make_op_case: the tensors and the call of each Device op at an OpShape; see op_case.hpp.
#include "exec/calibrate/op_case.hpp"

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace tandem::calibrate {
namespace {

// Allocates the tensors of a case in order and fills them through Device::upload, so the
// values reach any binding (the cuda one converts to bf16 on the way).
class Tensors {
 public:
  Tensors(Device& device, std::uint64_t seed) : device_(device), state_(seed) {}

  // Uniform values in [lo, hi).
  void floats(Shape shape, DType dtype, float lo, float hi) {
    Tensor t = device_.allocate(shape, dtype);
    device_.upload(device_.default_stream(), t, [&](std::span<float> v) {
      for (float& x : v) x = lo + (hi - lo) * next_unit();
    });
    tensors_.push_back(std::move(t));
  }
  // Uniform ids in [0, below).
  void ints(Shape shape, std::int64_t below) {
    Tensor t = device_.allocate(shape, DType::int32);
    device_.upload(device_.default_stream(), t, [&](std::span<std::int32_t> v) {
      for (auto& x : v)
        x = static_cast<std::int32_t>(next_unit() * static_cast<double>(below)) %
            static_cast<std::int32_t>(below);
    });
    tensors_.push_back(std::move(t));
  }
  std::vector<Tensor> take() { return std::move(tensors_); }

 private:
  float next_unit() {  // splitmix64 → [0, 1)
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) / static_cast<float>(1ULL << 24);
  }

  Device& device_;
  std::uint64_t state_;
  std::vector<Tensor> tensors_;
};

void require_positive(const OpShape& s,
                      std::initializer_list<std::pair<const char*, std::int64_t>> sizes) {
  for (const auto& [name, value] : sizes)
    if (value < 1)
      throw std::invalid_argument("calibrate: " + s.op + " needs " + name + " ≥ 1, got " +
                                  std::to_string(value));
}

// (m, n) for row ops, (m) for whole-buffer ops where n is 0.
Shape rows_shape(const OpShape& s) {
  return s.n > 0 ? Shape{s.m, s.n} : Shape{s.m};
}
std::int64_t columns(const OpShape& s) {
  return s.n > 0 ? s.n : 1;
}

using T = std::vector<Tensor>;

// Each family builds the ops it knows and gives nullopt for the others.
// gemm, attention and its backward.
std::optional<OpCase> matrix_case(Device& device, const OpShape& s, const OpCaseOptions&,
                                  Tensors& t) {
  const DType d = s.dtype;
  const std::int64_t m = s.m, n = columns(s);
  if (s.op == "gemm") {
    require_positive(s, {{"n", s.n}, {"k", s.k}});
    t.floats({m, s.k}, d, -1, 1);  // A
    t.floats({s.k, n}, d, -1, 1);  // B
    t.floats({m, n}, d, 0, 0);     // C
    const std::int64_t batch = s.batch;
    return OpCase{device, t.take(), [batch](Device& dev, Stream& st, T& x) {
                    for (std::int64_t b = 0; b < batch; ++b)
                      dev.gemm(st, {.a = x[0], .b = x[1], .c = x[2]});
                  }};
  }
  if (s.op == "attention" || s.op == "attention_backward") {
    require_positive(s, {{"k", s.k}});
    const std::int64_t seq = s.m, heads = s.batch, hd = s.k;
    const Shape qkv{seq, 1, 3, heads, hd}, out{seq, 1, heads, hd}, probs{1, heads, seq, seq};
    if (s.op == "attention") {
      t.floats(qkv, d, -1, 1);
      t.floats(out, d, 0, 0);
      t.floats(probs, d, 0, 0);
      return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                      dev.attention(st, {.qkv = x[0], .output = x[1], .probs = x[2]});
                    }};
    }
    t.floats(out, d, -1, 1);  // grad_output
    t.floats(qkv, d, -1, 1);
    t.floats(probs, d, 0, 1.0f / static_cast<float>(seq));
    t.floats(qkv, d, 0, 0);  // grad_qkv
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.attention_backward(
                        st, {.grad_output = x[0], .qkv = x[1], .probs = x[2], .grad_qkv = x[3]});
                  }};
  }
  return std::nullopt;
}

// The Llama-style ops. rms_norm, swiglu: m rows of n columns (swiglu: n = F, its input has
// 2F). rope: m = T·B rows, n = rotated features per row, k = rotary_dim (one group of n / k
// rotated heads and its value head). flash_attention: batch = B · heads, m = Tq, n = Tk,
// k = head_dim, laid out as B = 1 and one query head per group, causal when Tq = Tk.
std::optional<OpCase> llama_case(Device& device, const OpShape& s, const OpCaseOptions&,
                                 Tensors& t) {
  const DType d = s.dtype;
  const std::int64_t m = s.m, n = columns(s);
  if (s.op == "rms_norm") {
    t.floats({m, n}, d, -1, 1);
    t.floats({n}, d, 0.5f, 1.5f);
    t.floats({m, n}, d, 0, 0);
    t.floats({m}, DType::fp32, 0, 0);
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.rms_norm(st, {.input = x[0], .gamma = x[1], .output = x[2], .rstd = x[3]});
                  }};
  }
  if (s.op == "rms_norm_backward") {
    t.floats({m, n}, d, -1, 1);              // grad_output
    t.floats({m, n}, d, -1, 1);              // input
    t.floats({n}, d, 0.5f, 1.5f);            // gamma
    t.floats({m}, DType::fp32, 0.5f, 2.0f);  // rstd
    t.floats({m, n}, d, 0, 0);               // grad_input
    t.floats({n}, DType::fp32, 0, 0);        // grad_gamma
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.rms_norm_backward(st, {.grad_output = x[0],
                                               .input = x[1],
                                               .gamma = x[2],
                                               .rstd = x[3],
                                               .grad_input = x[4],
                                               .grad_gamma = x[5]});
                  }};
  }
  if (s.op == "swiglu") {
    t.floats({m, 2 * n}, d, -3, 3);
    t.floats({m, n}, d, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.swiglu(st, x[0], x[1]); }};
  }
  if (s.op == "swiglu_backward") {
    t.floats({m, n}, d, -1, 1);
    t.floats({m, 2 * n}, d, -3, 3);
    t.floats({m, 2 * n}, d, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.swiglu_backward(st, x[0], x[1], x[2]); }};
  }
  if (s.op == "rope") {
    const std::int64_t rot = s.k > 0 ? s.k : n;
    if (rot % 2 != 0 || n % rot != 0)
      throw std::invalid_argument("calibrate: rope needs an even k dividing n, got n " +
                                  std::to_string(n) + ", k " + std::to_string(rot));
    const std::int64_t heads = n / rot;
    t.floats({m, 1, 1, heads + 1, rot}, d, -1, 1);
    return OpCase{device, t.take(), [heads, rot](Device& dev, Stream& st, T& x) {
                    dev.rope(st, {.x = x[0], .rotate_per_group = heads, .rotary_dim = rot});
                  }};
  }
  if (s.op == "flash_attention" || s.op == "flash_attention_backward") {
    require_positive(s, {{"k", s.k}});
    const std::int64_t heads = s.batch, hd = s.k, tq = m, tk = n;
    const Shape q{tq, 1, heads, 3, hd}, kv{tk, 1, heads, 3, hd}, out{tq, 1, heads, hd};
    const Shape lse{1, heads, tq};
    if (s.op == "flash_attention") {
      t.floats(q, d, -1, 1);
      t.floats(kv, d, -1, 1);
      t.floats(out, d, 0, 0);
      t.floats(lse, DType::fp32, 0, 0);
      return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                      dev.flash_attention(
                          st, {.q_source = x[0], .kv_source = x[1], .output = x[2], .lse = x[3]});
                    }};
    }
    t.floats(out, d, -1, 1);  // grad_output
    t.floats(q, d, -1, 1);
    t.floats(kv, d, -1, 1);
    t.floats(out, d, -1, 1);           // output
    t.floats(lse, DType::fp32, 1, 2);  // lse
    t.floats(q, d, 0, 0);              // grad_q_source
    t.floats(kv, d, 0, 0);             // grad_kv_source
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.flash_attention_backward(st, {.grad_output = x[0],
                                                      .q_source = x[1],
                                                      .kv_source = x[2],
                                                      .output = x[3],
                                                      .lse = x[4],
                                                      .grad_q_source = x[5],
                                                      .grad_kv_source = x[6]});
                  }};
  }
  return std::nullopt;
}

// The (rows, C) ops: bias, layer norm, GeLU.
std::optional<OpCase> row_case(Device& device, const OpShape& s, const OpCaseOptions&, Tensors& t) {
  const DType d = s.dtype;
  const Shape rows = rows_shape(s);
  const std::int64_t m = s.m, n = columns(s);
  if (s.op == "bias_add" || s.op == "bias_grad") {
    t.floats({m, n}, d, -1, 1);
    t.floats({n}, d, -1, 1);
    if (s.op == "bias_add")
      return OpCase{device, t.take(),
                    [](Device& dev, Stream& st, T& x) { dev.bias_add(st, x[0], x[1]); }};
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.bias_grad(st, x[0], x[1]); }};
  }
  if (s.op == "bias_gelu" || s.op == "bias_gelu_backward" || s.op == "bias_dropout_add") {
    t.floats({m, n}, d, -1, 1);  // grad_output (bias_gelu_backward) or the input
    t.floats({m, n}, d, -3, 3);  // the input (bias_gelu_backward) or the residual
    t.floats({n}, d, -1, 1);     // bias
    t.floats({m, n}, d, 0, 0);   // output
    if (s.op == "bias_gelu")
      return OpCase{device, t.take(),
                    [](Device& dev, Stream& st, T& x) { dev.bias_gelu(st, x[1], x[2], x[3]); }};
    if (s.op == "bias_gelu_backward")
      return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                      dev.bias_gelu_backward(st, x[0], x[1], x[2], x[3]);
                    }};
    // Measured without dropout (tandem's default; dropout's own ops are measured at 0.1).
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.bias_dropout_add(st, {x[0], &x[2], x[1], x[3]});
                  }};
  }
  if (s.op == "dropout" || s.op == "dropout_backward") {
    t.floats({m, n}, d, -1, 1);
    t.floats({m, n}, d, 0, 0);
    // Megatron's default hidden dropout.
    const HiddenDropout p{.p = 0.1f, .seed = 1234, .microbatch = 0, .site = 1};
    if (s.op == "dropout")
      return OpCase{device, t.take(),
                    [p](Device& dev, Stream& st, T& x) { dev.dropout(st, x[0], x[1], p); }};
    return OpCase{device, t.take(),
                  [p](Device& dev, Stream& st, T& x) { dev.dropout_backward(st, x[0], x[1], p); }};
  }
  if (s.op == "layer_norm") {
    t.floats({m, n}, d, -1, 1);     // input
    t.floats({n}, d, 0.5f, 1.5f);   // gamma
    t.floats({n}, d, -0.1f, 0.1f);  // beta
    t.floats({m, n}, d, 0, 0);      // output
    t.floats({m}, DType::fp32, 0, 0);
    t.floats({m}, DType::fp32, 0, 0);
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.layer_norm(st, {.input = x[0],
                                        .gamma = x[1],
                                        .beta = x[2],
                                        .output = x[3],
                                        .mean = x[4],
                                        .rstd = x[5]});
                  }};
  }
  if (s.op == "layer_norm_backward") {
    t.floats({m, n}, d, -1, 1);               // grad_output
    t.floats({m, n}, d, -1, 1);               // input
    t.floats({n}, d, 0.5f, 1.5f);             // gamma
    t.floats({m}, DType::fp32, -0.1f, 0.1f);  // mean
    t.floats({m}, DType::fp32, 0.5f, 1.5f);   // rstd
    t.floats({m, n}, d, 0, 0);                // grad_input
    t.floats({n}, d, 0, 0);                   // grad_gamma
    t.floats({n}, d, 0, 0);                   // grad_beta
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.layer_norm_backward(st, {.grad_output = x[0],
                                                 .input = x[1],
                                                 .gamma = x[2],
                                                 .mean = x[3],
                                                 .rstd = x[4],
                                                 .grad_input = x[5],
                                                 .grad_gamma = x[6],
                                                 .grad_beta = x[7]});
                  }};
  }
  if (s.op == "gelu") {
    t.floats(rows, d, -3, 3);
    t.floats(rows, d, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.gelu(st, x[0], x[1]); }};
  }
  if (s.op == "gelu_backward") {
    t.floats(rows, d, -1, 1);  // grad_output
    t.floats(rows, d, -3, 3);  // input
    t.floats(rows, d, 0, 0);   // grad_input
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.gelu_backward(st, x[0], x[1], x[2]); }};
  }
  return std::nullopt;
}

// The ops over a vocabulary: embedding and the cross-entropy phases.
std::optional<OpCase> vocab_case(Device& device, const OpShape& s, const OpCaseOptions& options,
                                 Tensors& t) {
  const DType d = s.dtype;
  const std::int64_t m = s.m, n = columns(s);
  if (s.op == "embedding" || s.op == "embedding_backward") {
    const std::int64_t vocab = options.vocab_rows;
    if (vocab < 1) throw std::invalid_argument("calibrate: vocab_rows must be ≥ 1");
    t.ints({m}, vocab);  // tokens
    if (s.op == "embedding") {
      t.floats({vocab, n}, d, -1, 1);  // table
      t.floats({m, n}, d, 0, 0);       // output
      return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                      dev.embedding(st, {.tokens = x[0], .table = x[1], .output = x[2]});
                    }};
    }
    t.floats({m, n}, d, -1, 1);  // grad_output
    t.floats({vocab, n}, d, 0, 0);
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.embedding_backward(
                        st, {.tokens = x[0], .grad_output = x[1], .grad_table = x[2]});
                  }};
  }
  if (s.op == "cross_entropy_max" || s.op == "cross_entropy_sums" ||
      s.op == "cross_entropy_backward") {
    t.floats({m, n}, d, -1, 1);        // logits
    t.ints({m}, n);                    // targets
    t.floats({m}, DType::fp32, 1, 1);  // row max: logits lie below 1
    if (s.op == "cross_entropy_max")
      return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                      dev.cross_entropy_max(st, {.logits = x[0], .targets = x[1]}, x[2]);
                    }};
    if (s.op == "cross_entropy_sums") {
      t.floats({m}, DType::fp32, 0, 0);
      t.floats({m}, DType::fp32, 0, 0);
      return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                      dev.cross_entropy_sums(st, {.logits = x[0], .targets = x[1]}, x[2], x[3],
                                             x[4]);
                    }};
    }
    // exp(logit − 1) averages about 0.43 over logits in [-1, 1).
    const float nf = static_cast<float>(n), inv_m = 1.0f / static_cast<float>(m);
    t.floats({m}, DType::fp32, 0.3f * nf, 0.5f * nf);  // sum_exp
    t.floats({m}, DType::fp32, inv_m, inv_m);          // grad_loss
    t.floats({m, n}, d, 0, 0);                         // grad_logits
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.cross_entropy_backward(st, {.logits = x[0], .targets = x[1]}, x[2], x[3],
                                               x[4], x[5]);
                  }};
  }
  if (s.op == "cross_entropy_loss") {
    t.floats({m}, DType::fp32, 1, 1);   // row_max
    t.floats({m}, DType::fp32, 1, 2);   // sum_exp
    t.floats({m}, DType::fp32, -1, 1);  // target_logit
    t.floats({m}, DType::fp32, 0, 0);   // loss
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.cross_entropy_loss(st, x[0], x[1], x[2], x[3]);
                  }};
  }
  return std::nullopt;
}

// Whole-buffer ops: add, scale, fill, copy, sum_squares, adam, upload, download.
std::optional<OpCase> buffer_case(Device& device, const OpShape& s, const OpCaseOptions&,
                                  Tensors& t) {
  const DType d = s.dtype;
  const Shape rows = rows_shape(s);
  const std::int64_t m = s.m;
  if (s.op == "add") {
    t.floats(rows, d, -1, 1);
    t.floats(rows, d, -1, 1);
    t.floats(rows, d, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.add(st, x[0], x[1], x[2]); }};
  }
  if (s.op == "scale") {
    t.floats({m}, d, -1, 1);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.scale(st, x[0], 1.0f); }};
  }
  if (s.op == "fill") {
    if (d == DType::int32)
      t.ints({m}, 1);
    else
      t.floats({m}, d, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.fill(st, x[0], 0.0f); }};
  }
  if (s.op == "copy") {
    t.floats({m}, d, -1, 1);
    t.floats({m}, d, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.copy(st, x[0], x[1]); }};
  }
  if (s.op == "copy_columns") {
    // The keys and values out of a grouped QKV row: n columns from the second half of 2n.
    const std::int64_t n = std::max<std::int64_t>(1, s.n);
    t.floats({m, 2 * n}, d, -1, 1);
    t.floats({m, n}, d, 0, 0);
    return OpCase{device, t.take(), [n](Device& dev, Stream& st, T& x) {
                    dev.copy_columns(st, {.from = x[0], .to = x[1], .from_column = n, .width = n});
                  }};
  }
  if (s.op == "copy_rows") {
    // m rows of n columns in k blocks (default 8), reversed: a dispatcher's regrouping.
    const std::int64_t blocks = std::max<std::int64_t>(1, s.k > 0 ? s.k : 8);
    const std::int64_t width = std::max<std::int64_t>(1, s.n);
    t.floats({m, width}, d, -1, 1);
    t.floats({m, width}, d, 0, 0);
    auto order = std::make_shared<std::vector<RowBlock>>();
    const std::int64_t per = m / blocks;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t count = b + 1 == blocks ? m - per * (blocks - 1) : per;
      order->push_back({b * per, m - b * per - count, count});
    }
    return OpCase{device, t.take(), [order](Device& dev, Stream& st, T& x) {
                    dev.copy_rows(st, {.from = x[0], .to = x[1], .blocks = *order});
                  }};
  }
  if (s.op == "check_finite_and_unscale") {
    t.floats({m}, DType::fp32, -1, 1);
    t.floats({1}, DType::fp32, 0, 0);
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.check_finite_and_unscale(st, x[0], 0.5f, x[1]);
                  }};
  }
  if (s.op == "sum_squares") {
    t.floats({m}, d, -1, 1);
    t.floats({1}, DType::fp32, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.sum_squares(st, x[0], x[1]); }};
  }
  if (s.op == "adam") {
    t.floats({m}, DType::fp32, -1, 1);        // param
    t.floats({m}, DType::fp32, -1, 1);        // grad
    t.floats({m}, DType::fp32, -0.1f, 0.1f);  // exp_avg
    t.floats({m}, DType::fp32, 0.01f, 0.1f);  // exp_avg_sq
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    dev.adam(st, {.param = x[0],
                                  .grad = x[1],
                                  .exp_avg = x[2],
                                  .exp_avg_sq = x[3],
                                  .lr = 1e-4f,
                                  .weight_decay = 0.1f});
                  }};
  }
  if (s.op == "upload") {
    // The host side of an upload is a copy out of a host buffer, as the data loader's is.
    if (d == DType::int32) {
      t.ints({m}, 1);
      auto host = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(m), 7);
      return OpCase{device, t.take(), [host](Device& dev, Stream& st, T& x) {
                      dev.upload(st, x[0], [&](std::span<std::int32_t> v) {
                        std::copy(host->begin(), host->end(), v.begin());
                      });
                    }};
    }
    t.floats({m}, d, 0, 0);
    auto host = std::make_shared<std::vector<float>>(static_cast<std::size_t>(m), 0.5f);
    return OpCase{device, t.take(), [host](Device& dev, Stream& st, T& x) {
                    dev.upload(st, x[0], [&](std::span<float> v) {
                      std::copy(host->begin(), host->end(), v.begin());
                    });
                  }};
  }
  if (s.op == "download") {
    t.floats({m}, d, -1, 1);
    auto host = std::make_shared<std::vector<float>>(static_cast<std::size_t>(m));
    return OpCase{device, t.take(),
                  [host](Device& dev, Stream& st, T& x) { dev.download(st, x[0], *host); }};
  }
  return std::nullopt;
}

// The mixture-of-experts ops. Router ops: m tokens, n experts, k = top_k. Dispatch ops:
// m routed copies (tokens · k), n hidden, k = top_k, over max(k, 8) experts; their row
// maps come from one permute run while the case is built.
std::optional<OpCase> moe_case(Device& device, const OpShape& s, const OpCaseOptions&, Tensors& t) {
  if (s.op.rfind("moe_", 0) != 0) return std::nullopt;
  const DType d = s.dtype;
  const std::int64_t k = std::max<std::int64_t>(1, s.k), n = columns(s);
  if (s.op == "moe_router" || s.op == "moe_router_backward") {
    if (k > n)
      throw std::invalid_argument("calibrate: " + s.op + " needs k (top_k) ≤ n (experts), got k " +
                                  std::to_string(k) + ", n " + std::to_string(n));
    t.floats({s.m, n}, d, -2, 2);            // logits
    t.floats({s.m, n}, DType::fp32, 0, 0);   // probs
    t.ints({s.m, k}, n);                     // top
    t.floats({s.m, k}, DType::fp32, 0, 0);   // gates
    t.floats({s.m, k}, DType::fp32, -1, 1);  // grad_gates
    t.floats({s.m, n}, DType::fp32, 0, 0);   // grad_logits
    auto counts = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(n));
    auto route = [counts](Device& dev, Stream& st, T& x) {
      dev.moe_router(st, {.logits = x[0], .probs = x[1], .top = x[2], .gates = x[3]}, *counts);
    };
    std::vector<Tensor> made = t.take();
    if (s.op == "moe_router") return OpCase{device, std::move(made), route};
    route(device, device.default_stream(), made);  // probs, top and gates to go back through
    return OpCase{device, std::move(made), [](Device& dev, Stream& st, T& x) {
                    dev.moe_router_backward(st, {.probs = x[1],
                                                 .top = x[2],
                                                 .gates = x[3],
                                                 .grad_gates = x[4],
                                                 .aux_grad = {},
                                                 .grad_logits = x[5]});
                  }};
  }
  if (s.op == "moe_drop_tokens") {
    // m tokens, n experts, k = top_k; capacity factor 1 (Megatron's common choice), so the
    // random routing drops some copies.
    if (k > n)
      throw std::invalid_argument(
          "calibrate: moe_drop_tokens needs k (top_k) ≤ n (experts), got k " + std::to_string(k) +
          ", n " + std::to_string(n));
    t.ints({s.m, k}, n);                    // 0 top
    t.floats({s.m, k}, DType::fp32, 0, 1);  // 1 gates
    t.ints({s.m, k}, 1);                    // 2 dispatch top
    t.floats({s.m, k}, DType::fp32, 0, 0);  // 3 dispatch gates
    const std::int64_t capacity = (s.m * k + n - 1) / n;
    auto counts = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(n));
    return OpCase{device, t.take(), [counts, capacity](Device& dev, Stream& st, T& x) {
                    dev.moe_drop_tokens(st,
                                        {.top = x[0],
                                         .gates = x[1],
                                         .dispatch_top = x[2],
                                         .dispatch_gates = x[3],
                                         .capacity = capacity},
                                        *counts);
                  }};
  }
  if (s.m % k != 0)
    throw std::invalid_argument("calibrate: " + s.op +
                                " needs m (routed copies) a multiple of k, got m " +
                                std::to_string(s.m) + ", k " + std::to_string(k));
  const std::int64_t tokens = s.m / k, experts = std::max<std::int64_t>(k, 8);
  t.floats({tokens, n}, d, -1, 1);           // 0 tokens
  t.ints({tokens, k}, experts);              // 1 top
  t.floats({s.m, n}, d, 0, 0);               // 2 permuted copies
  t.floats({tokens, k}, DType::fp32, 0, 1);  // 3 gates
  t.floats({tokens, k}, DType::fp32, 0, 0);  // 4 grad gates
  std::vector<Tensor> made = t.take();
  made.push_back(device.allocate(Shape{s.m}, DType::int64));  // 5 row_of_copy
  made.push_back(device.allocate(Shape{s.m}, DType::int64));  // 6 source_of_row
  auto permute = [experts](Device& dev, Stream& st, T& x) {
    dev.moe_permute(st, {.input = x[0],
                         .top = x[1],
                         .permuted = x[2],
                         .row_of_copy = x[5],
                         .source_of_row = x[6],
                         .experts = experts});
  };
  permute(device, device.default_stream(), made);
  if (s.op == "moe_permute") return OpCase{device, std::move(made), permute};
  if (s.op == "moe_permute_backward")
    return OpCase{device, std::move(made), [](Device& dev, Stream& st, T& x) {
                    dev.moe_permute_backward(
                        st, {.grad_permuted = x[2], .row_of_copy = x[5], .grad_input = x[0]});
                  }};
  if (s.op == "moe_unpermute")
    return OpCase{
        device, std::move(made), [](Device& dev, Stream& st, T& x) {
          dev.moe_unpermute(
              st, {.expert_output = x[2], .gates = x[3], .row_of_copy = x[5], .output = x[0]});
        }};
  if (s.op == "moe_unpermute_backward") {
    made.push_back(device.allocate(Shape{s.m, n}, d));  // 7 grad of the copies
    return OpCase{device, std::move(made), [](Device& dev, Stream& st, T& x) {
                    dev.moe_unpermute_backward(st, {.grad_output = x[0],
                                                    .expert_output = x[2],
                                                    .gates = x[3],
                                                    .source_of_row = x[6],
                                                    .row_of_copy = x[5],
                                                    .grad_expert_output = x[7],
                                                    .grad_gates = x[4]});
                  }};
  }
  return std::nullopt;
}

// The FP8 ops (fp8_quantize over (m, n), per-tensor current scaling; fp8_gemm of (m, k) codes
// by (n, k) codes transposed — a linear layer's forward, the layout FP8 tensor cores take as
// held (kernels/cuda/fp8_lt_plan.hpp) —, seeded bytes, unit scales; fp8_update_scale of one
// tensor's m-long history;
// fp8_amax over (m, n); fp8_compute_scale of m tensors from their amaxes).
std::optional<OpCase> fp8_case(Device& device, const OpShape& s, const OpCaseOptions&, Tensors& t) {
  const std::int64_t m = s.m, n = columns(s);
  auto codes = [&](std::int64_t elements) { t.ints(Shape{(elements + 3) / 4}, 1 << 30); };
  if (s.op == "fp8_quantize") {
    t.floats({m, n}, s.dtype, -1, 1);
    codes(m * n);
    t.floats({1, 1}, DType::fp32, 1, 1);
    return OpCase{device, t.take(), [m, n](Device& dev, Stream& st, T& x) {
                    Fp8Tensor out{.codes = x[1], .scale_inv = x[2], .rows = m, .cols = n};
                    dev.fp8_quantize(st, {.input = x[0], .output = out});
                  }};
  }
  if (s.op == "fp8_gemm") {
    require_positive(s, {{"n", s.n}, {"k", s.k}});
    const std::int64_t k = s.k;
    codes(m * k);
    t.floats({1, 1}, DType::fp32, 1, 1);
    codes(k * n);
    t.floats({1, 1}, DType::fp32, 1, 1);
    t.floats({m, n}, s.dtype, 0, 0);
    return OpCase{device, t.take(), [m, n, k](Device& dev, Stream& st, T& x) {
                    const Fp8Tensor a{.codes = x[0], .scale_inv = x[1], .rows = m, .cols = k};
                    const Fp8Tensor b{.codes = x[2], .scale_inv = x[3], .rows = n, .cols = k};
                    dev.fp8_gemm(st, {.a = a, .b = b, .c = x[4], .transpose_b = true});
                  }};
  }
  if (s.op == "fp8_update_scale") {
    t.floats({m}, DType::fp32, 0, 1);  // history
    t.floats({1}, DType::fp32, 1, 1);  // scale
    t.floats({1}, DType::fp32, 0, 1);  // amax
    return OpCase{device, t.take(), [](Device& dev, Stream& st, T& x) {
                    static constexpr Fp8Format kFormats[] = {Fp8Format::e4m3};
                    dev.fp8_update_scale(
                        st,
                        {.amax_history = x[0], .scale = x[1], .amax = x[2], .formats = kFormats});
                  }};
  }
  if (s.op == "fp8_amax") {
    t.floats({m, n}, s.dtype, -1, 1);
    t.floats({1}, DType::fp32, 0, 0);
    return OpCase{device, t.take(),
                  [](Device& dev, Stream& st, T& x) { dev.fp8_amax(st, x[0], x[1]); }};
  }
  if (s.op == "fp8_compute_scale") {
    t.floats({m}, DType::fp32, 0, 1);  // amax
    t.floats({m}, DType::fp32, 1, 1);  // scale
    t.floats({m}, DType::fp32, 1, 1);  // scale_inv
    return OpCase{device, t.take(), [m](Device& dev, Stream& st, T& x) {
                    const std::vector<Fp8Format> formats(static_cast<std::size_t>(m),
                                                         Fp8Format::e4m3);
                    dev.fp8_compute_scale(
                        st, {.amax = &x[0], .scale = x[1], .scale_inv = x[2], .formats = formats});
                  }};
  }
  return std::nullopt;
}

}  // namespace

const std::vector<std::string>& measurable_ops() {
  return device_op_names();
}

OpCase make_op_case(Device& device, const OpShape& s, const OpCaseOptions& options) {
  if (s.n < 0 || s.k < 0)
    throw std::invalid_argument("calibrate: " + s.op + " has a negative size (n " +
                                std::to_string(s.n) + ", k " + std::to_string(s.k) + ")");
  require_positive(s, {{"m", s.m}, {"batch", s.batch}});
  Tensors t(device, options.seed);
  for (auto* family :
       {matrix_case, row_case, vocab_case, buffer_case, llama_case, moe_case, fp8_case})
    if (auto c = family(device, s, options, t)) return std::move(*c);
  std::string known;
  for (const auto& op : measurable_ops()) known += (known.empty() ? "" : ", ") + op;
  throw std::invalid_argument("calibrate: unknown op \"" + s.op + "\" (known: " + known + ")");
}

}  // namespace tandem::calibrate
