// The cpu binding of Device: real fp32 tensors in 64-byte-aligned host memory, every op
// run at issue time on the calling thread by the kernels in kernels/cpu (OpenMP inside).
// Streams are ordered by construction (everything is synchronous), so record/wait are
// bookkeeping; communication overlap comes from the communicator's own thread.
#pragma once

#include <memory>
#include <string>

#include "core/device.hpp"

namespace tandem {

class BlockCache;

class CpuDevice : public Device {
 public:
  CpuDevice();
  ~CpuDevice() override;

  std::string_view kind() const override { return "cpu"; }
  using Device::allocate;
  Tensor allocate(const Shape& shape, DType dtype, MemoryUse use) override;
  const MemoryTracker& memory() const override { return *memory_; }
  Stream& default_stream() override { return *default_stream_; }
  std::unique_ptr<Stream> create_stream(std::string name) override;
  std::unique_ptr<Event> create_event() override;
  // cpu ops run on the host as they are issued: the stream is done now.
  std::chrono::steady_clock::time_point trace_time(Stream&) override {
    return std::chrono::steady_clock::now();
  }

  void upload(Stream& s, Tensor& t, const ProduceFloats& produce) override;
  void upload(Stream& s, Tensor& t, const ProduceInts& produce) override;
  void download(Stream& s, const Tensor& t, std::span<float> host) override;

  void gemm(Stream& s, const GemmArgs& a) override;
  void bias_add(Stream& s, Tensor& x, const Tensor& bias) override;
  void bias_grad(Stream& s, const Tensor& grad, Tensor& grad_bias) override;
  void layer_norm(Stream& s, const LayerNormArgs& a) override;
  void layer_norm_backward(Stream& s, const LayerNormBackwardArgs& a) override;
  void attention(Stream& s, const AttentionArgs& a) override;
  void attention_backward(Stream& s, const AttentionBackwardArgs& a) override;
  void gelu(Stream& s, const Tensor& input, Tensor& output) override;
  void gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                     Tensor& grad_input) override;
  void bias_gelu(Stream& s, const Tensor& input, const Tensor& bias, Tensor& output) override;
  void bias_gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                          const Tensor& bias, Tensor& grad_input) override;
  void bias_dropout_add(Stream& s, const BiasDropoutAddArgs& a) override;
  void dropout(Stream& s, const Tensor& input, Tensor& output, const HiddenDropout& d) override;
  void dropout_backward(Stream& s, const Tensor& grad_output, Tensor& grad_input,
                        const HiddenDropout& d) override;
  void rms_norm(Stream& s, const RmsNormArgs& a) override;
  void rms_norm_backward(Stream& s, const RmsNormBackwardArgs& a) override;
  void swiglu(Stream& s, const Tensor& input, Tensor& output) override;
  void swiglu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                       Tensor& grad_input) override;
  void rope(Stream& s, const RopeArgs& a) override;
  void flash_attention(Stream& s, const FlashAttentionArgs& a) override;
  void flash_attention_backward(Stream& s, const FlashAttentionBackwardArgs& a) override;
  void embedding(Stream& s, const EmbeddingArgs& a) override;
  void embedding_backward(Stream& s, const EmbeddingBackwardArgs& a) override;
  void cross_entropy_max(Stream& s, const CrossEntropyArgs& a, Tensor& row_max) override;
  void cross_entropy_sums(Stream& s, const CrossEntropyArgs& a, const Tensor& row_max,
                          Tensor& sum_exp, Tensor& target_logit) override;
  void cross_entropy_loss(Stream& s, const Tensor& row_max, const Tensor& sum_exp,
                          const Tensor& target_logit, Tensor& loss) override;
  void cross_entropy_backward(Stream& s, const CrossEntropyArgs& a, const Tensor& row_max,
                              const Tensor& sum_exp, const Tensor& grad_loss,
                              Tensor& grad_logits) override;
  void add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(Stream& s, Tensor& x, float factor) override;
  void fill(Stream& s, Tensor& x, float value) override;
  void copy(Stream& s, const Tensor& from, Tensor& to) override;
  void copy_columns(Stream& s, const ColumnCopyArgs& args) override;
  void copy_rows(Stream& s, const RowCopyArgs& args) override;
  void moe_router(Stream& s, const MoeRouterArgs& args,
                  std::span<std::int64_t> tokens_per_expert) override;
  void moe_router_backward(Stream& s, const MoeRouterBackwardArgs& args) override;
  void moe_drop_tokens(Stream& s, const MoeDropTokensArgs& args,
                       std::span<std::int64_t> tokens_per_expert) override;
  void moe_permute(Stream& s, const MoePermuteArgs& args) override;
  void moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& args) override;
  void moe_unpermute(Stream& s, const MoeUnpermuteArgs& args) override;
  void moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& args) override;
  void fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) override;  // cpu_device_fp8.cpp
  void fp8_gemm(Stream& s, const Fp8GemmArgs& a) override;
  void fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) override;
  void fp8_amax(Stream& s, const Tensor& x, Tensor& amax) override;
  void check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale, Tensor& found) override;
  void fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) override;
  void sum_squares(Stream& s, const Tensor& x, Tensor& out) override;
  void adam(Stream& s, const AdamArgs& a) override;

 private:
  std::shared_ptr<MemoryTracker> memory_;  // shared with live storages, which may outlive us
  std::shared_ptr<BlockCache> cache_;      // freed blocks kept for reuse
  std::unique_ptr<Stream> default_stream_;
};

}  // namespace tandem
