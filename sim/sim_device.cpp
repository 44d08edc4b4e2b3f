#include "sim/sim_device.hpp"

#include <algorithm>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <stdexcept>
#include <string>

#include "sim/op_cost_llama.hpp"

namespace tandem::sim {
namespace {

// Phantom storage: bytes without memory. Releasing it returns the bytes to the tracker,
// exactly as HostStorage does on the cpu binding.
class PhantomStorage : public Storage {
 public:
  PhantomStorage(Bytes bytes, MemoryUse use, std::shared_ptr<MemoryTracker> tracker)
      : bytes_(bytes), use_(use), tracker_(std::move(tracker)) {
    tracker_->on_allocate(bytes_, use_);
  }
  ~PhantomStorage() override { tracker_->on_release(bytes_, use_); }
  void* data() override { return nullptr; }
  Bytes bytes() const override { return bytes_; }

 private:
  Bytes bytes_;
  MemoryUse use_;
  std::shared_ptr<MemoryTracker> tracker_;
};

class SimEvent : public Event {
 public:
  explicit SimEvent(double* host_waited) : host_waited_(host_waited) {}
  void synchronize() override {
    sim_sleep_until(time_);
    *host_waited_ = std::max(*host_waited_, sim_now());
  }
  bool query() override { return time_ <= sim_now(); }
  double time_ = 0;

 private:
  double* host_waited_;
};

std::int64_t last_dim(const Tensor& t) {
  return t.shape.rank() == 0 ? 1 : t.shape[t.shape.rank() - 1];
}
std::int64_t rows_of(const Tensor& t) {
  const std::int64_t c = last_dim(t);
  return c == 0 ? 0 : t.numel() / c;
}

}  // namespace

double sim_now() {
  return simgrid::s4u::Engine::get_clock();
}

void sim_sleep_for(double seconds) {
  constexpr double kSimGridTimingPrecision = 1e-9;  // its precision/timing default
  if (seconds >= kSimGridTimingPrecision) simgrid::s4u::this_actor::sleep_for(seconds);
}

void sim_sleep_until(double t) {
  sim_sleep_for(t - sim_now());
}

void SimStream::record(Event& event) {
  dynamic_cast<SimEvent&>(event).time_ = ready_;
}

void SimStream::wait(Event& event) {
  wait_until(dynamic_cast<SimEvent&>(event).time_);
}

void SimStream::synchronize() {
  sim_sleep_until(ready_);
  if (host_waited_) *host_waited_ = std::max(*host_waited_, sim_now());
}

double SimStream::enqueue(double seconds) {
  const double free = std::max(ready_, sim_now());  // when the GPU could start it
  const double start = host_ ? std::max(free, *host_) : free;
  host_starved_ += start - free;
  ready_ = start + seconds;
  busy_ += seconds;
  return start;
}

double SimStream::enqueue_kernels(double seconds, double first_issued, double last_kernel) {
  const double free = std::max(ready_, sim_now());  // when the GPU could start it
  const double start = std::max(free, first_issued);
  const double last_issued = host_ ? *host_ : first_issued;
  const double end = std::max(start + seconds, last_issued + last_kernel);
  host_starved_ += end - seconds - free;
  ready_ = end;
  busy_ += seconds;
  return end - seconds;
}

void SimStream::wait_until(double time) {
  ready_ = std::max(ready_, time);
}

bool megatron_grad_copy_kernels(const TrainingConfig& t) {
  // Megatron's main_grad is 16-bit when it reduces in 16 bits: fp16 without
  // accumulate_allreduce_grads_in_fp32, or bf16 with grad_reduce_in_bf16.
  const bool half_grads =
      (t.fp16 && !t.accumulate_allreduce_grads_in_fp32) || (t.bf16 && t.grad_reduce_in_bf16);
  return half_grads && !t.deepspeed;
}

HostCosts host_costs(const GpuSpec& gpu, bool grad_copy_kernels) {
  return {.kernel_issue = gpu.host_kernel_issue.value,
          .collective_issue = gpu.host_collective_issue.value,
          .microbatch = gpu.host_microbatch.value,
          .iteration = gpu.host_iteration.value,
          .optimizer_tensor = gpu.host_optimizer_tensor.value +
                              (grad_copy_kernels ? gpu.host_kernel_issue.value : 0.0),
          .unfused_softmax = gpu.host_unfused_softmax.value,
          .layer_timestamp = gpu.host_layer_timestamp.value,
          // The preset's kernel launch: what a C++ host spends per kernel launched back to
          // back (measured so on H100 with tandem's own cuda binding).
          .library_launch = gpu.kernel_launch.value,
          .waits_for_collectives = gpu.host_waits_for_collectives};
}

SimDevice::SimDevice(Pricer price, SimDeviceOptions options)
    : price_(std::move(price)),
      options_(options),
      memory_(std::make_shared<MemoryTracker>()),
      default_stream_(std::make_unique<SimStream>("compute", &host_, &host_waited_)) {
  // The host starts out waiting now: a device made later in a run (the search's dry run
  // simulates one scenario after another in one engine) issues nothing earlier.
  if (simgrid::s4u::Engine::is_initialized()) host_waited_ = sim_now();
}

SimDevice::~SimDevice() = default;

MemoryLimitExceeded::MemoryLimitExceeded(std::int64_t would_be, std::int64_t limit)
    : std::runtime_error("an allocation would take the live bytes to " + std::to_string(would_be) +
                         ", over the limit of " + std::to_string(limit)),
      live_bytes(would_be) {}

Tensor SimDevice::allocate(const Shape& shape, DType dtype, MemoryUse use) {
  const Bytes bytes = dtype_size(dtype) * shape.numel();
  if (memory_->live().value > memory_limit_ - bytes.value)
    throw MemoryLimitExceeded(memory_->live().value + bytes.value, memory_limit_);
  return Tensor{shape, dtype, std::make_shared<PhantomStorage>(bytes, use, memory_), 0};
}

std::unique_ptr<Stream> SimDevice::create_stream(std::string name) {
  return std::make_unique<SimStream>(std::move(name), &host_, &host_waited_);
}

std::unique_ptr<Event> SimDevice::create_event() {
  return std::make_unique<SimEvent>(&host_waited_);
}

std::chrono::steady_clock::time_point SimDevice::trace_time(Stream& s) {
  // Work issued now starts when the stream drains or now, whichever is later: after the
  // host waited (a p2p receive, a collective) the stream stood idle until now.
  const double t = std::max(dynamic_cast<SimStream&>(s).ready(), sim_now());
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(t)));
}

