// CudaDevice: argument checks on the host (the same ones as the cpu binding, plus dtypes),
// then one launcher of kernels/cuda per op on the stream's cudaStream_t.
#include "exec/cuda/cuda_device.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include "exec/cuda/cuda_stream.hpp"
#include "exec/cuda/device_memory_pool.hpp"
#include "exec/fp8_arguments.hpp"
#include "exec/op_arguments.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cublas_library.hpp"
#include "kernels/cuda/fp8_lt_plan.hpp"
#include "kernels/cuda/lt_matmul.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/math/bf16.hpp"
#include "kernels/math/fp16.hpp"

namespace tandem {

namespace kc = kernels::cuda;
namespace cpu = kernels::cpu;

namespace {

using op_arguments::attention_dropout;
using op_arguments::attention_shape;
using op_arguments::ce_shape;
using op_arguments::hidden_dropout;
using op_arguments::last_dim;
using op_arguments::row_bias;
using op_arguments::same_numel;

class DeviceStorage final : public Storage {
 public:
  DeviceStorage(Bytes bytes, MemoryUse use, std::shared_ptr<MemoryTracker> tracker,
                std::shared_ptr<DeviceMemoryPool> pool)
      : bytes_(bytes), use_(use), tracker_(std::move(tracker)), pool_(std::move(pool)) {
    data_ = pool_->take(static_cast<std::size_t>(bytes.value));
    tracker_->on_allocate(bytes_, use_);
  }
  ~DeviceStorage() override {
    pool_->give(static_cast<std::size_t>(bytes_.value), data_);
    tracker_->on_release(bytes_, use_);
  }
  DeviceStorage(const DeviceStorage&) = delete;
  DeviceStorage& operator=(const DeviceStorage&) = delete;
  void* data() override { return data_; }
  Bytes bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  Bytes bytes_;
  MemoryUse use_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::shared_ptr<DeviceMemoryPool> pool_;
};

// The address of t's first element.
void* address(const Tensor& t) {
  return static_cast<char*>(tensor_data_or_throw(t)) + t.offset * dtype_size(t.dtype).value;
}

kc::Floats floats(const Tensor& t, const char* op) {
  switch (t.dtype) {
    case DType::fp32:
      return {address(t), kc::Precision::fp32};
    case DType::bf16:
      return {address(t), kc::Precision::bf16};
    case DType::fp16:
      return {address(t), kc::Precision::fp16};
    default:
      throw std::invalid_argument(std::string("cuda ") + op + ": tensor " + t.shape.to_string() +
                                  " holds " + std::string(dtype_name(t.dtype)) +
                                  ", needs fp32, bf16 or fp16");
  }
}

// A 16-bit buffer's host bits from floats, and back (bf16 or fp16 rounding).
std::uint16_t sixteen_bits(kc::Precision p, float v) {
  return p == kc::Precision::bf16 ? kernels::math::bf16_from_float(v)
                                  : kernels::math::fp16_from_float(v);
}
float from_sixteen_bits(kc::Precision p, std::uint16_t b) {
  return p == kc::Precision::bf16 ? kernels::math::float_from_bf16(b)
                                  : kernels::math::float_from_fp16(b);
}

// cuBLASLt's rule for its operands, C and vectors: 16-byte aligned addresses.
bool aligned(const void* p) {
  return kc::lt_alignment(p) >= 16;
}

float* f32(const Tensor& t) {
  return t.data<float>();
}
const std::int32_t* i32(const Tensor& t) {
  return t.data<std::int32_t>();
}
std::int64_t* i64(const Tensor& t) {
  return t.data<std::int64_t>();
}

void at_least(const char* op, const Tensor& t, std::int64_t n, const char* what) {
  if (t.numel() < n)
    throw std::invalid_argument(std::string(op) + ": " + what + " " + t.shape.to_string() +
                                " holds fewer than the " + std::to_string(n) +
                                " elements it needs");
}

}  // namespace

// Device memory for one op's temporaries, from the pool, untracked (as the cpu binding's
// scratch vectors): returned when the op has been issued; the pool's release events keep
// it from being reused before the op ran.
class CudaDevice::Scratch {
 public:
  Scratch(std::shared_ptr<DeviceMemoryPool> pool, std::size_t bytes)
      : pool_(std::move(pool)), bytes_(bytes), data_(pool_->take(bytes)) {}
  ~Scratch() { pool_->give(bytes_, data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }

 private:
  std::shared_ptr<DeviceMemoryPool> pool_;
  std::size_t bytes_;
  void* data_;
};

CudaDevice::Scratch CudaDevice::scratch(std::size_t bytes) {
  return Scratch(pool_, bytes);
}

CudaDevice::CudaDevice(int ordinal)
    : ordinal_(ordinal),
      memory_(std::make_shared<MemoryTracker>()),
      pool_(std::make_shared<DeviceMemoryPool>(ordinal)),
      turns_([ordinal] { TANDEM_CUDA_CHECK(cudaSetDevice(ordinal)); }) {
  TANDEM_CUDA_CHECK(cudaSetDevice(ordinal));
  int major = 0, minor = 0;
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal));
  compute_capability_ = major * 10 + minor;
  TANDEM_CUBLAS_CHECK(kernels::cuda::cublas().create(&blas_));
  TANDEM_CUBLAS_CHECK(kernels::cuda::cublas().set_math_mode(
      blas_, CUBLAS_DEFAULT_MATH));  // fp32 stays fp32: no TF32
  default_stream_ = std::make_unique<CudaStream>("compute", pool_);
}

CudaDevice::~CudaDevice() {
  if (default_stream_) (void)cudaStreamSynchronize(default_stream_->handle());
  lt_.reset();
  (void)kernels::cuda::cublas().destroy(blas_);
}

