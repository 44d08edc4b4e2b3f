// OpTracingDevice: forward, time on the stream's trace clock, record; see
// op_tracing_device.hpp. The keys mirror what the sim binding prices (sim/sim_device.cpp):
// the same (m, n, k, batch) per op, so a traced row and a simulated op meet in one table.
#include "train/op_tracing_device.hpp"

#include "core/trace.hpp"

namespace tandem {
namespace {

std::int64_t last_dim(const Tensor& t) {
  return t.shape.rank() == 0 ? 1 : t.shape[t.shape.rank() - 1];
}
std::int64_t rows_of(const Tensor& t) {
  const std::int64_t c = last_dim(t);
  return c == 0 ? 0 : t.numel() / c;
}
// A (rows, C) op: m = rows, n = C.
OpKey rows_key(std::string op, const Tensor& t) {
  return {std::move(op), t.dtype, rows_of(t), last_dim(t), 0, 1};
}
// A whole-buffer op: m = elements.
OpKey buffer_key(std::string op, const Tensor& t) {
  return {std::move(op), t.dtype, t.numel(), 0, 0, 1};
}
// Attention over qkv (T, B, 3, heads, head_dim): m = n = T, k = head_dim, batch = B · heads.
OpKey attention_key(std::string op, const Tensor& qkv) {
  if (qkv.shape.rank() != 5) return {std::move(op), qkv.dtype, qkv.numel(), 0, 0, 1};
  return {std::move(op), qkv.dtype,    qkv.shape[0],
          qkv.shape[0],  qkv.shape[4], qkv.shape[1] * qkv.shape[3]};
}

// Fused attention over grouped sources (T, B, G, P + 2, head_dim): m = Tq, n = Tk,
// k = head_dim, batch = B · G · P (the query heads), as sim/op_cost_llama keys it.
OpKey flash_key(std::string op, const Tensor& q, const Tensor& kv) {
  if (q.shape.rank() != 5 || kv.shape.rank() != 5) return buffer_key(std::move(op), q);
  return {std::move(op), q.dtype,    q.shape[0],
          kv.shape[0],   q.shape[4], q.shape[1] * q.shape[2] * (q.shape[3] - 2)};
}

// The compute stream's ops go on the thread of the host task that issued them (a combined
// 1F1B step's backward has its own).
int thread_of(Stream& s, int task) {
  const std::string_view name = s.name();
  if (name.starts_with("tp")) return trace_thread::tp_comm;
  if (name.starts_with("pp")) return trace_thread::pp_comm;
  if (name.starts_with("dp")) return trace_thread::dp_comm;
  return trace_thread::compute_of_task(task);
}

}  // namespace

nlohmann::json op_key_args(const OpKey& key) {
  return {{"dtype", std::string(dtype_name(key.dtype))},
          {"m", key.m},
          {"n", key.n},
          {"k", key.k},
          {"batch", key.batch}};
}

template <typename Issue>
void OpTracingDevice::traced(Stream& s, const OpKey& key, Issue&& issue) {
  // Ready: the stream drained what was issued before, so the op starts now.
  const auto start = inner_.trace_time(s);
  issue();
  const auto end = inner_.trace_time(s);
  trace_.slice(key.op, "op", thread_of(s, inner_.host_turns().current_task()), start, end,
               op_key_args(key));
}

void OpTracingDevice::upload(Stream& s, Tensor& t, const ProduceFloats& produce) {
  traced(s, buffer_key("upload", t), [&] { inner_.upload(s, t, produce); });
}
void OpTracingDevice::upload(Stream& s, Tensor& t, const ProduceInts& produce) {
  traced(s, buffer_key("upload", t), [&] { inner_.upload(s, t, produce); });
}
void OpTracingDevice::download(Stream& s, const Tensor& t, std::span<float> host) {
  traced(s, buffer_key("download", t), [&] { inner_.download(s, t, host); });
}

void OpTracingDevice::gemm(Stream& s, const GemmArgs& a) {
  const std::int64_t m = a.transpose_a ? a.a.shape[1] : a.a.shape[0];
  const std::int64_t k = a.transpose_a ? a.a.shape[0] : a.a.shape[1];
  const std::int64_t n = a.transpose_b ? a.b.shape[0] : a.b.shape[1];
  traced(s, {"gemm", a.a.dtype, m, n, k, 1}, [&] { inner_.gemm(s, a); });
}
void OpTracingDevice::bias_add(Stream& s, Tensor& x, const Tensor& bias) {
  traced(s, rows_key("bias_add", x), [&] { inner_.bias_add(s, x, bias); });
}
void OpTracingDevice::bias_grad(Stream& s, const Tensor& grad, Tensor& grad_bias) {
  traced(s, rows_key("bias_grad", grad), [&] { inner_.bias_grad(s, grad, grad_bias); });
}
void OpTracingDevice::layer_norm(Stream& s, const LayerNormArgs& a) {
  traced(s, rows_key("layer_norm", a.input), [&] { inner_.layer_norm(s, a); });
}
void OpTracingDevice::layer_norm_backward(Stream& s, const LayerNormBackwardArgs& a) {
  traced(s, rows_key("layer_norm_backward", a.input), [&] { inner_.layer_norm_backward(s, a); });
}
void OpTracingDevice::attention(Stream& s, const AttentionArgs& a) {
  traced(s, attention_key("attention", a.qkv), [&] { inner_.attention(s, a); });
}
void OpTracingDevice::attention_backward(Stream& s, const AttentionBackwardArgs& a) {
  traced(s, attention_key("attention_backward", a.qkv), [&] { inner_.attention_backward(s, a); });
}
void OpTracingDevice::gelu(Stream& s, const Tensor& input, Tensor& output) {
  traced(s, rows_key("gelu", input), [&] { inner_.gelu(s, input, output); });
}
void OpTracingDevice::gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                                    Tensor& grad_input) {
  traced(s, rows_key("gelu_backward", grad_output),
         [&] { inner_.gelu_backward(s, grad_output, input, grad_input); });
}
void OpTracingDevice::bias_gelu(Stream& s, const Tensor& input, const Tensor& bias,
                                Tensor& output) {
  traced(s, rows_key("bias_gelu", input), [&] { inner_.bias_gelu(s, input, bias, output); });
}
void OpTracingDevice::bias_gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                                         const Tensor& bias, Tensor& grad_input) {
  traced(s, rows_key("bias_gelu_backward", grad_output),
         [&] { inner_.bias_gelu_backward(s, grad_output, input, bias, grad_input); });
}
void OpTracingDevice::bias_dropout_add(Stream& s, const BiasDropoutAddArgs& a) {
  traced(s, rows_key("bias_dropout_add", a.input), [&] { inner_.bias_dropout_add(s, a); });
}
void OpTracingDevice::dropout(Stream& s, const Tensor& input, Tensor& output,
                              const HiddenDropout& d) {
  traced(s, rows_key("dropout", input), [&] { inner_.dropout(s, input, output, d); });
}
void OpTracingDevice::dropout_backward(Stream& s, const Tensor& grad_output, Tensor& grad_input,
                                       const HiddenDropout& d) {
  traced(s, rows_key("dropout_backward", grad_output),
         [&] { inner_.dropout_backward(s, grad_output, grad_input, d); });
}
void OpTracingDevice::rms_norm(Stream& s, const RmsNormArgs& a) {
  traced(s, rows_key("rms_norm", a.input), [&] { inner_.rms_norm(s, a); });
}
void OpTracingDevice::rms_norm_backward(Stream& s, const RmsNormBackwardArgs& a) {
  traced(s, rows_key("rms_norm_backward", a.input), [&] { inner_.rms_norm_backward(s, a); });
}
void OpTracingDevice::swiglu(Stream& s, const Tensor& input, Tensor& output) {
  // Keyed by the output width F (the input holds gate and up, 2F), as the simulator keys it.
  OpKey key = rows_key("swiglu", input);
  key.n /= 2;
  traced(s, key, [&] { inner_.swiglu(s, input, output); });
}
void OpTracingDevice::swiglu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                                      Tensor& grad_input) {
  OpKey key = rows_key("swiglu_backward", input);
  key.n /= 2;
  traced(s, key, [&] { inner_.swiglu_backward(s, grad_output, input, grad_input); });
}
void OpTracingDevice::rope(Stream& s, const RopeArgs& a) {
  // (T·B rows, rotated features per row, rotary_dim), as the simulator keys it.
  const Shape& x = a.x.shape;
  OpKey key = buffer_key("rope", a.x);
  if (x.rank() == 5)
    key = {"rope",       a.x.dtype, x[0] * x[1], x[2] * a.rotate_per_group * a.rotary_dim,
           a.rotary_dim, 1};
  traced(s, key, [&] { inner_.rope(s, a); });
}
void OpTracingDevice::flash_attention(Stream& s, const FlashAttentionArgs& a) {
  traced(s, flash_key("flash_attention", a.q_source, a.kv_source),
         [&] { inner_.flash_attention(s, a); });
}
void OpTracingDevice::flash_attention_backward(Stream& s, const FlashAttentionBackwardArgs& a) {
  traced(s, flash_key("flash_attention_backward", a.q_source, a.kv_source),
         [&] { inner_.flash_attention_backward(s, a); });
}
void OpTracingDevice::embedding(Stream& s, const EmbeddingArgs& a) {
  // Keyed by the output: the int32 tokens say nothing of the dtype the op moves.
  traced(s, rows_key("embedding", a.output), [&] { inner_.embedding(s, a); });
}
void OpTracingDevice::embedding_backward(Stream& s, const EmbeddingBackwardArgs& a) {
  traced(s, rows_key("embedding_backward", a.grad_output),
         [&] { inner_.embedding_backward(s, a); });
}
void OpTracingDevice::cross_entropy_max(Stream& s, const CrossEntropyArgs& a, Tensor& row_max) {
  traced(s, rows_key("cross_entropy_max", a.logits),
         [&] { inner_.cross_entropy_max(s, a, row_max); });
}
void OpTracingDevice::cross_entropy_sums(Stream& s, const CrossEntropyArgs& a,
                                         const Tensor& row_max, Tensor& sum_exp,
                                         Tensor& target_logit) {
  traced(s, rows_key("cross_entropy_sums", a.logits),
         [&] { inner_.cross_entropy_sums(s, a, row_max, sum_exp, target_logit); });
}
void OpTracingDevice::cross_entropy_loss(Stream& s, const Tensor& row_max, const Tensor& sum_exp,
                                         const Tensor& target_logit, Tensor& loss) {
  // The per-row loss is fp32 whatever the compute dtype (as the sim binding prices it).
  OpKey key = buffer_key("cross_entropy_loss", row_max);
  key.dtype = DType::fp32;
  traced(s, key, [&] { inner_.cross_entropy_loss(s, row_max, sum_exp, target_logit, loss); });
}
void OpTracingDevice::cross_entropy_backward(Stream& s, const CrossEntropyArgs& a,
                                             const Tensor& row_max, const Tensor& sum_exp,
                                             const Tensor& grad_loss, Tensor& grad_logits) {
  traced(s, rows_key("cross_entropy_backward", a.logits),
         [&] { inner_.cross_entropy_backward(s, a, row_max, sum_exp, grad_loss, grad_logits); });
}
void OpTracingDevice::add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) {
  traced(s, rows_key("add", a), [&] { inner_.add(s, a, b, out); });
}
void OpTracingDevice::scale(Stream& s, Tensor& x, float factor) {
  traced(s, buffer_key("scale", x), [&] { inner_.scale(s, x, factor); });
}
void OpTracingDevice::fill(Stream& s, Tensor& x, float value) {
  traced(s, buffer_key("fill", x), [&] { inner_.fill(s, x, value); });
}
void OpTracingDevice::copy(Stream& s, const Tensor& from, Tensor& to) {
  traced(s, buffer_key("copy", from), [&] { inner_.copy(s, from, to); });
}
void OpTracingDevice::copy_columns(Stream& s, const ColumnCopyArgs& a) {
  traced(s, buffer_key("copy_columns", a.from), [&] { inner_.copy_columns(s, a); });
}
void OpTracingDevice::moe_router(Stream& s, const MoeRouterArgs& a,
                                 std::span<std::int64_t> tokens_per_expert) {
  traced(s, buffer_key("moe_router", a.logits),
         [&] { inner_.moe_router(s, a, tokens_per_expert); });
}
void OpTracingDevice::moe_router_backward(Stream& s, const MoeRouterBackwardArgs& a) {
  traced(s, buffer_key("moe_router_backward", a.grad_logits),
         [&] { inner_.moe_router_backward(s, a); });
}
void OpTracingDevice::moe_drop_tokens(Stream& s, const MoeDropTokensArgs& a,
                                      std::span<std::int64_t> tokens_per_expert) {
  traced(s, buffer_key("moe_drop_tokens", a.dispatch_top),
         [&] { inner_.moe_drop_tokens(s, a, tokens_per_expert); });
}
void OpTracingDevice::moe_permute(Stream& s, const MoePermuteArgs& a) {
  traced(s, buffer_key("moe_permute", a.permuted), [&] { inner_.moe_permute(s, a); });
}
void OpTracingDevice::moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& a) {
  traced(s, buffer_key("moe_permute_backward", a.grad_permuted),
         [&] { inner_.moe_permute_backward(s, a); });
}
void OpTracingDevice::moe_unpermute(Stream& s, const MoeUnpermuteArgs& a) {
  traced(s, buffer_key("moe_unpermute", a.expert_output), [&] { inner_.moe_unpermute(s, a); });
}
void OpTracingDevice::moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& a) {
  traced(s, buffer_key("moe_unpermute_backward", a.expert_output),
         [&] { inner_.moe_unpermute_backward(s, a); });
}
void OpTracingDevice::copy_rows(Stream& s, const RowCopyArgs& a) {
  traced(s, buffer_key("copy_rows", a.from), [&] { inner_.copy_rows(s, a); });
}
// FP8: the GEMM keyed as gemm is, in the dtype of its output (the compute dtype); the
// quantize by the (rows, cols) it reads.
void OpTracingDevice::fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) {
  traced(s, {"fp8_quantize", a.input.dtype, a.output.rows, a.output.cols, 0, 1},
         [&] { inner_.fp8_quantize(s, a); });
}
void OpTracingDevice::fp8_gemm(Stream& s, const Fp8GemmArgs& a) {
  const std::int64_t m = a.transpose_a ? a.a.cols : a.a.rows;
  const std::int64_t k = a.transpose_a ? a.a.rows : a.a.cols;
  const std::int64_t n = a.transpose_b ? a.b.rows : a.b.cols;
  traced(s, {"fp8_gemm", a.c.dtype, m, n, k, 1}, [&] { inner_.fp8_gemm(s, a); });
}
void OpTracingDevice::fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) {
  traced(s, buffer_key("fp8_update_scale", a.amax_history), [&] { inner_.fp8_update_scale(s, a); });
}
void OpTracingDevice::fp8_amax(Stream& s, const Tensor& x, Tensor& amax) {
  traced(s, buffer_key("fp8_amax", x), [&] { inner_.fp8_amax(s, x, amax); });
}
void OpTracingDevice::fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) {
  traced(s, buffer_key("fp8_compute_scale", a.scale), [&] { inner_.fp8_compute_scale(s, a); });
}
void OpTracingDevice::check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale,
                                               Tensor& found) {
  traced(s, buffer_key("check_finite_and_unscale", x),
         [&] { inner_.check_finite_and_unscale(s, x, inv_scale, found); });
}
void OpTracingDevice::sum_squares(Stream& s, const Tensor& x, Tensor& out) {
  traced(s, buffer_key("sum_squares", x), [&] { inner_.sum_squares(s, x, out); });
}
void OpTracingDevice::adam(Stream& s, const AdamArgs& a) {
  OpKey key = buffer_key("adam", a.param);
  key.dtype = DType::fp32;
  traced(s, key, [&] { inner_.adam(s, a); });
}

}  // namespace tandem