double SimDevice::activation_bytes(std::int64_t elements) const {
  return static_cast<double>(elements) *
         static_cast<double>(dtype_size(options_.compute_dtype).value);
}

void SimDevice::host_waited() {
  host_waited_ = std::max(host_waited_, sim_now());
}

void SimDevice::host_layer_timestamp() {
  host_work(options_.host.layer_timestamp, "layer timestamp");
}

void SimDevice::host_work(double seconds, const std::string& what) {
  if (seconds <= 0) return;
  host_ = std::max(host_, host_waited_) + seconds;
  host_seconds_[what] += seconds;
}

// The names are hashed by their length and three of their characters, not byte by byte:
// the shape tells most ops apart, equality settles the rest, and a search looks up
// millions of ops.
std::size_t SimDevice::OpHash::operator()(const OpDesc& op) const {
  const auto name_bits = [](std::string_view s) -> std::size_t {
    if (s.empty()) return 0;
    return s.size() | static_cast<std::size_t>(static_cast<unsigned char>(s.front())) << 8 |
           static_cast<std::size_t>(static_cast<unsigned char>(s[s.size() / 2])) << 16 |
           static_cast<std::size_t>(static_cast<unsigned char>(s.back())) << 24;
  };
  std::size_t h = name_bits(op.op);
  for (const std::size_t v :
       {static_cast<std::size_t>(op.dtype), static_cast<std::size_t>(op.m),
        static_cast<std::size_t>(op.n), static_cast<std::size_t>(op.k),
        static_cast<std::size_t>(op.batch), std::hash<double>{}(op.flops),
        std::hash<double>{}(op.bytes), std::hash<float>{}(op.dropout), name_bits(op.library),
        std::hash<double>{}(op.visible_pairs), static_cast<std::size_t>(op.shared_wave_tail)})
    h = h * 1099511628211ULL ^ v;
  return h;
}

bool SimDevice::OpEqual::operator()(const OpDesc& a, const OpDesc& b) const {
  return a.m == b.m && a.n == b.n && a.k == b.k && a.batch == b.batch && a.dtype == b.dtype &&
         a.flops == b.flops && a.bytes == b.bytes && a.dropout == b.dropout && a.op == b.op &&
         a.library == b.library && a.visible_pairs == b.visible_pairs &&
         a.shared_wave_tail == b.shared_wave_tail;
}