Stream& CudaDevice::default_stream() {
  return *default_stream_;
}

Tensor CudaDevice::allocate(const Shape& shape, DType dtype, MemoryUse use) {
  const Bytes bytes = dtype_size(dtype) * shape.numel();
  return Tensor{shape, dtype, std::make_shared<DeviceStorage>(bytes, use, memory_, pool_), 0};
}

std::unique_ptr<Stream> CudaDevice::create_stream(std::string name) {
  return std::make_unique<CudaStream>(std::move(name), pool_);
}

std::unique_ptr<Event> CudaDevice::create_event() {
  return std::make_unique<CudaEvent>();
}

std::chrono::steady_clock::time_point CudaDevice::trace_time(Stream& s) {
  s.synchronize();
  return std::chrono::steady_clock::now();
}

void CudaDevice::upload(Stream& s, Tensor& t, const ProduceFloats& produce) {
  const kc::Floats dst = floats(t, "upload");
  std::vector<float> host(static_cast<std::size_t>(t.numel()));
  produce(std::span<float>(host));
  const cudaStream_t stream = cuda_stream_of(s);
  if (dst.precision != kc::Precision::fp32) {
    std::vector<std::uint16_t> bits(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) bits[i] = sixteen_bits(dst.precision, host[i]);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.data, bits.data(), bits.size() * sizeof(std::uint16_t),
                                      cudaMemcpyHostToDevice, stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));  // `bits` dies with this frame
    return;
  }
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.data, host.data(), host.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaDevice::upload(Stream& s, Tensor& t, const ProduceInts& produce) {
  std::int32_t* dst = t.data<std::int32_t>();
  std::vector<std::int32_t> host(static_cast<std::size_t>(t.numel()));
  produce(std::span<std::int32_t>(host));
  const cudaStream_t stream = cuda_stream_of(s);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaDevice::download(Stream& s, const Tensor& t, std::span<float> host) {
  if (static_cast<std::int64_t>(host.size()) != t.numel())
    throw std::invalid_argument("download: host buffer of " + std::to_string(host.size()) +
                                " floats for a tensor of " + std::to_string(t.numel()));
  const kc::Floats src = floats(t, "download");
  const cudaStream_t stream = cuda_stream_of(s);
  if (src.precision != kc::Precision::fp32) {
    std::vector<std::uint16_t> bits(host.size());
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(bits.data(), src.data, bits.size() * sizeof(std::uint16_t),
                                      cudaMemcpyDeviceToHost, stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < host.size(); ++i)
      host[i] = from_sixteen_bits(src.precision, bits[i]);
    return;
  }
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(host.data(), src.data, host.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaDevice::gemm(Stream& s, const GemmArgs& a) {
  const GemmShape g = check_gemm(a);
  if ((a.bias || a.bias_grad) && gemm_with_epilogue(s, a, g)) return;
  kc::gemm({cuda_stream_of(s), blas_},
           {.m = g.m,
            .n = g.n,
            .k = g.k,
            .transpose_a = a.transpose_a,
            .transpose_b = a.transpose_b,
            .alpha = a.alpha,
            .beta = a.beta},
           floats(a.a, "gemm"), floats(a.b, "gemm"), floats(a.c, "gemm"));
  if (a.bias) bias_add(s, a.c, *a.bias);
  if (a.bias_grad) bias_grad(s, a.a, *a.bias_grad);
}

kc::LtMatmul& CudaDevice::lt() {
  if (!lt_) lt_ = std::make_unique<kc::LtMatmul>();
  return *lt_;
}

// One cuBLASLt call with the epilogue, where kernels/cuda/gemm_lt_plan.hpp allows it and
// cuBLASLt offers a kernel; false (nothing launched) otherwise. The bias gradient comes out
// in C's type and is added into the fp32 gradient, as Device::bias_grad accumulates.
bool CudaDevice::gemm_with_epilogue(Stream& s, const GemmArgs& a, const GemmShape& g) {
  const kc::Floats out = floats(a.c, "gemm");
  const kc::ConstFloats first = floats(a.b, "gemm"), second = floats(a.a, "gemm");
  const kc::GemmLtPlan plan = kc::plan_gemm_lt(
      {.m = g.m,
       .n = g.n,
       .k = g.k,
       .transpose_a = a.transpose_a,
       .transpose_b = a.transpose_b,
       .operands = second.precision == first.precision ? second.precision : kc::Precision::fp32,
       .out = out.precision,
       .bias = a.bias != nullptr,
       .bias_precision = a.bias ? floats(*a.bias, "gemm").precision : out.precision,
       .bias_grad = a.bias_grad != nullptr,
       .aligned = aligned(first.data) && aligned(second.data) && aligned(out.data) &&
                  (!a.bias || aligned(address(*a.bias)))});
  if (!plan.runs()) return false;
  if (!lt().has_algorithm(
          plan, a.beta != 0,
          kc::LtMatmul::alignments({.first = first.data, .second = second.data, .out = out.data})))
    return false;
  const std::size_t element = out.precision == kc::Precision::fp32 ? 4 : 2;
  std::optional<Scratch> sums;
  if (a.bias_grad) sums.emplace(pool_, static_cast<std::size_t>(g.m) * element);
  const Scratch workspace = scratch(kc::kLtWorkspaceBytes);
  const kc::Context c{cuda_stream_of(s), blas_};
  lt().gemm(c.stream, plan, {.first = first.data, .second = second.data, .out = out.data},
            a.bias ? address(*a.bias) : sums->data(), a.alpha, a.beta, workspace.data());
  if (a.bias_grad)
    kc::add(c, {sums->data(), out.precision}, floats(*a.bias_grad, "gemm"),
            floats(*a.bias_grad, "gemm"), g.m);
  return true;
}

void CudaDevice::bias_add(Stream& s, Tensor& x, const Tensor& bias) {
  kc::bias_add({cuda_stream_of(s), blas_}, floats(x, "bias_add"), floats(bias, "bias_add"),
               x.numel() / bias.numel(), bias.numel());
}

void CudaDevice::bias_grad(Stream& s, const Tensor& grad, Tensor& grad_bias) {
  kc::bias_backward({cuda_stream_of(s), blas_}, floats(grad_bias, "bias_grad"),
                    floats(grad, "bias_grad"), grad.numel() / grad_bias.numel(), grad_bias.numel());
}

void CudaDevice::layer_norm(Stream& s, const LayerNormArgs& a) {
  const std::int64_t C = a.gamma.numel();
  const cpu::LayerNormShape shape{a.input.numel() / C, C};
  same_numel("layer_norm", a.input, a.output);
  at_least("layer_norm", a.mean, shape.rows, "mean");
  at_least("layer_norm", a.rstd, shape.rows, "rstd");
  kc::layer_norm_forward({cuda_stream_of(s), blas_}, shape, floats(a.input, "layer_norm"),
                         floats(a.gamma, "layer_norm"), floats(a.beta, "layer_norm"),
                         floats(a.output, "layer_norm"), f32(a.mean), f32(a.rstd), a.epsilon);
}

void CudaDevice::layer_norm_backward(Stream& s, const LayerNormBackwardArgs& a) {
  const std::int64_t C = a.gamma.numel();
  same_numel("layer_norm_backward", a.input, a.grad_input);
  same_numel("layer_norm_backward", a.input, a.grad_output);
  kc::layer_norm_backward({cuda_stream_of(s), blas_}, {a.input.numel() / C, C},
                          floats(a.grad_output, "layer_norm"), floats(a.input, "layer_norm"),
                          floats(a.gamma, "layer_norm"), f32(a.mean), f32(a.rstd),
                          floats(a.grad_input, "layer_norm"), floats(a.grad_gamma, "layer_norm"),
                          floats(a.grad_beta, "layer_norm"));
}

void CudaDevice::attention(Stream& s, const AttentionArgs& a) {
  const auto sh = attention_shape(a.qkv);
  if (a.output.numel() != sh.B * sh.T * sh.NH * sh.HD ||
      a.probs.numel() != sh.B * sh.NH * sh.T * sh.T)
    throw std::invalid_argument("attention: output or probs does not match qkv " +
                                a.qkv.shape.to_string());
  const kc::Floats probs = floats(a.probs, "attention");
  const auto drop = attention_dropout(a.dropout);
  // The dropped probabilities feed P·V only; probs keeps them undropped for backward.
  const Scratch dropped = scratch(
      drop.p > 0 ? static_cast<std::size_t>(a.probs.numel() * dtype_size(a.probs.dtype).value) : 0);
  kc::attention_forward({cuda_stream_of(s), blas_}, sh, floats(a.qkv, "attention"),
                        floats(a.output, "attention"), probs, drop,
                        {dropped.data(), probs.precision});
}

void CudaDevice::attention_backward(Stream& s, const AttentionBackwardArgs& a) {
  const auto sh = attention_shape(a.qkv);
  same_numel("attention_backward", a.qkv, a.grad_qkv);
  const kc::ConstFloats probs = floats(a.probs, "attention_backward");
  const std::int64_t elements = sh.B * sh.NH * sh.T * sh.T;
  const auto bytes = static_cast<std::size_t>(elements * dtype_size(a.probs.dtype).value);
  const Scratch dp = scratch(bytes);
  const auto drop = attention_dropout(a.dropout);
  const Scratch dropped = scratch(drop.p > 0 ? bytes : 0);
  kc::attention_backward({cuda_stream_of(s), blas_}, sh, floats(a.grad_output, "attention"),
                         floats(a.qkv, "attention"), probs, floats(a.grad_qkv, "attention"),
                         {dp.data(), probs.precision}, drop, {dropped.data(), probs.precision});
}

void CudaDevice::rms_norm(Stream& s, const RmsNormArgs& a) {
  const std::int64_t C = a.gamma.numel();
  same_numel("rms_norm", a.input, a.output);
  const kernels::cpu::RmsNormShape shape{a.input.numel() / C, C};
  at_least("rms_norm", a.rstd, shape.rows, "rstd");
  kc::rms_norm_forward({cuda_stream_of(s), blas_}, shape, floats(a.input, "rms_norm"),
                       floats(a.gamma, "rms_norm"), floats(a.output, "rms_norm"), f32(a.rstd),
                       a.epsilon);
}

void CudaDevice::rms_norm_backward(Stream& s, const RmsNormBackwardArgs& a) {
  const std::int64_t C = a.gamma.numel();
  same_numel("rms_norm_backward", a.input, a.grad_input);
  same_numel("rms_norm_backward", a.input, a.grad_output);
  kc::rms_norm_backward({cuda_stream_of(s), blas_}, {a.input.numel() / C, C},
                        floats(a.grad_output, "rms_norm_backward"),
                        floats(a.input, "rms_norm_backward"), floats(a.gamma, "rms_norm_backward"),
                        f32(a.rstd), floats(a.grad_input, "rms_norm_backward"),
                        floats(a.grad_gamma, "rms_norm_backward"));
}

void CudaDevice::swiglu(Stream& s, const Tensor& in, Tensor& out) {
  const std::int64_t F = op_arguments::swiglu_width("swiglu", in, out);
  kc::swiglu_forward({cuda_stream_of(s), blas_}, floats(in, "swiglu"), floats(out, "swiglu"),
                     out.numel() / F, F);
}

void CudaDevice::swiglu_backward(Stream& s, const Tensor& dout, const Tensor& in, Tensor& din) {
  const std::int64_t F = op_arguments::swiglu_width("swiglu_backward", in, dout);
  same_numel("swiglu_backward", in, din);
  kc::swiglu_backward({cuda_stream_of(s), blas_}, floats(dout, "swiglu_backward"),
                      floats(in, "swiglu_backward"), floats(din, "swiglu_backward"),
                      dout.numel() / F, F);
}

void CudaDevice::rope(Stream& s, const RopeArgs& a) {
  kc::rope_apply({cuda_stream_of(s), blas_}, op_arguments::rope_shape(a), floats(a.x, "rope"),
                 a.inverse);
}

void CudaDevice::flash_attention(Stream& s, const FlashAttentionArgs& a) {
  const auto sh = op_arguments::flash_shape("flash_attention", a);
  kc::flash_attention_forward({cuda_stream_of(s), blas_}, sh, floats(a.q_source, "flash_attention"),
                              floats(a.kv_source, "flash_attention"),
                              floats(a.output, "flash_attention"), f32(a.lse));
}

void CudaDevice::flash_attention_backward(Stream& s, const FlashAttentionBackwardArgs& a) {
  const char* op = "flash_attention_backward";
  const auto sh = op_arguments::flash_shape(op, a);
  same_numel(op, a.q_source, a.grad_q_source);
  same_numel(op, a.kv_source, a.grad_kv_source);
  same_numel(op, a.output, a.grad_output);
  kc::flash_attention_backward({cuda_stream_of(s), blas_}, sh, floats(a.grad_output, op),
                               floats(a.q_source, op), floats(a.kv_source, op),
                               floats(a.output, op), f32(a.lse), floats(a.grad_q_source, op),
                               floats(a.grad_kv_source, op));
}

void CudaDevice::gelu(Stream& s, const Tensor& in, Tensor& out) {
  same_numel("gelu", in, out);
  kc::gelu_forward({cuda_stream_of(s), blas_}, floats(in, "gelu"), floats(out, "gelu"), in.numel());
}

void CudaDevice::gelu_backward(Stream& s, const Tensor& dout, const Tensor& in, Tensor& din) {
  same_numel("gelu_backward", in, din);
  same_numel("gelu_backward", in, dout);
  kc::gelu_backward({cuda_stream_of(s), blas_}, floats(dout, "gelu_backward"),
                    floats(in, "gelu_backward"), floats(din, "gelu_backward"), in.numel());
}

void CudaDevice::bias_gelu(Stream& s, const Tensor& in, const Tensor& bias, Tensor& out) {
  same_numel("bias_gelu", in, out);
  const std::int64_t C = row_bias("bias_gelu", in, bias);
  kc::bias_gelu_forward({cuda_stream_of(s), blas_}, floats(in, "bias_gelu"),
                        floats(bias, "bias_gelu"), floats(out, "bias_gelu"), in.numel() / C, C);
}

void CudaDevice::bias_gelu_backward(Stream& s, const Tensor& dout, const Tensor& in,
                                    const Tensor& bias, Tensor& din) {
  same_numel("bias_gelu_backward", in, dout);
  same_numel("bias_gelu_backward", in, din);
  const std::int64_t C = row_bias("bias_gelu_backward", in, bias);
  const char* op = "bias_gelu_backward";
  kc::bias_gelu_backward({cuda_stream_of(s), blas_}, floats(dout, op), floats(in, op),
                         floats(bias, op), floats(din, op), in.numel() / C, C);
}

void CudaDevice::bias_dropout_add(Stream& s, const BiasDropoutAddArgs& a) {
  const char* op = "bias_dropout_add";
  same_numel(op, a.input, a.residual);
  same_numel(op, a.input, a.output);
  const std::int64_t C = a.bias ? row_bias(op, a.input, *a.bias) : last_dim(a.input);
  kc::bias_dropout_add({cuda_stream_of(s), blas_}, floats(a.input, op),
                       a.bias ? kc::ConstFloats(floats(*a.bias, op)) : kc::ConstFloats{},
                       floats(a.residual, op), floats(a.output, op), a.input.numel() / C, C,
                       hidden_dropout(op, a.input, a.dropout));
}

void CudaDevice::dropout(Stream& s, const Tensor& in, Tensor& out, const HiddenDropout& d) {
  same_numel("dropout", in, out);
  kc::dropout({cuda_stream_of(s), blas_}, floats(in, "dropout"), floats(out, "dropout"), in.numel(),
              hidden_dropout("dropout", in, d));
}

void CudaDevice::dropout_backward(Stream& s, const Tensor& dout, Tensor& din,
                                  const HiddenDropout& d) {
  const char* op = "dropout_backward";
  same_numel(op, dout, din);
  kc::dropout({cuda_stream_of(s), blas_}, floats(dout, op), floats(din, op), dout.numel(),
              hidden_dropout(op, dout, d));
}

void CudaDevice::embedding(Stream& s, const EmbeddingArgs& a) {
  const std::int64_t C = last_dim(a.table);
  at_least("embedding", a.output, a.tokens.numel() * C, "output");
  kc::embedding_forward({cuda_stream_of(s), blas_}, i32(a.tokens), floats(a.table, "embedding"),
                        {a.vocab_begin, a.table.shape[0]}, a.tokens.numel(), C,
                        floats(a.output, "embedding"));
}

void CudaDevice::embedding_backward(Stream& s, const EmbeddingBackwardArgs& a) {
  const std::int64_t C = last_dim(a.grad_table);
  at_least("embedding_backward", a.grad_output, a.tokens.numel() * C, "grad_output");
  kc::embedding_backward({cuda_stream_of(s), blas_}, i32(a.tokens),
                         floats(a.grad_output, "embedding_backward"),
                         {a.vocab_begin, a.grad_table.shape[0]}, a.tokens.numel(), C,
                         floats(a.grad_table, "embedding_backward"));
}

void CudaDevice::cross_entropy_max(Stream& s, const CrossEntropyArgs& a, Tensor& row_max) {
  at_least("cross_entropy_max", row_max, a.logits.shape[0], "row_max");
  kc::cross_entropy_max({cuda_stream_of(s), blas_}, ce_shape(a), floats(a.logits, "cross_entropy"),
                        f32(row_max));
}

void CudaDevice::cross_entropy_sums(Stream& s, const CrossEntropyArgs& a, const Tensor& row_max,
                                    Tensor& sum_exp, Tensor& target_logit) {
  kc::cross_entropy_sums({cuda_stream_of(s), blas_}, ce_shape(a), floats(a.logits, "cross_entropy"),
                         i32(a.targets), f32(row_max), f32(sum_exp), f32(target_logit));
}

void CudaDevice::cross_entropy_loss(Stream& s, const Tensor& row_max, const Tensor& sum_exp,
                                    const Tensor& target_logit, Tensor& loss) {
  kc::cross_entropy_loss({cuda_stream_of(s), blas_}, loss.numel(), f32(row_max), f32(sum_exp),
                         f32(target_logit), f32(loss));
}

void CudaDevice::cross_entropy_backward(Stream& s, const CrossEntropyArgs& a, const Tensor& row_max,
                                        const Tensor& sum_exp, const Tensor& grad_loss,
                                        Tensor& grad_logits) {
  same_numel("cross_entropy_backward", a.logits, grad_logits);
  kc::cross_entropy_backward({cuda_stream_of(s), blas_}, ce_shape(a),
                             floats(a.logits, "cross_entropy"), i32(a.targets), f32(row_max),
                             f32(sum_exp), f32(grad_loss), floats(grad_logits, "cross_entropy"));
}

void CudaDevice::moe_router(Stream& s, const MoeRouterArgs& a,
                            std::span<std::int64_t> tokens_per_expert) {
  const char* op = "moe_router";
  const auto sh = op_arguments::router_shape(op, a, a.force_balance);
  same_numel(op, a.logits, a.probs);
  for (std::size_t n : {a.aux_tokens_per_expert.size(), a.expert_bias.size()})
    if (n != 0 && static_cast<std::int64_t>(n) != sh.experts)
      throw std::invalid_argument("moe_router: aux_tokens_per_expert or expert_bias holds " +
                                  std::to_string(n) + " values for " + std::to_string(sh.experts) +
                                  " experts");
  if (static_cast<std::int64_t>(tokens_per_expert.size()) != sh.experts)
    throw std::invalid_argument("moe_router: tokens_per_expert holds " +
                                std::to_string(tokens_per_expert.size()) + " counts for " +
                                std::to_string(sh.experts) + " experts");
  const cudaStream_t stream = cuda_stream_of(s);
  const kc::Context c{stream, blas_};
  const bool aux = !a.aux_tokens_per_expert.empty();
  // The aux loss's counts differ from the routing's only when a bias or groups chose.
  const bool aux_own_top =
      aux && !a.force_balance &&
      ((!a.expert_bias.empty() && sh.score == kernels::math::RouterScore::sigmoid) ||
       sh.num_groups > 0);
  const Scratch counts = scratch(2 * tokens_per_expert.size() * sizeof(std::int64_t));
  auto* device_counts = static_cast<std::int64_t*>(counts.data());
  const Scratch bias = scratch(std::max<std::size_t>(1, a.expert_bias.size_bytes()));
  if (!a.expert_bias.empty())
    kc::upload_by_launch(c, a.expert_bias.data(), sh.experts, static_cast<float*>(bias.data()));
  const Scratch aux_top = scratch(
      aux_own_top ? static_cast<std::size_t>(sh.tokens * sh.top_k) * sizeof(std::int32_t) : 1);
  kc::router_top_k(c, sh, floats(a.logits, op), f32(a.probs), a.top.data<std::int32_t>(),
                   f32(a.gates), device_counts,
                   a.expert_bias.empty() ? nullptr : static_cast<const float*>(bias.data()),
                   aux_own_top ? static_cast<std::int32_t*>(aux_top.data()) : nullptr,
                   aux ? device_counts + sh.experts : nullptr);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(tokens_per_expert.data(), device_counts,
                                    tokens_per_expert.size_bytes(), cudaMemcpyDeviceToHost,
                                    stream));
  if (aux)
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(a.aux_tokens_per_expert.data(), device_counts + sh.experts,
                                      a.aux_tokens_per_expert.size_bytes(), cudaMemcpyDeviceToHost,
                                      stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaDevice::moe_router_backward(Stream& s, const MoeRouterBackwardArgs& a) {
  const char* op = "moe_router_backward";
  const auto sh = op_arguments::router_shape(op, a, false);
  same_numel(op, a.probs, a.grad_logits);
  if (!a.aux_grad.empty() && static_cast<std::int64_t>(a.aux_grad.size()) != sh.experts)
    throw std::invalid_argument("moe_router_backward: aux_grad holds " +
                                std::to_string(a.aux_grad.size()) + " values for " +
                                std::to_string(sh.experts) + " experts");
  const kc::Context c{cuda_stream_of(s), blas_};
  const Scratch aux = scratch(std::max<std::size_t>(1, a.aux_grad.size_bytes()));
  auto* device_aux = static_cast<float*>(aux.data());
  if (!a.aux_grad.empty()) kc::upload_by_launch(c, a.aux_grad.data(), sh.experts, device_aux);
  kc::router_backward(c, sh, f32(a.probs), i32(a.top), f32(a.gates), f32(a.grad_gates),
                      a.aux_grad.empty() ? nullptr : device_aux, floats(a.grad_logits, op));
}

void CudaDevice::moe_drop_tokens(Stream& s, const MoeDropTokensArgs& a,
                                 std::span<std::int64_t> tokens_per_expert) {
  const char* op = "moe_drop_tokens";
  const auto sh =
      op_arguments::drop_shape(op, a, static_cast<std::int64_t>(tokens_per_expert.size()));
  const cudaStream_t stream = cuda_stream_of(s);
  const Scratch counts = scratch(2 * tokens_per_expert.size() * sizeof(std::int64_t));
  auto* device_counts = static_cast<std::int64_t*>(counts.data());
  kc::moe_drop_tokens({stream, blas_}, sh, i32(a.top), f32(a.gates),
                      a.dispatch_top.data<std::int32_t>(), f32(a.dispatch_gates), device_counts,
                      device_counts + sh.experts);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(tokens_per_expert.data(), device_counts,
                                    tokens_per_expert.size_bytes(), cudaMemcpyDeviceToHost,
                                    stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaDevice::moe_permute(Stream& s, const MoePermuteArgs& a) {
  const char* op = "moe_permute";
  const auto sh = op_arguments::moe_shape(op, a.input, a.permuted, a.top.numel(), a.experts);
  const std::int64_t slots = sh.tokens * sh.top_k;
  at_least(op, a.row_of_copy, slots, "row_of_copy");
  at_least(op, a.source_of_row, sh.rows, "source_of_row");
  const Scratch maps =
      scratch(static_cast<std::size_t>(kc::moe_permute_scratch(sh.experts)) * sizeof(std::int64_t));
  kc::moe_permute({cuda_stream_of(s), blas_}, sh, floats(a.input, op), i32(a.top),
                  floats(a.permuted, op), i64(a.source_of_row), i64(a.row_of_copy),
                  static_cast<std::int64_t*>(maps.data()));
}

void CudaDevice::moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& a) {
  const char* op = "moe_permute_backward";
  const auto sh =
      op_arguments::moe_shape(op, a.grad_input, a.grad_permuted, a.row_of_copy.numel(), 1);
  kc::moe_permute_backward({cuda_stream_of(s), blas_}, sh, floats(a.grad_permuted, op),
                           i64(a.row_of_copy), floats(a.grad_input, op));
}

void CudaDevice::moe_unpermute(Stream& s, const MoeUnpermuteArgs& a) {
  const char* op = "moe_unpermute";
  const auto sh = op_arguments::moe_shape(op, a.output, a.expert_output, a.row_of_copy.numel(), 1);
  at_least(op, a.gates, sh.tokens * sh.top_k, "gates");
  kc::moe_unpermute({cuda_stream_of(s), blas_}, sh, floats(a.expert_output, op), f32(a.gates),
                    i64(a.row_of_copy), floats(a.output, op));
}

void CudaDevice::moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& a) {
  const char* op = "moe_unpermute_backward";
  const auto sh =
      op_arguments::moe_shape(op, a.grad_output, a.expert_output, a.row_of_copy.numel(), 1);
  const std::int64_t copies = sh.tokens * sh.top_k;
  same_numel(op, a.expert_output, a.grad_expert_output);
  at_least(op, a.gates, copies, "gates");
  at_least(op, a.grad_gates, copies, "grad_gates");
  at_least(op, a.source_of_row, sh.rows, "source_of_row");
  kc::moe_unpermute_backward({cuda_stream_of(s), blas_}, sh, floats(a.grad_output, op),
                             floats(a.expert_output, op), f32(a.gates), i64(a.source_of_row),
                             i64(a.row_of_copy), floats(a.grad_expert_output, op),
                             f32(a.grad_gates));
}

void CudaDevice::add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) {
  same_numel("add", a, b);
  same_numel("add", a, out);
  kc::add({cuda_stream_of(s), blas_}, floats(a, "add"), floats(b, "add"), floats(out, "add"),
          a.numel());
}

void CudaDevice::scale(Stream& s, Tensor& x, float factor) {
  kc::scale({cuda_stream_of(s), blas_}, floats(x, "scale"), x.numel(), factor);
}

void CudaDevice::fill(Stream& s, Tensor& x, float value) {
  if (x.dtype == DType::int32) {
    kc::fill_int32({cuda_stream_of(s), blas_}, x.data<std::int32_t>(), x.numel(),
                   static_cast<std::int32_t>(value));
    return;
  }
  kc::fill({cuda_stream_of(s), blas_}, floats(x, "fill"), x.numel(), value);
}

void CudaDevice::copy_columns(Stream& s, const ColumnCopyArgs& a) {
  kc::copy_columns({cuda_stream_of(s), blas_}, op_arguments::column_copy(a),
                   floats(a.from, "copy_columns"), floats(a.to, "copy_columns"));
}

void CudaDevice::copy(Stream& s, const Tensor& from, Tensor& to) {
  same_numel("copy", from, to);
  if (from.dtype == to.dtype) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(address(to), address(from),
                                      static_cast<std::size_t>(from.bytes().value),
                                      cudaMemcpyDeviceToDevice, cuda_stream_of(s)));
    return;
  }
  kc::convert({cuda_stream_of(s), blas_}, floats(from, "copy"), floats(to, "copy"), from.numel());
}

// One device-to-device copy per block, in stream order.
void CudaDevice::copy_rows(Stream& s, const RowCopyArgs& a) {
  const std::int64_t row = op_arguments::row_copy_bytes(a);
  const char* from = static_cast<const char*>(address(a.from));
  char* to = static_cast<char*>(address(a.to));
  for (const RowBlock& b : a.blocks)
    if (b.rows > 0)
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(to + b.to_row * row, from + b.from_row * row,
                                        static_cast<std::size_t>(b.rows * row),
                                        cudaMemcpyDeviceToDevice, cuda_stream_of(s)));
}

