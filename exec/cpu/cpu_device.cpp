#include "exec/cpu/cpu_device.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "exec/op_arguments.hpp"
#include "kernels/cpu/adam.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/dropout.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/router.hpp"
#include "kernels/cpu/swiglu.hpp"

namespace tandem {

// Keeps freed blocks for reuse, as PyTorch's CPU and CUDA caching allocators do: a
// training step frees and re-allocates the same activation sizes every microbatch, and
// handing them back to the OS made the kernel zero fresh pages each time (a quarter of
// the GPT-2 124M step at T = 256). The tracker counts tensors, not the cache, so live and
// peak bytes stay what the model asked for — the figure the simulator reproduces.
class BlockCache {
 public:
  ~BlockCache() {
    for (auto& [size, block] : free_) std::free(block);
  }
  void* take(std::size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        void* block = it->second;
        free_.erase(it);
        return block;
      }
    }
    void* block = std::aligned_alloc(64, bytes);
    if (!block) throw std::bad_alloc();
    return block;
  }
  void give(std::size_t bytes, void* block) {
    std::lock_guard lock(mutex_);
    free_.emplace(bytes, block);
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
};

namespace {

using op_arguments::attention_dropout;
using op_arguments::attention_shape;
using op_arguments::ce_shape;
using op_arguments::flash_shape;
using op_arguments::hidden_dropout;
using op_arguments::last_dim;
using op_arguments::row_bias;
using op_arguments::same_numel;

namespace k = kernels::cpu;

class HostStorage : public Storage {
 public:
  HostStorage(Bytes bytes, MemoryUse use, std::shared_ptr<MemoryTracker> tracker,
              std::shared_ptr<BlockCache> cache)
      : bytes_(bytes),
        use_(use),
        block_bytes_(
            static_cast<std::size_t>(std::max<std::int64_t>(64, (bytes.value + 63) / 64 * 64))),
        tracker_(std::move(tracker)),
        cache_(std::move(cache)) {
    data_ = cache_->take(block_bytes_);
    tracker_->on_allocate(bytes_, use_);
  }
  ~HostStorage() override {
    cache_->give(block_bytes_, data_);
    tracker_->on_release(bytes_, use_);
  }
  void* data() override { return data_; }
  Bytes bytes() const override { return bytes_; }