const SimDevice::PricedOp& SimDevice::priced(const OpDesc& op) {
  auto it = priced_.find(op);
  if (it == priced_.end())
    it = priced_
             .emplace(op, PricedOp{.seconds = price_(op),
                                   .issue_seconds = issue_seconds(op),
                                   .kernels = std::max(kernels_of_op(op), 1),
                                   .report_total = &op_seconds_[op_report_key(op)],
                                   .sm_bound =
                                       op_class(op.op) == "gemm" || op_class(op.op) == "attention"})
             .first;
  return it->second;
}

double SimDevice::issue_seconds(const OpDesc& op) const {
  if (op_class(op.op) == "optimizer") return options_.host.optimizer_tensor;  // rule 5
  const double fallback = megatron_fused_softmax(op) ? 0 : options_.host.unfused_softmax;
  return options_.host.kernel_issue * kernels_of_op(op) + fallback;
}

void SimDevice::run(Stream& s, OpDesc op) {
  if (split_gemm_depth_ > 0 && (op.op == "gemm" || op.op == "fp8_gemm"))
    op.shared_wave_tail = true;  // a block of a split GEMM (cost-model rule 2g)
  const PricedOp& p = priced(op);
  const double issue = library_issue() ? options_.host.library_launch : p.issue_seconds;
  host_work(issue, "kernel issue");
  auto& stream = dynamic_cast<SimStream&>(s);
  const bool compute_stream = &stream == default_stream_.get();
  SmContention* contention = compute_stream ? options_.contention : nullptr;
  // The SMs collectives held from the GEMMs and attention before it: paid by the next such op.
  const double seconds = p.seconds + (contention && p.sm_bound ? contention->take_delay() : 0.0);
  const double starved_before = stream.host_starved();
  // An op of several kernels (attention: 5 to 14) does not wait for the host to issue all
  // of them: its first kernel runs once issued while the host issues the rest. Its issue
  // cost is spread evenly over its kernels, and so is its GPU time: the first was issued
  // when the host clock read its present value less the other kernels' share.
  const double start =
      p.kernels > 1 && issue > 0
          ? stream.enqueue_kernels(seconds, host_ - issue * (p.kernels - 1) / p.kernels,
                                   seconds / p.kernels)
          : stream.enqueue(seconds);
  if (contention && p.sm_bound) contention->compute_ran(start, start + seconds);
  if (observer_ && &stream == default_stream_.get())
    observer_(op, start, seconds, stream.host_starved() - starved_before);
  *p.report_total += seconds;
  if (const std::string& region = region_[static_cast<std::size_t>(turns_.current_task())];
      !region.empty() && &stream == default_stream_.get())
    region_seconds_[region] += seconds;
  if (options_.record_ops) issued_.push_back({std::move(op), seconds});
}

void SimDevice::upload(Stream& s, Tensor& t, const ProduceFloats&) {
  run(s, {.op = "upload",
          .dtype = t.dtype,
          .m = t.numel(),
          .bytes = static_cast<double>(t.bytes().value)});
}

void SimDevice::upload(Stream& s, Tensor& t, const ProduceInts&) {
  run(s, {.op = "upload",
          .dtype = t.dtype,
          .m = t.numel(),
          .bytes = static_cast<double>(t.bytes().value)});
}

void SimDevice::download(Stream& s, const Tensor& t, std::span<float> host) {
  if (static_cast<std::int64_t>(host.size()) != t.numel())
    throw std::invalid_argument("download: host buffer of " + std::to_string(host.size()) +
                                " floats for a tensor of " + std::to_string(t.numel()));
  run(s, {.op = "download",
          .dtype = t.dtype,
          .m = t.numel(),
          .bytes = static_cast<double>(t.bytes().value)});
  s.synchronize();
  std::fill(host.begin(), host.end(), 0.0f);
}

void SimDevice::gemm(Stream& s, const GemmArgs& a) {
  const auto [m, n, k] = check_gemm(a);
  // Accumulating (beta = 1) reads C as well; C is an fp32 buffer when it accumulates
  // weight gradients, so its bytes follow its own dtype size on the real device.
  const double c_bytes = static_cast<double>(m * n) * (a.beta != 0 ? 2.0 : 1.0) *
                         static_cast<double>(dtype_size(options_.compute_dtype).value);
  // Epilogues ride on the GEMM's kernel: the bias read once, the bias gradient (fp32) read
  // and written once; the additions and sums are on tiles already in registers.
  const double epilogue_bytes =
      (a.bias ? activation_bytes(n) : 0.0) + (a.bias_grad ? 8.0 * static_cast<double>(m) : 0.0);
  run(s, {.op = "gemm",
          .dtype = options_.compute_dtype,
          .m = m,
          .n = n,
          .k = k,
          .flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
          .bytes = activation_bytes(m * k + k * n) + c_bytes + epilogue_bytes});
}