void CudaDevice::sum_squares(Stream& s, const Tensor& x, Tensor& out) {
  const Scratch partial = scratch(kc::kSumSquaresBlocks * sizeof(double));
  kc::sum_squares({cuda_stream_of(s), blas_}, floats(x, "sum_squares"), x.numel(), f32(out),
                  static_cast<double*>(partial.data()));
}

void CudaDevice::check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale, Tensor& found) {
  if (found.numel() != 1) throw std::invalid_argument("check_finite_and_unscale: found holds one");
  kc::check_finite_and_unscale({cuda_stream_of(s), blas_}, f32(x), x.numel(), inv_scale,
                               f32(found));
}

void CudaDevice::adam(Stream& s, const AdamArgs& a) {
  same_numel("adam", a.param, a.grad);
  same_numel("adam", a.param, a.exp_avg);
  same_numel("adam", a.param, a.exp_avg_sq);
  const auto step = kernels::math::make_adam_step({.lr = a.lr,
                                                   .beta1 = a.beta1,
                                                   .beta2 = a.beta2,
                                                   .epsilon = a.epsilon,
                                                   .weight_decay = a.weight_decay,
                                                   .grad_scale = a.grad_scale},
                                                  a.step);
  kc::adamw({cuda_stream_of(s), blas_}, f32(a.param), f32(a.grad), f32(a.exp_avg),
            f32(a.exp_avg_sq), a.param.numel(), step);
}

