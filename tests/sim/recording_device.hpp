// A Device decorator for tests: forwards every call to the wrapped device and writes one
// line per op (name and operand shapes) to a log, so the op sequences that the cpu and the
// sim bindings see for the same configuration can be compared line by line.
#pragma once

#include <string>
#include <vector>

#include "core/device.hpp"

namespace tandem::testing {

class RecordingDevice : public Device {
 public:
  explicit RecordingDevice(Device& inner) : inner_(inner) {}
  const std::vector<std::string>& log() const { return log_; }

  std::string_view kind() const override { return inner_.kind(); }
  using Device::allocate;
  Tensor allocate(const Shape& shape, DType dtype, MemoryUse use) override {
    log_.push_back("allocate " + shape.to_string() + " " + std::string(dtype_name(dtype)));
    return inner_.allocate(shape, dtype, use);
  }
  const MemoryTracker& memory() const override { return inner_.memory(); }
  Stream& default_stream() override { return inner_.default_stream(); }
  std::unique_ptr<Stream> create_stream(std::string name) override {
    return inner_.create_stream(std::move(name));
  }
  std::unique_ptr<Event> create_event() override { return inner_.create_event(); }
  std::chrono::steady_clock::time_point trace_time(Stream& s) override {
    return inner_.trace_time(s);
  }
  void upload(Stream& s, Tensor& t, const ProduceFloats& p) override {
    note("upload", t);
    inner_.upload(s, t, p);
  }
  void upload(Stream& s, Tensor& t, const ProduceInts& p) override {
    note("upload", t);
    inner_.upload(s, t, p);
  }
  void download(Stream& s, const Tensor& t, std::span<float> host) override {
    note("download", t);
    inner_.download(s, t, host);
  }
  void gemm(Stream& s, const GemmArgs& a) override {
    note("gemm", a.a, a.b, a.c);
    if (a.bias) log_.back() += " +bias";  // the epilogues
    if (a.bias_grad) log_.back() += " +bias_grad";
    inner_.gemm(s, a);
  }
  void bias_add(Stream& s, Tensor& x, const Tensor& b) override {
    note("bias_add", x, b);
    inner_.bias_add(s, x, b);
  }
  void bias_grad(Stream& s, const Tensor& g, Tensor& gb) override {
    note("bias_grad", g, gb);
    inner_.bias_grad(s, g, gb);
  }
  void layer_norm(Stream& s, const LayerNormArgs& a) override {
    note("layer_norm", a.input);
    inner_.layer_norm(s, a);
  }
  void layer_norm_backward(Stream& s, const LayerNormBackwardArgs& a) override {
    note("layer_norm_backward", a.input);
    inner_.layer_norm_backward(s, a);
  }
  void attention(Stream& s, const AttentionArgs& a) override {
    note("attention", a.qkv);
    inner_.attention(s, a);
  }
  void attention_backward(Stream& s, const AttentionBackwardArgs& a) override {
    note("attention_backward", a.qkv);
    inner_.attention_backward(s, a);
  }
  void rms_norm(Stream& s, const RmsNormArgs& a) override {
    note("rms_norm", a.input);
    inner_.rms_norm(s, a);
  }
  void rms_norm_backward(Stream& s, const RmsNormBackwardArgs& a) override {
    note("rms_norm_backward", a.input);
    inner_.rms_norm_backward(s, a);
  }
  void swiglu(Stream& s, const Tensor& in, Tensor& out) override {
    note("swiglu", in);
    inner_.swiglu(s, in, out);
  }
  void swiglu_backward(Stream& s, const Tensor& go, const Tensor& in, Tensor& gi) override {
    note("swiglu_backward", in);
    inner_.swiglu_backward(s, go, in, gi);
  }
  void rope(Stream& s, const RopeArgs& a) override {
    note(a.inverse ? "rope inverse" : "rope", a.x);
    inner_.rope(s, a);
  }
  void flash_attention(Stream& s, const FlashAttentionArgs& a) override {
    note("flash_attention", a.q_source);
    inner_.flash_attention(s, a);
  }
  void flash_attention_backward(Stream& s, const FlashAttentionBackwardArgs& a) override {
    note("flash_attention_backward", a.q_source);
    inner_.flash_attention_backward(s, a);
  }
  void gelu(Stream& s, const Tensor& in, Tensor& out) override {
    note("gelu", in);
    inner_.gelu(s, in, out);
  }
  void gelu_backward(Stream& s, const Tensor& go, const Tensor& in, Tensor& gi) override {
    note("gelu_backward", go);
    inner_.gelu_backward(s, go, in, gi);
  }
  void bias_gelu(Stream& s, const Tensor& in, const Tensor& b, Tensor& out) override {
    note("bias_gelu", in, b);
    inner_.bias_gelu(s, in, b, out);
  }
  void bias_gelu_backward(Stream& s, const Tensor& go, const Tensor& in, const Tensor& b,
                          Tensor& gi) override {
    note("bias_gelu_backward", go);
    inner_.bias_gelu_backward(s, go, in, b, gi);
  }
  void bias_dropout_add(Stream& s, const BiasDropoutAddArgs& a) override {
    note("bias_dropout_add", a.input);
    inner_.bias_dropout_add(s, a);
  }
  void dropout(Stream& s, const Tensor& in, Tensor& out, const HiddenDropout& d) override {
    note("dropout", in);
    inner_.dropout(s, in, out, d);
  }
  void dropout_backward(Stream& s, const Tensor& go, Tensor& gi, const HiddenDropout& d) override {
    note("dropout_backward", go);
    inner_.dropout_backward(s, go, gi, d);
  }
  void embedding(Stream& s, const EmbeddingArgs& a) override {
    note("embedding", a.tokens, a.table);
    inner_.embedding(s, a);
  }
  void embedding_backward(Stream& s, const EmbeddingBackwardArgs& a) override {
    note("embedding_backward", a.grad_output, a.grad_table);
    inner_.embedding_backward(s, a);
  }
  void cross_entropy_max(Stream& s, const CrossEntropyArgs& a, Tensor& m) override {
    note("cross_entropy_max", a.logits);
    inner_.cross_entropy_max(s, a, m);
  }
  void cross_entropy_sums(Stream& s, const CrossEntropyArgs& a, const Tensor& m, Tensor& se,
                          Tensor& tl) override {
    note("cross_entropy_sums", a.logits);
    inner_.cross_entropy_sums(s, a, m, se, tl);
  }
  void cross_entropy_loss(Stream& s, const Tensor& m, const Tensor& se, const Tensor& tl,
                          Tensor& loss) override {
    note("cross_entropy_loss", m);
    inner_.cross_entropy_loss(s, m, se, tl, loss);
  }
  void cross_entropy_backward(Stream& s, const CrossEntropyArgs& a, const Tensor& m,
                              const Tensor& se, const Tensor& gl, Tensor& g) override {
    note("cross_entropy_backward", a.logits);
    inner_.cross_entropy_backward(s, a, m, se, gl, g);
  }
  void add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) override {
    note("add", a);
    inner_.add(s, a, b, out);
  }
  void scale(Stream& s, Tensor& x, float f) override {
    note("scale", x);
    inner_.scale(s, x, f);
  }
  void fill(Stream& s, Tensor& x, float v) override {
    note("fill", x);
    inner_.fill(s, x, v);
  }
  void copy(Stream& s, const Tensor& from, Tensor& to) override {
    note("copy", from);
    inner_.copy(s, from, to);
  }
  void copy_columns(Stream& s, const ColumnCopyArgs& a) override {
    note("copy_columns", a.from);
    inner_.copy_columns(s, a);
  }
  void moe_router(Stream& s, const MoeRouterArgs& a,
                  std::span<std::int64_t> tokens_per_expert) override {
    note("moe_router", a.logits);
    inner_.moe_router(s, a, tokens_per_expert);
  }
  void moe_router_backward(Stream& s, const MoeRouterBackwardArgs& a) override {
    note("moe_router_backward", a.grad_logits);
    inner_.moe_router_backward(s, a);
  }
  void moe_drop_tokens(Stream& s, const MoeDropTokensArgs& a,
                       std::span<std::int64_t> tokens_per_expert) override {
    note("moe_drop_tokens", a.dispatch_top);
    inner_.moe_drop_tokens(s, a, tokens_per_expert);
  }
  void moe_permute(Stream& s, const MoePermuteArgs& a) override {
    note("moe_permute", a.permuted);
    inner_.moe_permute(s, a);
  }
  void moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& a) override {
    note("moe_permute_backward", a.grad_permuted);
    inner_.moe_permute_backward(s, a);
  }
  void moe_unpermute(Stream& s, const MoeUnpermuteArgs& a) override {
    note("moe_unpermute", a.expert_output);
    inner_.moe_unpermute(s, a);
  }
  void moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& a) override {
    note("moe_unpermute_backward", a.expert_output);
    inner_.moe_unpermute_backward(s, a);
  }
  void copy_rows(Stream& s, const RowCopyArgs& a) override {
    note("copy_rows", a.from);
    inner_.copy_rows(s, a);
  }
  void fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) override {
    note("fp8_quantize", a.input, a.output.codes);
    inner_.fp8_quantize(s, a);
  }
  void fp8_gemm(Stream& s, const Fp8GemmArgs& a) override {
    note("fp8_gemm", a.a.codes, a.b.codes, a.c);
    if (!a.split_accumulator) log_.back() += " fast-accumulate";
    inner_.fp8_gemm(s, a);
  }
  void fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) override {
    note("fp8_update_scale", a.amax_history, a.scale);
    inner_.fp8_update_scale(s, a);
  }
  void fp8_amax(Stream& s, const Tensor& x, Tensor& amax) override {
    note("fp8_amax", x, amax);
    inner_.fp8_amax(s, x, amax);
  }
  void fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) override {
    note("fp8_compute_scale", a.scale, a.scale_inv);
    inner_.fp8_compute_scale(s, a);
  }
  void check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale, Tensor& found) override {
    note("check_finite_and_unscale", x, found);
    inner_.check_finite_and_unscale(s, x, inv_scale, found);
  }
  void sum_squares(Stream& s, const Tensor& x, Tensor& out) override {
    note("sum_squares", x);
    inner_.sum_squares(s, x, out);
  }
  void adam(Stream& s, const AdamArgs& a) override {
    note("adam", a.param);
    inner_.adam(s, a);
  }

 private:
  template <typename... T>
  void note(const char* op, const T&... tensors) {
    std::string line = op;
    ((line += " " + tensors.shape.to_string()), ...);
    log_.push_back(std::move(line));
  }

  Device& inner_;
  std::vector<std::string> log_;
};

}  // namespace tandem::testing