 private:
  void* data_;
  Bytes bytes_;
  MemoryUse use_;
  std::size_t block_bytes_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::shared_ptr<BlockCache> cache_;
};

class CpuStream : public Stream {
 public:
  explicit CpuStream(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  void record(Event&) override {}
  void wait(Event&) override {}
  void synchronize() override {}

 private:
  std::string name_;
};

class CpuEvent : public Event {
 public:
  void synchronize() override {}
  bool query() override { return true; }
};

float* f32(const Tensor& t) {
  return t.data<float>();
}
const std::int32_t* i32(const Tensor& t) {
  return t.data<std::int32_t>();
}
std::int64_t* i64(const Tensor& t) {
  return t.data<std::int64_t>();
}

}  // namespace

CpuDevice::CpuDevice()
    : memory_(std::make_shared<MemoryTracker>()),
      cache_(std::make_shared<BlockCache>()),
      default_stream_(std::make_unique<CpuStream>("compute")) {}

CpuDevice::~CpuDevice() = default;

Tensor CpuDevice::allocate(const Shape& shape, DType dtype, MemoryUse use) {
  const Bytes bytes = dtype_size(dtype) * shape.numel();
  return Tensor{shape, dtype, std::make_shared<HostStorage>(bytes, use, memory_, cache_), 0};
}

std::unique_ptr<Stream> CpuDevice::create_stream(std::string name) {
  return std::make_unique<CpuStream>(std::move(name));
}

std::unique_ptr<Event> CpuDevice::create_event() {
  return std::make_unique<CpuEvent>();
}

void CpuDevice::upload(Stream&, Tensor& t, const ProduceFloats& produce) {
  produce(std::span<float>(f32(t), static_cast<std::size_t>(t.numel())));
}

void CpuDevice::upload(Stream&, Tensor& t, const ProduceInts& produce) {
  produce(std::span<std::int32_t>(t.data<std::int32_t>(), static_cast<std::size_t>(t.numel())));
}

void CpuDevice::download(Stream&, const Tensor& t, std::span<float> host) {
  if (static_cast<std::int64_t>(host.size()) != t.numel())
    throw std::invalid_argument("download: host buffer of " + std::to_string(host.size()) +
                                " floats for a tensor of " + std::to_string(t.numel()));
  std::memcpy(host.data(), f32(t), host.size() * sizeof(float));
}

void CpuDevice::gemm(Stream& s, const GemmArgs& a) {
  const GemmShape g = check_gemm(a);
  k::gemm({.m = g.m,
           .n = g.n,
           .k = g.k,
           .transpose_a = a.transpose_a,
           .transpose_b = a.transpose_b,
           .alpha = a.alpha,
           .beta = a.beta},
          f32(a.a), f32(a.b), f32(a.c));
  // The epilogues as the kernels the unfused step runs: the same sums in the same order.
  if (a.bias) bias_add(s, a.c, *a.bias);
  if (a.bias_grad) bias_grad(s, a.a, *a.bias_grad);
}

void CpuDevice::bias_add(Stream&, Tensor& x, const Tensor& bias) {
  k::bias_add(f32(x), f32(bias), x.numel() / bias.numel(), bias.numel());
}

void CpuDevice::bias_grad(Stream&, const Tensor& grad, Tensor& grad_bias) {
  k::bias_backward(f32(grad_bias), f32(grad), grad.numel() / grad_bias.numel(), grad_bias.numel());
}

void CpuDevice::layer_norm(Stream&, const LayerNormArgs& a) {
  const std::int64_t C = a.gamma.numel();
  k::layer_norm_forward({a.input.numel() / C, C}, f32(a.input), f32(a.gamma), f32(a.beta),
                        f32(a.output), f32(a.mean), f32(a.rstd), a.epsilon);
}

void CpuDevice::layer_norm_backward(Stream&, const LayerNormBackwardArgs& a) {
  const std::int64_t C = a.gamma.numel();
  k::layer_norm_backward({a.input.numel() / C, C}, f32(a.grad_output), f32(a.input), f32(a.gamma),
                         f32(a.mean), f32(a.rstd), f32(a.grad_input), f32(a.grad_gamma),
                         f32(a.grad_beta));
}

void CpuDevice::attention(Stream&, const AttentionArgs& a) {
  const auto sh = attention_shape(a.qkv);
  if (a.output.numel() != sh.B * sh.T * sh.NH * sh.HD ||
      a.probs.numel() != sh.B * sh.NH * sh.T * sh.T)
    throw std::invalid_argument("attention: output or probs does not match qkv " +
                                a.qkv.shape.to_string());
  k::attention_forward(sh, f32(a.qkv), f32(a.output), f32(a.probs), attention_dropout(a.dropout));
}

void CpuDevice::attention_backward(Stream&, const AttentionBackwardArgs& a) {
  const auto sh = attention_shape(a.qkv);
  same_numel("attention_backward", a.qkv, a.grad_qkv);
  k::attention_backward(sh, f32(a.grad_output), f32(a.qkv), f32(a.probs), f32(a.grad_qkv),
                        attention_dropout(a.dropout));
}

void CpuDevice::gelu(Stream&, const Tensor& in, Tensor& out) {
  same_numel("gelu", in, out);
  k::gelu_forward(f32(in), f32(out), in.numel());
}

void CpuDevice::gelu_backward(Stream&, const Tensor& dout, const Tensor& in, Tensor& din) {
  same_numel("gelu_backward", in, din);
  k::gelu_backward(f32(dout), f32(in), f32(din), in.numel());
}

void CpuDevice::bias_gelu(Stream&, const Tensor& in, const Tensor& bias, Tensor& out) {
  same_numel("bias_gelu", in, out);
  const std::int64_t C = row_bias("bias_gelu", in, bias);
  k::bias_gelu_forward(f32(in), f32(bias), f32(out), in.numel() / C, C);
}

void CpuDevice::bias_gelu_backward(Stream&, const Tensor& dout, const Tensor& in,
                                   const Tensor& bias, Tensor& din) {
  same_numel("bias_gelu_backward", in, dout);
  same_numel("bias_gelu_backward", in, din);
  const std::int64_t C = row_bias("bias_gelu_backward", in, bias);
  k::bias_gelu_backward(f32(dout), f32(in), f32(bias), f32(din), in.numel() / C, C);
}

void CpuDevice::bias_dropout_add(Stream&, const BiasDropoutAddArgs& a) {
  same_numel("bias_dropout_add", a.input, a.residual);
  same_numel("bias_dropout_add", a.input, a.output);
  const std::int64_t C =
      a.bias ? row_bias("bias_dropout_add", a.input, *a.bias) : last_dim(a.input);
  k::bias_dropout_add(f32(a.input), a.bias ? f32(*a.bias) : nullptr, f32(a.residual), f32(a.output),
                      a.input.numel() / C, C,
                      hidden_dropout("bias_dropout_add", a.input, a.dropout));
}

void CpuDevice::dropout(Stream&, const Tensor& in, Tensor& out, const HiddenDropout& d) {
  same_numel("dropout", in, out);
  k::dropout_forward(f32(in), f32(out), in.numel(), hidden_dropout("dropout", in, d));
}

void CpuDevice::dropout_backward(Stream&, const Tensor& dout, Tensor& din, const HiddenDropout& d) {
  same_numel("dropout_backward", dout, din);
  k::dropout_backward(f32(dout), f32(din), dout.numel(),
                      hidden_dropout("dropout_backward", dout, d));
}

void CpuDevice::rms_norm(Stream&, const RmsNormArgs& a) {
  const std::int64_t C = a.gamma.numel();
  same_numel("rms_norm", a.input, a.output);
  k::rms_norm_forward({a.input.numel() / C, C}, f32(a.input), f32(a.gamma), f32(a.output),
                      f32(a.rstd), a.epsilon);
}

void CpuDevice::rms_norm_backward(Stream&, const RmsNormBackwardArgs& a) {
  const std::int64_t C = a.gamma.numel();
  same_numel("rms_norm_backward", a.input, a.grad_input);
  k::rms_norm_backward({a.input.numel() / C, C}, f32(a.grad_output), f32(a.input), f32(a.gamma),
                       f32(a.rstd), f32(a.grad_input), f32(a.grad_gamma));
}

void CpuDevice::swiglu(Stream&, const Tensor& in, Tensor& out) {
  const std::int64_t F = op_arguments::swiglu_width("swiglu", in, out);
  k::swiglu_forward(f32(in), f32(out), out.numel() / F, F);
}

void CpuDevice::swiglu_backward(Stream&, const Tensor& dout, const Tensor& in, Tensor& din) {
  const std::int64_t F = op_arguments::swiglu_width("swiglu_backward", in, dout);
  same_numel("swiglu_backward", in, din);
  k::swiglu_backward(f32(dout), f32(in), f32(din), dout.numel() / F, F);
}

void CpuDevice::rope(Stream&, const RopeArgs& a) {
  k::rope_apply(op_arguments::rope_shape(a), f32(a.x), a.inverse);
}

void CpuDevice::flash_attention(Stream&, const FlashAttentionArgs& a) {
  k::flash_attention_forward(flash_shape("flash_attention", a), f32(a.q_source), f32(a.kv_source),
                             f32(a.output), f32(a.lse));
}

void CpuDevice::flash_attention_backward(Stream&, const FlashAttentionBackwardArgs& a) {
  const auto sh = flash_shape("flash_attention_backward", a);
  same_numel("flash_attention_backward", a.q_source, a.grad_q_source);
  same_numel("flash_attention_backward", a.kv_source, a.grad_kv_source);
  same_numel("flash_attention_backward", a.output, a.grad_output);
  k::flash_attention_backward(sh, f32(a.grad_output), f32(a.q_source), f32(a.kv_source),
                              f32(a.output), f32(a.lse), f32(a.grad_q_source),
                              f32(a.grad_kv_source));
}

void CpuDevice::embedding(Stream&, const EmbeddingArgs& a) {
  const std::int64_t C = last_dim(a.table);
  k::embedding_forward(i32(a.tokens), f32(a.table), {a.vocab_begin, a.table.shape[0]},
                       a.tokens.numel(), C, f32(a.output));
}

void CpuDevice::embedding_backward(Stream&, const EmbeddingBackwardArgs& a) {
  const std::int64_t C = last_dim(a.grad_table);
  k::embedding_backward(i32(a.tokens), f32(a.grad_output), {a.vocab_begin, a.grad_table.shape[0]},
                        a.tokens.numel(), C, f32(a.grad_table));
}

void CpuDevice::cross_entropy_max(Stream&, const CrossEntropyArgs& a, Tensor& row_max) {
  k::cross_entropy_max(ce_shape(a), f32(a.logits), f32(row_max));
}

void CpuDevice::cross_entropy_sums(Stream&, const CrossEntropyArgs& a, const Tensor& row_max,
                                   Tensor& sum_exp, Tensor& target_logit) {
  k::cross_entropy_sums(ce_shape(a), f32(a.logits), i32(a.targets), f32(row_max), f32(sum_exp),
                        f32(target_logit));
}

void CpuDevice::cross_entropy_loss(Stream&, const Tensor& row_max, const Tensor& sum_exp,
                                   const Tensor& target_logit, Tensor& loss) {
  k::cross_entropy_loss(loss.numel(), f32(row_max), f32(sum_exp), f32(target_logit), f32(loss));
}

void CpuDevice::cross_entropy_backward(Stream&, const CrossEntropyArgs& a, const Tensor& row_max,
                                       const Tensor& sum_exp, const Tensor& grad_loss,
                                       Tensor& grad_logits) {
  same_numel("cross_entropy_backward", a.logits, grad_logits);
  k::cross_entropy_backward(ce_shape(a), f32(a.logits), i32(a.targets), f32(row_max), f32(sum_exp),
                            f32(grad_loss), f32(grad_logits));
}

void CpuDevice::add(Stream&, const Tensor& a, const Tensor& b, Tensor& out) {
  same_numel("add", a, b);
  same_numel("add", a, out);
  k::add(f32(a), f32(b), f32(out), a.numel());
}

void CpuDevice::scale(Stream&, Tensor& x, float factor) {
  k::scale(f32(x), x.numel(), factor);
}

void CpuDevice::fill(Stream&, Tensor& x, float value) {
  if (x.dtype == DType::int32) {
    std::fill_n(x.data<std::int32_t>(), x.numel(), static_cast<std::int32_t>(value));
    return;
  }
  k::fill(f32(x), x.numel(), value);
}

void CpuDevice::moe_router(Stream&, const MoeRouterArgs& a,
                           std::span<std::int64_t> tokens_per_expert) {
  const auto sh = op_arguments::router_shape("moe_router", a, a.force_balance);
  same_numel("moe_router", a.logits, a.probs);
  for (std::size_t n :
       {tokens_per_expert.size(), a.aux_tokens_per_expert.size(), a.expert_bias.size()})
    if (n != 0 && static_cast<std::int64_t>(n) != sh.experts)
      throw std::invalid_argument(
          "moe_router: tokens_per_expert, aux_tokens_per_expert and "
          "expert_bias hold " +
          std::to_string(n) + " values for " + std::to_string(sh.experts) + " experts");
  if (static_cast<std::int64_t>(tokens_per_expert.size()) != sh.experts)
    throw std::invalid_argument("moe_router: tokens_per_expert holds no counts");
  k::router_top_k(sh, f32(a.logits), f32(a.probs), a.top.data<std::int32_t>(), f32(a.gates),
                  tokens_per_expert.data(), a.expert_bias.empty() ? nullptr : a.expert_bias.data(),
                  a.aux_tokens_per_expert.empty() ? nullptr : a.aux_tokens_per_expert.data());
}

void CpuDevice::moe_router_backward(Stream&, const MoeRouterBackwardArgs& a) {
  const auto sh = op_arguments::router_shape("moe_router_backward", a, false);
  same_numel("moe_router_backward", a.probs, a.grad_logits);
  if (!a.aux_grad.empty() && static_cast<std::int64_t>(a.aux_grad.size()) != sh.experts)
    throw std::invalid_argument("moe_router_backward: aux_grad holds " +
                                std::to_string(a.aux_grad.size()) + " values for " +
                                std::to_string(sh.experts) + " experts");
  k::router_backward(sh, f32(a.probs), i32(a.top), f32(a.gates), f32(a.grad_gates),
                     a.aux_grad.empty() ? nullptr : a.aux_grad.data(), f32(a.grad_logits));
}

void CpuDevice::moe_drop_tokens(Stream&, const MoeDropTokensArgs& a,
                                std::span<std::int64_t> tokens_per_expert) {
  const auto sh = op_arguments::drop_shape("moe_drop_tokens", a,
                                           static_cast<std::int64_t>(tokens_per_expert.size()));
  k::moe_drop_tokens(sh, i32(a.top), f32(a.gates), a.dispatch_top.data<std::int32_t>(),
                     f32(a.dispatch_gates), tokens_per_expert.data());
}

void CpuDevice::moe_permute(Stream&, const MoePermuteArgs& a) {
  const auto sh =
      op_arguments::moe_shape("moe_permute", a.input, a.permuted, a.top.numel(), a.experts);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(a.experts));
  k::moe_permute(sh, f32(a.input), i32(a.top), f32(a.permuted), i64(a.source_of_row),
                 i64(a.row_of_copy), counts.data());
}