// FP8 (exec/fp8_arguments.hpp checks as on the cpu binding). A GEMM of per-tensor-scaled
// operands runs on the FP8 tensor cores through cuBLASLt where kernels/cuda/fp8_lt_plan.hpp
// says it can (compute capability 8.9+, M, N, K multiples of 16, not E5M2 × E5M2, 16-byte
// aligned), operands held the other way transposed first; any other — block scales, odd
// shapes, an A100 — decodes both operands into fp32 scratch and runs cuBLAS's fp32 GEMM on
// them (into fp32 scratch when C is 16-bit): the cpu binding's arithmetic, at fp32 speed.
void CudaDevice::fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) {
  check_fp8_quantize("fp8_quantize", a);
  const auto& l = a.output.layout;
  const Scratch per_block =
      scratch(static_cast<std::size_t>(a.output.scale_inv.numel()) * sizeof(float));
  kc::fp8_quantize({cuda_stream_of(s), blas_},
                   {.input = floats(a.input, "fp8_quantize"),
                    .rows = a.output.rows,
                    .cols = a.output.cols,
                    .format = math_format(l.format),
                    .blocks = {l.block_rows, l.block_cols},
                    .rule = a.scale                          ? kernels::math::Fp8ScaleRule::given
                            : l.scaling == Fp8Scaling::mx    ? kernels::math::Fp8ScaleRule::mx
                            : l.scaling == Fp8Scaling::block ? kernels::math::Fp8ScaleRule::block
                                                             : kernels::math::Fp8ScaleRule::current,
                    .scale = a.scale ? f32(*a.scale) : nullptr},
                   static_cast<std::uint8_t*>(address(a.output.codes)), f32(a.output.scale_inv),
                   a.amax ? f32(*a.amax) : nullptr, static_cast<float*>(per_block.data()));
}