void SimDevice::bias_add(Stream& s, Tensor& x, const Tensor&) {
  run(s, {.op = "bias_add",
          .dtype = options_.compute_dtype,
          .m = rows_of(x),
          .n = last_dim(x),
          .flops = static_cast<double>(x.numel()),
          .bytes = activation_bytes(2 * x.numel())});
}

void SimDevice::bias_grad(Stream& s, const Tensor& grad, Tensor&) {
  run(s, {.op = "bias_grad",
          .dtype = options_.compute_dtype,
          .m = rows_of(grad),
          .n = last_dim(grad),
          .flops = static_cast<double>(grad.numel()),
          .bytes = activation_bytes(grad.numel())});
}

void SimDevice::layer_norm(Stream& s, const LayerNormArgs& a) {
  run(s, {.op = "layer_norm",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.input),
          .n = last_dim(a.input),
          .flops = 8.0 * static_cast<double>(a.input.numel()),
          .bytes = activation_bytes(2 * a.input.numel())});
}

void SimDevice::layer_norm_backward(Stream& s, const LayerNormBackwardArgs& a) {
  run(s, {.op = "layer_norm_backward",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.input),
          .n = last_dim(a.input),
          .flops = 14.0 * static_cast<double>(a.input.numel()),
          .bytes = activation_bytes(3 * a.input.numel())});
}

namespace {
struct AttnDims {
  std::int64_t b, t, heads, head_dim;
};
AttnDims attn_dims(const Tensor& qkv) {
  if (qkv.shape.rank() != 5 || qkv.shape[2] != 3)
    throw std::invalid_argument("attention: qkv must be (T, B, 3, heads, head_dim), got " +
                                qkv.shape.to_string());
  return {qkv.shape[1], qkv.shape[0], qkv.shape[3], qkv.shape[4]};
}
}  // namespace

// Unfused attention as Megatron's core attention runs it: Q·Kᵀ and P·V as batched GEMMs
// over (B · heads), the softmax between them reading and writing the (T, T) scores.
void SimDevice::attention(Stream& s, const AttentionArgs& a) {
  const auto d = attn_dims(a.qkv);
  const double scores = static_cast<double>(d.b * d.heads * d.t * d.t);
  run(s, {.op = "attention",
          .dtype = options_.compute_dtype,
          .m = d.t,
          .n = d.t,
          .k = d.head_dim,
          .batch = d.b * d.heads,
          .flops = 4.0 * scores * static_cast<double>(d.head_dim),
          .bytes = activation_bytes(a.qkv.numel() + a.output.numel()) +
                   scores * 4.0 * static_cast<double>(dtype_size(options_.compute_dtype).value),
          .dropout = a.dropout.p});
}

void SimDevice::attention_backward(Stream& s, const AttentionBackwardArgs& a) {
  const auto d = attn_dims(a.qkv);
  const double scores = static_cast<double>(d.b * d.heads * d.t * d.t);
  run(s, {.op = "attention_backward",
          .dtype = options_.compute_dtype,
          .m = d.t,
          .n = d.t,
          .k = d.head_dim,
          .batch = d.b * d.heads,
          .flops = 8.0 * scores * static_cast<double>(d.head_dim),
          .bytes = activation_bytes(2 * a.qkv.numel() + a.grad_output.numel()) +
                   scores * 4.0 * static_cast<double>(dtype_size(options_.compute_dtype).value),
          .dropout = a.dropout.p});
}