void CpuDevice::moe_permute_backward(Stream&, const MoePermuteBackwardArgs& a) {
  const auto sh = op_arguments::moe_shape("moe_permute_backward", a.grad_input, a.grad_permuted,
                                          a.row_of_copy.numel(), 1);
  k::moe_permute_backward(sh, f32(a.grad_permuted), i64(a.row_of_copy), f32(a.grad_input));
}

void CpuDevice::moe_unpermute(Stream&, const MoeUnpermuteArgs& a) {
  const auto sh =
      op_arguments::moe_shape("moe_unpermute", a.output, a.expert_output, a.row_of_copy.numel(), 1);
  k::moe_unpermute(sh, f32(a.expert_output), f32(a.gates), i64(a.row_of_copy), f32(a.output));
}

void CpuDevice::moe_unpermute_backward(Stream&, const MoeUnpermuteBackwardArgs& a) {
  const auto sh = op_arguments::moe_shape("moe_unpermute_backward", a.grad_output, a.expert_output,
                                          a.row_of_copy.numel(), 1);
  k::moe_unpermute_backward(sh, f32(a.grad_output), f32(a.expert_output), f32(a.gates),
                            i64(a.source_of_row), i64(a.row_of_copy), f32(a.grad_expert_output),
                            f32(a.grad_gates));
}