void CudaDevice::fp8_gemm(Stream& s, const Fp8GemmArgs& a) {
  const auto shape = check_fp8_gemm("fp8_gemm", a);
  const kc::Floats out = floats(a.c, "fp8_gemm");
  const kc::Fp8LtPlan plan = kc::plan_fp8_lt_gemm(
      {.m = shape.m,
       .n = shape.n,
       .k = shape.k,
       .transpose_a = a.transpose_a,
       .transpose_b = a.transpose_b,
       .format_a = math_format(a.a.layout.format),
       .format_b = math_format(a.b.layout.format),
       .per_tensor_scales = a.a.scale_inv.numel() == 1 && a.b.scale_inv.numel() == 1,
       .out = out.precision,
       .compute_capability = compute_capability_,
       .aligned = aligned(address(a.a.codes)) && aligned(address(a.b.codes)) && aligned(out.data),
       .split_accumulator = a.split_accumulator});
  if (plan.runs()) {
    // Operands transposed first are read from scratch, which the pool aligns to 256 bytes.
    const kc::LtAlignments aligned_as{
        .first = plan.transpose_b_first ? 256 : kc::lt_alignment(address(a.b.codes)),
        .second = plan.transpose_a_first ? 256 : kc::lt_alignment(address(a.a.codes)),
        .out = kc::lt_alignment(out.data)};
    if (lt().has_algorithm(plan, a.beta != 0, aligned_as)) {
      fp8_gemm_tensor_cores(s, a, plan);
      return;
    }
  }
  const kc::Context c{cuda_stream_of(s), blas_};
  auto decode = [&](const Fp8Tensor& t, const Scratch& into) {
    kc::fp8_dequantize(c, static_cast<const std::uint8_t*>(address(t.codes)), f32(t.scale_inv),
                       t.rows, t.cols, math_format(t.layout.format),
                       {t.layout.block_rows, t.layout.block_cols},
                       {into.data(), kc::Precision::fp32});
  };
  const Scratch da = scratch(static_cast<std::size_t>(a.a.rows * a.a.cols) * sizeof(float));
  const Scratch db = scratch(static_cast<std::size_t>(a.b.rows * a.b.cols) * sizeof(float));
  decode(a.a, da);
  decode(a.b, db);
  const bool direct = out.precision == kc::Precision::fp32;
  const Scratch dc = scratch(static_cast<std::size_t>(direct ? 1 : a.c.numel()) * sizeof(float));
  const kc::Floats c32 = direct ? out : kc::Floats{dc.data(), kc::Precision::fp32};
  if (!direct && a.beta != 0) kc::convert(c, out, c32, a.c.numel());
  kc::gemm(c,
           {.m = shape.m,
            .n = shape.n,
            .k = shape.k,
            .transpose_a = a.transpose_a,
            .transpose_b = a.transpose_b,
            .alpha = a.alpha,
            .beta = a.beta},
           {da.data(), kc::Precision::fp32}, {db.data(), kc::Precision::fp32}, c32);
  if (!direct) kc::convert(c, c32, out, a.c.numel());
}

