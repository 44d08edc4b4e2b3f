// The cuda binding of Device: tensors in GPU memory from a caching allocator (tracked
// like the cpu binding's: the MemoryTracker counts tensor bytes, not cached blocks), ops
// launched asynchronously on CUDA streams — cuBLAS GEMMs and the kernels of kernels/cuda —
// and streams and events mapped one to one onto cudaStream_t and cudaEvent_t.
// Precision follows the tensors: fp32 tensors run fp32 kernels and fp32 (non-TF32) GEMMs;
// bf16 tensors are computed in fp32 and stored in bf16, GEMMs accumulate in fp32, and a
// bf16 GEMM may write (or with β = 1 accumulate into) an fp32 C, the main gradients.
// Statistics, losses and optimizer state are fp32.
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <string>

#include "core/device.hpp"

namespace tandem {

namespace kernels::cuda {
class LtMatmul;
struct Fp8LtPlan;
}  // namespace kernels::cuda

class DeviceMemoryPool;
class CudaStream;

class CudaDevice final : public Device {
 public:
  // Uses GPU `ordinal` (cudaSetDevice on the calling thread, which must be the one that
  // issues ops). Throws CudaError when there is no such GPU.
  explicit CudaDevice(int ordinal = 0);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int ordinal() const { return ordinal_; }
  // The GPU's compute capability, major · 10 + minor (90 for an H100).
  int compute_capability() const { return compute_capability_; }
  // How many fp8_gemm calls ran on the FP8 tensor cores (cuBLASLt) rather than decoded.
  std::int64_t fp8_tensor_core_gemms() const { return fp8_tensor_core_gemms_; }
  std::string_view kind() const override { return "cuda"; }
  // Host threads, the second one on this GPU too (cudaSetDevice is per thread).
  HostTurns& host_turns() override { return turns_; }
  using Device::allocate;
  Tensor allocate(const Shape& shape, DType dtype, MemoryUse use) override;
  const MemoryTracker& memory() const override { return *memory_; }
  Stream& default_stream() override;
  std::unique_ptr<Stream> create_stream(std::string name) override;
  std::unique_ptr<Event> create_event() override;
  // Synchronizes the stream: then the work issued on it is done, now.
  std::chrono::steady_clock::time_point trace_time(Stream& s) override;

  // Synchronous: staged through host memory, converted to the tensor's precision.
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
  // The router waits for its counts (a stream sync), as Megatron's copy to the CPU does.
  void moe_router(Stream& s, const MoeRouterArgs& args,
                  std::span<std::int64_t> tokens_per_expert) override;
  void moe_router_backward(Stream& s, const MoeRouterBackwardArgs& args) override;
  void moe_drop_tokens(Stream& s, const MoeDropTokensArgs& args,
                       std::span<std::int64_t> tokens_per_expert) override;
  void moe_permute(Stream& s, const MoePermuteArgs& args) override;
  void moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& args) override;
  void moe_unpermute(Stream& s, const MoeUnpermuteArgs& args) override;
  void moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& args) override;
  void add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(Stream& s, Tensor& x, float factor) override;
  void fill(Stream& s, Tensor& x, float value) override;
  // Same dtype: a device copy; fp32 ↔ bf16: a converting copy.
  void copy(Stream& s, const Tensor& from, Tensor& to) override;
  void copy_columns(Stream& s, const ColumnCopyArgs& args) override;
  void copy_rows(Stream& s, const RowCopyArgs& args) override;
  void fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) override;
  void fp8_gemm(Stream& s, const Fp8GemmArgs& a) override;
  void fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) override;
  void fp8_amax(Stream& s, const Tensor& x, Tensor& amax) override;
  void check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale, Tensor& found) override;
  void fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) override;
  void sum_squares(Stream& s, const Tensor& x, Tensor& out) override;
  void adam(Stream& s, const AdamArgs& a) override;

 private:
  class Scratch;
  Scratch scratch(std::size_t bytes);
  void fp8_gemm_tensor_cores(Stream& s, const Fp8GemmArgs& a, const kernels::cuda::Fp8LtPlan& plan);
  bool gemm_with_epilogue(Stream& s, const GemmArgs& a, const GemmShape& g);
  kernels::cuda::LtMatmul& lt();  // made on first use

  int ordinal_;
  int compute_capability_ = 0;
  std::int64_t fp8_tensor_core_gemms_ = 0;
  std::shared_ptr<MemoryTracker> memory_;  // shared with live storages, which may outlive us
  std::shared_ptr<DeviceMemoryPool> pool_;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<kernels::cuda::LtMatmul> lt_;  // cuBLASLt, made by the first FP8 GEMM
  std::unique_ptr<CudaStream> default_stream_;
  ThreadTurns turns_;
};

}  // namespace tandem