// Llama-style ops: OpDescs from sim/op_cost_llama.hpp.
void SimDevice::rms_norm(Stream& s, const RmsNormArgs& a) {
  run(s, rms_norm_desc(options_.compute_dtype, a));
}
void SimDevice::rms_norm_backward(Stream& s, const RmsNormBackwardArgs& a) {
  run(s, rms_norm_backward_desc(options_.compute_dtype, a));
}
void SimDevice::swiglu(Stream& s, const Tensor& input, Tensor&) {
  run(s, swiglu_desc(options_.compute_dtype, input, false));
}
void SimDevice::swiglu_backward(Stream& s, const Tensor&, const Tensor& input, Tensor&) {
  run(s, swiglu_desc(options_.compute_dtype, input, true));
}
void SimDevice::rope(Stream& s, const RopeArgs& a) {
  run(s, rope_desc(options_.compute_dtype, a));
}
void SimDevice::flash_attention(Stream& s, const FlashAttentionArgs& a) {
  OpDesc op = flash_attention_desc(options_.compute_dtype, a);
  op.library = options_.fused_attention_library;
  run(s, op);
}
void SimDevice::flash_attention_backward(Stream& s, const FlashAttentionBackwardArgs& a) {
  OpDesc op = flash_attention_backward_desc(options_.compute_dtype, a);
  op.library = options_.fused_attention_library;
  run(s, op);
}

void SimDevice::gelu(Stream& s, const Tensor& input, Tensor&) {
  run(s, {.op = "gelu",
          .dtype = options_.compute_dtype,
          .m = rows_of(input),
          .n = last_dim(input),
          .flops = 8.0 * static_cast<double>(input.numel()),
          .bytes = activation_bytes(2 * input.numel())});
}

void SimDevice::gelu_backward(Stream& s, const Tensor& grad_output, const Tensor&, Tensor&) {
  run(s, {.op = "gelu_backward",
          .dtype = options_.compute_dtype,
          .m = rows_of(grad_output),
          .n = last_dim(grad_output),
          .flops = 12.0 * static_cast<double>(grad_output.numel()),
          .bytes = activation_bytes(3 * grad_output.numel())});
}

// The fused kernels read and write each element once: the input (and the residual) in, the
// output out; the bias (C elements) stays in cache.
void SimDevice::bias_gelu(Stream& s, const Tensor& input, const Tensor&, Tensor&) {
  run(s, {.op = "bias_gelu",
          .dtype = options_.compute_dtype,
          .m = rows_of(input),
          .n = last_dim(input),
          .flops = 9.0 * static_cast<double>(input.numel()),
          .bytes = activation_bytes(2 * input.numel())});
}

void SimDevice::bias_gelu_backward(Stream& s, const Tensor& grad_output, const Tensor&,
                                   const Tensor&, Tensor&) {
  run(s, {.op = "bias_gelu_backward",
          .dtype = options_.compute_dtype,
          .m = rows_of(grad_output),
          .n = last_dim(grad_output),
          .flops = 13.0 * static_cast<double>(grad_output.numel()),
          .bytes = activation_bytes(3 * grad_output.numel())});
}

// Megatron's hidden dropout kernels store a bool mask (torch's dropout, and the jit-fused
// bias-dropout-add): 1 byte an element more, written forward and read backward.
void SimDevice::bias_dropout_add(Stream& s, const BiasDropoutAddArgs& a) {
  const double n = static_cast<double>(a.input.numel());
  run(s, {.op = "bias_dropout_add",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.input),
          .n = last_dim(a.input),
          .flops = 3.0 * n,
          .bytes = activation_bytes(3 * a.input.numel()) + (a.dropout.p > 0 ? n : 0.0)});
}

void SimDevice::dropout(Stream& s, const Tensor& input, Tensor&, const HiddenDropout&) {
  run(s, {.op = "dropout",
          .dtype = options_.compute_dtype,
          .m = rows_of(input),
          .n = last_dim(input),
          .flops = static_cast<double>(input.numel()),
          .bytes = activation_bytes(2 * input.numel()) + static_cast<double>(input.numel())});
}

void SimDevice::dropout_backward(Stream& s, const Tensor& grad_output, Tensor&,
                                 const HiddenDropout&) {
  run(s, {.op = "dropout_backward",
          .dtype = options_.compute_dtype,
          .m = rows_of(grad_output),
          .n = last_dim(grad_output),
          .flops = static_cast<double>(grad_output.numel()),
          .bytes = activation_bytes(2 * grad_output.numel()) +
                   static_cast<double>(grad_output.numel())});
}

void SimDevice::embedding(Stream& s, const EmbeddingArgs& a) {
  run(s, {.op = "embedding",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.output),
          .n = last_dim(a.output),
          .bytes = activation_bytes(2 * a.output.numel())});
}