// cuBLASLt's "TN" call: its first operand is B held (N, K), its second A held (M, K); an
// operand held the other way is transposed into scratch (per tensor, so its scale holds).
void CudaDevice::fp8_gemm_tensor_cores(Stream& s, const Fp8GemmArgs& a, const kc::Fp8LtPlan& plan) {
  const kc::Context c{cuda_stream_of(s), blas_};
  const auto codes = [](const Fp8Tensor& t) {
    return static_cast<const std::uint8_t*>(address(t.codes));
  };
  const std::uint8_t* a_codes = codes(a.a);
  const std::uint8_t* b_codes = codes(a.b);
  std::optional<Scratch> a_held, b_held;
  if (plan.transpose_a_first) {
    a_held.emplace(pool_, static_cast<std::size_t>(a.a.rows * a.a.cols));
    kc::fp8_transpose(c, a_codes, a.a.rows, a.a.cols, static_cast<std::uint8_t*>(a_held->data()));
    a_codes = static_cast<const std::uint8_t*>(a_held->data());
  }
  if (plan.transpose_b_first) {
    b_held.emplace(pool_, static_cast<std::size_t>(a.b.rows * a.b.cols));
    kc::fp8_transpose(c, b_codes, a.b.rows, a.b.cols, static_cast<std::uint8_t*>(b_held->data()));
    b_codes = static_cast<const std::uint8_t*>(b_held->data());
  }
  const Scratch workspace = scratch(kc::kLtWorkspaceBytes);
  lt().fp8_gemm(c.stream, plan, {.first = b_codes, .second = a_codes, .out = address(a.c)},
                f32(a.b.scale_inv), f32(a.a.scale_inv), a.alpha, a.beta, workspace.data());
  ++fp8_tensor_core_gemms_;
}