void CpuDevice::copy_columns(Stream&, const ColumnCopyArgs& a) {
  k::copy_columns(op_arguments::column_copy(a), f32(a.from), f32(a.to));
}

void CpuDevice::copy(Stream&, const Tensor& from, Tensor& to) {
  same_numel("copy", from, to);
  if (from.dtype != to.dtype) throw std::invalid_argument("copy: dtypes differ");
  std::memcpy(static_cast<char*>(tensor_data_or_throw(to)) + to.offset * dtype_size(to.dtype).value,
              static_cast<const char*>(tensor_data_or_throw(from)) +
                  from.offset * dtype_size(from.dtype).value,
              static_cast<std::size_t>(from.bytes().value));
}

void CpuDevice::copy_rows(Stream&, const RowCopyArgs& a) {
  const std::int64_t row = op_arguments::row_copy_bytes(a);
  const char* from = static_cast<const char*>(tensor_data_or_throw(a.from)) +
                     a.from.offset * dtype_size(a.from.dtype).value;
  char* to =
      static_cast<char*>(tensor_data_or_throw(a.to)) + a.to.offset * dtype_size(a.to.dtype).value;
  for (const RowBlock& b : a.blocks)
    if (b.rows > 0)
      std::memcpy(to + b.to_row * row, from + b.from_row * row,
                  static_cast<std::size_t>(b.rows * row));
}

void CpuDevice::sum_squares(Stream&, const Tensor& x, Tensor& out) {
  f32(out)[0] =
      static_cast<float>(static_cast<double>(f32(out)[0]) + k::sum_squares(f32(x), x.numel()));
}

void CpuDevice::check_finite_and_unscale(Stream&, Tensor& x, float inv_scale, Tensor& found) {
  if (found.numel() != 1) throw std::invalid_argument("check_finite_and_unscale: found holds one");
  if (!k::unscale_all_finite(f32(x), x.numel(), inv_scale)) f32(found)[0] = 1.0f;
}

void CpuDevice::adam(Stream&, const AdamArgs& a) {
  same_numel("adam", a.param, a.grad);
  k::adamw(f32(a.param), f32(a.grad), f32(a.exp_avg), f32(a.exp_avg_sq), a.param.numel(),
           {.lr = a.lr,
            .beta1 = a.beta1,
            .beta2 = a.beta2,
            .epsilon = a.epsilon,
            .weight_decay = a.weight_decay,
            .grad_scale = a.grad_scale},
           a.step);
}

}  // namespace tandem