void SimDevice::embedding_backward(Stream& s, const EmbeddingBackwardArgs& a) {
  run(s, {.op = "embedding_backward",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.grad_output),
          .n = last_dim(a.grad_output),
          .flops = static_cast<double>(a.grad_output.numel()),
          .bytes = activation_bytes(a.grad_output.numel()) +
                   8.0 * static_cast<double>(a.grad_output.numel())});
}

// Bytes each cross_entropy_* op moves per logit, by the kernels that compute the loss
// (CrossEntropyKernels) and whether the logits are 16-bit (else fp32: no conversions).
// Megatron's VocabParallelCrossEntropy computes the loss of 16-bit logits in fp32
// (fp16_lm_cross_entropy off, its default): logits.float(), then in-place fp32 passes —
// max = .float() 2 + 4, max 4, subtract 8; sums = exp 8, sum 4, divide 8; backward =
// multiply by the loss gradient 8, back to 16 bits 4 + 2. Megatron-Core's fused loss
// (fused_cross_entropy.py; its jit_fuser is torch.compile from PyTorch 2.2, each function
// one fused kernel): max = the fp32 copy written with its row max, 2 + 4; sums =
// exp(logit − max) written over it with its sum and the target logit, 4 + 4, then the
// division into the softmax, 4 + 4; backward = softmax − one-hot times the loss gradient,
// the in-place result written back (a mutated input of the compiled function) and as bf16,
// 4 + 4 + 2. Transformer Engine's (parallel cross
// entropy, Triton): max = the online-softmax pass, a read, 2; sums = the loss pass that
// writes the gradient over the logits, 2 + 2; backward = that gradient scaled, 2 + 2.
CrossEntropyBytes cross_entropy_bytes_per_logit(CrossEntropyKernels k, bool half) {
  switch (k) {
    case CrossEntropyKernels::megatron_fused:
      return half ? CrossEntropyBytes{6, 16, 10} : CrossEntropyBytes{4, 16, 10};
    case CrossEntropyKernels::transformer_engine:
      return half ? CrossEntropyBytes{2, 4, 4} : CrossEntropyBytes{4, 8, 8};
    case CrossEntropyKernels::megatron:
      break;
  }
  return half ? CrossEntropyBytes{18, 20, 14} : CrossEntropyBytes{12, 20, 8};
}

double SimDevice::cross_entropy_bytes(const Tensor& logits, double CrossEntropyBytes::*pass) const {
  const bool half = dtype_size(options_.compute_dtype).value == 2;
  return static_cast<double>(logits.numel()) *
         (cross_entropy_bytes_per_logit(options_.cross_entropy, half).*pass);
}

void SimDevice::cross_entropy_max(Stream& s, const CrossEntropyArgs& a, Tensor&) {
  run(s, {.op = "cross_entropy_max",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.logits),
          .n = last_dim(a.logits),
          .flops = static_cast<double>(a.logits.numel()),
          .bytes = cross_entropy_bytes(a.logits, &CrossEntropyBytes::max)});
}

void SimDevice::cross_entropy_sums(Stream& s, const CrossEntropyArgs& a, const Tensor&, Tensor&,
                                   Tensor&) {
  run(s, {.op = "cross_entropy_sums",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.logits),
          .n = last_dim(a.logits),
          .flops = 4.0 * static_cast<double>(a.logits.numel()),
          .bytes = cross_entropy_bytes(a.logits, &CrossEntropyBytes::sums)});
}

void SimDevice::cross_entropy_loss(Stream& s, const Tensor& row_max, const Tensor&, const Tensor&,
                                   Tensor&) {
  run(s, {.op = "cross_entropy_loss",
          .dtype = DType::fp32,
          .m = row_max.numel(),
          .flops = 4.0 * static_cast<double>(row_max.numel()),
          .bytes = 16.0 * static_cast<double>(row_max.numel())});
}

void SimDevice::cross_entropy_backward(Stream& s, const CrossEntropyArgs& a, const Tensor&,
                                       const Tensor&, const Tensor&, Tensor&) {
  run(s, {.op = "cross_entropy_backward",
          .dtype = options_.compute_dtype,
          .m = rows_of(a.logits),
          .n = last_dim(a.logits),
          .flops = 4.0 * static_cast<double>(a.logits.numel()),
          .bytes = cross_entropy_bytes(a.logits, &CrossEntropyBytes::backward)});
}

void SimDevice::add(Stream& s, const Tensor& a, const Tensor&, Tensor&) {
  run(s, {.op = "add",
          .dtype = options_.compute_dtype,
          .m = rows_of(a),
          .n = last_dim(a),
          .flops = static_cast<double>(a.numel()),
          .bytes = activation_bytes(3 * a.numel())});
}