namespace {
// Bit t set: formats[first + t] is E5M2, for up to 64 tensors (the kernels' format mask).
std::uint64_t e5m2_mask(std::span<const Fp8Format> formats, std::size_t first = 0) {
  std::uint64_t mask = 0;
  for (std::size_t t = 0; first + t < formats.size() && t < 64; ++t)
    if (formats[first + t] == Fp8Format::e5m2) mask |= std::uint64_t{1} << t;
  return mask;
}

// The per-tensor FP8 kernels take 64 tensors a launch (their formats travel as a bit mask):
// launch(first, count, e5m2 mask) for each group of up to 64 of the n tensors.
template <typename Launch>
void in_groups_of_64(std::int64_t n, std::span<const Fp8Format> formats, Launch launch) {
  for (std::int64_t first = 0; first < n; first += 64)
    launch(first, std::min<std::int64_t>(64, n - first),
           e5m2_mask(formats, static_cast<std::size_t>(first)));
}
}  // namespace

void CudaDevice::fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) {
  const auto shape = check_fp8_update_scale("fp8_update_scale", a);
  in_groups_of_64(shape.tensors, a.formats,
                  [&](std::int64_t first, std::int64_t count, std::uint64_t e5m2) {
                    kc::fp8_update_scale({cuda_stream_of(s), blas_}, f32(a.amax_history) + first,
                                         shape.length, shape.tensors, count, f32(a.scale) + first,
                                         f32(a.amax) + first, e5m2, a.use_max, a.margin);
                  });
}

void CudaDevice::fp8_amax(Stream& s, const Tensor& x, Tensor& amax) {
  check_fp8_amax("fp8_amax", x, amax);
  const Scratch chunks =
      scratch(static_cast<std::size_t>(kc::fp8_amax_scratch(x.numel())) * sizeof(float));
  kc::fp8_amax({cuda_stream_of(s), blas_}, floats(x, "fp8_amax"), x.numel(), f32(amax),
               static_cast<float*>(chunks.data()));
}

void CudaDevice::fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) {
  const std::int64_t n = check_fp8_compute_scale("fp8_compute_scale", a);
  in_groups_of_64(n, a.formats, [&](std::int64_t first, std::int64_t count, std::uint64_t e5m2) {
    kc::fp8_compute_scale({cuda_stream_of(s), blas_}, a.amax ? f32(*a.amax) + first : nullptr,
                          f32(a.scale) + first, f32(a.scale_inv) + first, count, e5m2);
  });
}

}  // namespace tandem