// scale, fill, copy, sum_squares and adam touch fp32 buffers (gradients, main
// parameters, optimizer state) as often as activations; they are priced at the tensor's
// own dtype.
void SimDevice::scale(Stream& s, Tensor& x, float) {
  run(s, {.op = "scale",
          .dtype = x.dtype,
          .m = x.numel(),
          .flops = static_cast<double>(x.numel()),
          .bytes = 2.0 * static_cast<double>(x.bytes().value)});
}

void SimDevice::fill(Stream& s, Tensor& x, float) {
  run(s, {.op = "fill",
          .dtype = x.dtype,
          .m = x.numel(),
          .bytes = static_cast<double>(x.bytes().value)});
}

void SimDevice::copy(Stream& s, const Tensor& from, Tensor&) {
  run(s, {.op = "copy",
          .dtype = from.dtype,
          .m = from.numel(),
          .bytes = 2.0 * static_cast<double>(from.bytes().value)});
}

void SimDevice::copy_columns(Stream& s, const ColumnCopyArgs& a) {
  const std::int64_t rows = a.from.shape.rank() > 0 ? a.from.shape[0] : 0;
  const double element = static_cast<double>(dtype_size(a.from.dtype).value);
  // Every block is read; the destination is written once per block, or once when the
  // blocks are summed into the same columns (to_stride 0), and read too when accumulating.
  const std::int64_t blocks = std::max<std::int64_t>(1, a.count);
  const std::int64_t written = a.to_stride == 0 ? 1 : blocks;
  const double read = static_cast<double>(rows * a.width * blocks) * element;
  const double write = static_cast<double>(rows * a.width * written) * element;
  run(s, {.op = "copy_columns",
          .dtype = a.from.dtype,
          .m = rows,
          .n = a.width * blocks,
          .bytes = read + (a.accumulate ? 2.0 : 1.0) * write});
}

// The MoE ops move rows (memory-bound); the router's counts are the routing model's.
void SimDevice::moe_router(Stream& s, const MoeRouterArgs& a,
                           std::span<std::int64_t> tokens_per_expert) {
  const std::int64_t T = a.probs.shape[0], E = a.probs.shape[1], k = a.top.shape[1];
  if (static_cast<std::int64_t>(tokens_per_expert.size()) != E)
    throw std::invalid_argument("moe_router: tokens_per_expert holds " +
                                std::to_string(tokens_per_expert.size()) + " counts for " +
                                std::to_string(E) + " experts");
  run(s, {.op = "moe_router",
          .dtype = a.logits.dtype,
          .m = T,
          .n = E,
          .k = k,
          .flops = 4.0 * static_cast<double>(T * E),
          .bytes = static_cast<double>(a.logits.bytes().value + a.probs.bytes().value +
                                       a.top.bytes().value + a.gates.bytes().value)});
  // The counts come to the host: the host waits for the router, as Megatron's .cpu() of
  // them makes it (the copy of E integers itself is left out, as the real devices' op
  // sequence has it inside the router).
  s.synchronize();
  const auto counts = routed_counts(options_.routing, T, E, k);
  std::copy(counts.begin(), counts.end(), tokens_per_expert.begin());
  // The aux loss's plain top-k: the routing model has no bias or groups to tell apart.
  if (!a.aux_tokens_per_expert.empty())
    std::copy(counts.begin(), counts.end(), a.aux_tokens_per_expert.begin());
}

// Token dropping reads the routing and writes the dispatch tables (memory-bound); the
// counts are the routing model's, capped at the capacity (or, padded, exactly it).
void SimDevice::moe_drop_tokens(Stream& s, const MoeDropTokensArgs& a,
                                std::span<std::int64_t> tokens_per_expert) {
  const std::int64_t T = a.top.shape[0], k = a.top.shape[1];
  const auto E = static_cast<std::int64_t>(tokens_per_expert.size());
  run(s, {.op = "moe_drop_tokens",
          .dtype = DType::fp32,
          .m = T,
          .n = E,
          .k = k,
          .bytes =
              static_cast<double>(a.top.bytes().value + a.gates.bytes().value +
                                  a.dispatch_top.bytes().value + a.dispatch_gates.bytes().value)});
  s.synchronize();
  const std::int64_t keep = std::min(a.capacity, T);
  const auto routed = routed_counts(options_.routing, T, E, k);
  for (std::size_t e = 0; e < routed.size(); ++e)
    tokens_per_expert[e] = a.pad_to_capacity ? keep : std::min(routed[e], keep);
}

void SimDevice::moe_router_backward(Stream& s, const MoeRouterBackwardArgs& a) {
  run(s, {.op = "moe_router_backward",
          .dtype = a.grad_logits.dtype,
          .m = a.probs.shape[0],
          .n = a.probs.shape[1],
          .k = a.top.shape[1],
          .flops = 4.0 * static_cast<double>(a.probs.numel()),
          .bytes = static_cast<double>(a.probs.bytes().value + a.grad_logits.bytes().value +
                                       2 * a.gates.bytes().value + a.top.bytes().value)});
}

void SimDevice::moe_permute(Stream& s, const MoePermuteArgs& a) {
  run(s, {.op = "moe_permute",
          .dtype = a.permuted.dtype,
          .m = a.permuted.shape[0],
          .n = a.permuted.shape[1],
          .bytes = 2.0 * static_cast<double>(a.permuted.bytes().value) +
                   static_cast<double>(a.row_of_copy.bytes().value * 2)});
}

void SimDevice::moe_permute_backward(Stream& s, const MoePermuteBackwardArgs& a) {
  run(s,
      {.op = "moe_permute_backward",
       .dtype = a.grad_permuted.dtype,
       .m = a.grad_permuted.shape[0],
       .n = a.grad_permuted.shape[1],
       .bytes = static_cast<double>(a.grad_permuted.bytes().value + a.grad_input.bytes().value)});
}

void SimDevice::moe_unpermute(Stream& s, const MoeUnpermuteArgs& a) {
  run(s, {.op = "moe_unpermute",
          .dtype = a.expert_output.dtype,
          .m = a.expert_output.shape[0],
          .n = a.expert_output.shape[1],
          .flops = 2.0 * static_cast<double>(a.expert_output.numel()),
          .bytes = static_cast<double>(a.expert_output.bytes().value + a.output.bytes().value)});
}

void SimDevice::moe_unpermute_backward(Stream& s, const MoeUnpermuteBackwardArgs& a) {
  run(s, {.op = "moe_unpermute_backward",
          .dtype = a.expert_output.dtype,
          .m = a.expert_output.shape[0],
          .n = a.expert_output.shape[1],
          .flops = 4.0 * static_cast<double>(a.expert_output.numel()),
          .bytes = 2.0 * static_cast<double>(a.expert_output.bytes().value) +
                   static_cast<double>(a.grad_output.bytes().value)});
}

void SimDevice::copy_rows(Stream& s, const RowCopyArgs& a) {
  std::int64_t rows = 0;
  for (const RowBlock& b : a.blocks) rows += b.rows;
  const std::int64_t width = a.from.shape.rank() == 2 ? a.from.shape[1] : 0;
  run(s, {.op = "copy_rows",
          .dtype = a.from.dtype,
          .m = rows,
          .n = width,
          .bytes = 2.0 * static_cast<double>(rows * width) *
                   static_cast<double>(dtype_size(a.from.dtype).value)});
}

void SimDevice::sum_squares(Stream& s, const Tensor& x, Tensor&) {
  run(s, {.op = "sum_squares",
          .dtype = x.dtype,
          .m = x.numel(),
          .flops = 2.0 * static_cast<double>(x.numel()),
          .bytes = static_cast<double>(x.bytes().value)});
}

// Reads and writes the fp32 gradients once (nothing where the optimizer does it:
// SimDeviceOptions::loss_scale_check_in_optimizer).
void SimDevice::check_finite_and_unscale(Stream& s, Tensor& x, float, Tensor&) {
  if (options_.loss_scale_check_in_optimizer) return;
  run(s, {.op = "check_finite_and_unscale",
          .dtype = x.dtype,
          .m = x.numel(),
          .flops = 2.0 * static_cast<double>(x.numel()),
          .bytes = 2.0 * static_cast<double>(x.bytes().value)});
}

void SimDevice::adam(Stream& s, const AdamArgs& a) {
  // Reads param, grad, both moments; writes param and moments (fp32 each).
  const double n = static_cast<double>(a.param.numel());
  run(s, {.op = "adam",
          .dtype = DType::fp32,
          .m = a.param.numel(),
          .flops = 12.0 * n,
          .bytes = 28.0 * n});
}

}  // namespace tandem::sim
