// The sim binding's Device: phantom tensors (shape, dtype and bytes, no storage) counted
// by the same MemoryTracker as the real allocators, and ops that cost simulated time
// instead of running. Each op is priced by the cost model from its shapes and advances
// its stream's clock; the host (a SimGrid actor) only waits where a real host would:
// on download, Event::synchronize, Stream::synchronize and Work::wait. Compute ops are
// therefore not SimGrid activities at all — a stream is a number, the time at which the
// work issued on it so far completes — which keeps a 175B iteration to a few seconds.
//
// The issuing host has a clock too (HostCosts): a real framework issues every kernel and
// collective from one host thread, each costing host time, so a kernel starts no earlier
// than the host finished issuing it. When kernels are shorter than their issue the stream
// starves; that idle time is booked as host-bound. The host clock runs ahead of the
// actor's simulated time lazily (no SimGrid activity per op): every later start, event
// and synchronize of the device's streams honours it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.hpp"
#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/moe_routing.hpp"
#include "sim/sim_host_turns.hpp"
#include "sim/sm_contention.hpp"

namespace tandem::sim {

// What the issuing host spends (seconds), from the GPU preset (GpuSpec host_*).
struct HostCosts {
  double kernel_issue = 0;      // per kernel of a Device op (kernels_of_op in cost_model)
  double collective_issue = 0;  // per collective or p2p group
  double microbatch = 0;        // fixed per microbatch (charged after its forward pass)
  double iteration = 0;         // fixed per iteration (charged when the step begins)
  double optimizer_tensor = 0;  // per optimizer op (a tensor in a multi-tensor kernel)
  double unfused_softmax = 0;   // per attention op with the unfused softmax, beyond kernels
  double layer_timestamp = 0;   // per layer pass under a per-layer profiler
  // Per kernel or p2p group a library issues from its own C++ inside one framework call
  // (SimDevice::begin_library_call), after the call's first.
  double library_launch = 0;
  bool waits_for_collectives = false;  // the host sits through every collective's wait
};
// `grad_copy_kernels`: the optimizer step issues one kernel per parameter tensor besides
// its multi-tensor kernels. Megatron-LM's Float16Optimizer does with 16-bit gradients
// (main_param.grad = model_param.main_grad.float(), a Python loop over the parameters);
// DeepSpeed's fp16 optimizer, on flattened parameters, does not.
HostCosts host_costs(const GpuSpec& gpu, bool grad_copy_kernels = false);
// Whether `t` copies 16-bit gradients per parameter (host_costs' grad_copy_kernels).
bool megatron_grad_copy_kernels(const TrainingConfig& t);

// A stream of the sim device: the simulated time (seconds) at which its issued work ends.
class SimStream : public Stream {
 public:
  // `host` is the issuing host's clock (the device's); null for a host that issues at once.
  // `host_waited` is where synchronize() records that the host itself waited.
  explicit SimStream(std::string name, const double* host = nullptr, double* host_waited = nullptr)
      : name_(std::move(name)), host_(host), host_waited_(host_waited) {}
  std::string_view name() const override { return name_; }
  void record(Event& event) override;
  void wait(Event& event) override;
  void synchronize() override;  // the host actor sleeps until ready(), and the host waited

  // The earliest start of work issued now: after the stream's issued work and after the
  // host finished issuing everything so far.
  double ready() const { return host_ ? std::max(ready_, *host_) : ready_; }
  // Runs an op of `seconds` after everything issued before it and after the host issued
  // it (now, or the host clock when that is later); returns the op's start.
  double enqueue(double seconds);
  // Runs an op whose kernels the host issues one after another, the GPU running each as
  // soon as it is issued: its first kernel starts after the stream's work and after the
  // host issued it (`first_issued`), and the op ends no earlier than its last kernel, issued
  // when the host clock reads now, has run (`last_kernel` seconds). So a pass of such ops
  // takes about max(host issue, GPU time), not their sum. The stall between its kernels
  // (the op ending later than its start plus `seconds`) is host-bound time, booked before
  // the op: returns end − `seconds`, where the op would start had it run without stalls.
  double enqueue_kernels(double seconds, double first_issued, double last_kernel);
  // Later work on this stream starts no earlier than `time`.
  void wait_until(double time);
  double busy() const { return busy_; }  // seconds of ops run so far
  // Seconds the stream stood idle, with nothing else to wait for, because the host had
  // not yet issued its next op (host-bound time).
  double host_starved() const { return host_starved_; }

 private:
  std::string name_;
  const double* host_ = nullptr;
  double* host_waited_ = nullptr;
  double ready_ = 0;
  double busy_ = 0;
  double host_starved_ = 0;
};

// What one priced op was, for tests and for `tandem calibrate`: the op sequence a rank
// issued, in order.
struct IssuedOp {
  OpDesc op;
  double seconds = 0;
};

// Thrown by SimDevice::allocate when an allocation would take the live bytes above the
// limit set with set_memory_limit (the search's dry run stops a step that cannot fit).
struct MemoryLimitExceeded : std::runtime_error {
  MemoryLimitExceeded(std::int64_t would_be, std::int64_t limit);
  std::int64_t live_bytes;  // what the allocation would have made live: > limit
};

// The kernels of the vocab-parallel cross entropy: Megatron's VocabParallelCrossEntropy
// (PyTorch passes), Megatron-Core's fused_vocab_parallel_cross_entropy (jit-fused), or
// Transformer Engine's parallel cross entropy (two Triton kernels forward, one backward).
enum class CrossEntropyKernels { megatron, megatron_fused, transformer_engine };
// Bytes moved per logit by cross_entropy_max, _sums and _backward (sim_device.cpp says
// which passes), with 16-bit logits (`half`) or fp32 ones.
struct CrossEntropyBytes {
  double max, sums, backward;
};
CrossEntropyBytes cross_entropy_bytes_per_logit(CrossEntropyKernels k, bool half);

struct SimDeviceOptions {
  DType compute_dtype = DType::fp32;  // precision the ops are priced in (bf16 on GPUs)
  bool record_ops = false;            // keep every IssuedOp (tests, calibrate)
  HostCosts host;                     // the issuing host; all zero: issue is free
  MoeRouting routing;                 // where the router sends tokens (sim/moe_routing.hpp)
  // FP8 quantization also writes a transposed copy (TE's cast_transpose): GPUs before
  // Blackwell, whose FP8 GEMMs take only the "TN" layout.
  bool fp8_transposed_copy = true;
  // OpDesc::library of the fused attention ops: "flash_attn" or "" (cuDNN's); the run's
  // choice (core/scenario.hpp fused_attention_library). A literal, since the OpDescs that
  // name it (SimDevice::issued_ops) may outlive the device.
  std::string_view fused_attention_library;
  // Megatron-DeepSpeed's runs (training.deepspeed): DeepSpeed's fused fp16 optimizer reads an
  // overflow off the gradient norm and unscales inside its Adam kernel, so the loss-scale
  // check of Megatron's optimizer (check_finite_and_unscale) costs no kernel of its own.
  bool loss_scale_check_in_optimizer = false;
  // Which kernels compute the vocab-parallel loss (training.cross_entropy_loss_fusion and
  // cross_entropy_fusion_impl): the traffic per logit of each cross_entropy_* op.
  CrossEntropyKernels cross_entropy = CrossEntropyKernels::megatron;
  // The SMs this rank's collectives hold (sim/sm_contention.hpp): the compute stream's GEMMs
  // and attention are recorded there and its ops pay what they owe. Null: collectives are free.
  SmContention* contention = nullptr;
};

class SimDevice : public Device {
 public:
  // Seconds of one op; a function of the op alone (it is asked once per distinct op).
  using Pricer = std::function<double(const OpDesc&)>;
  SimDevice(Pricer price, SimDeviceOptions options = {});
  ~SimDevice() override;

  std::string_view kind() const override { return "sim"; }
  // The two tasks of a combined 1F1B step as actors of this rank's host.
  HostTurns& host_turns() override { return turns_; }
  using Device::allocate;
  Tensor allocate(const Shape& shape, DType dtype, MemoryUse use) override;
  const MemoryTracker& memory() const override { return *memory_; }
  // From now on an allocation that would take the live bytes above `bytes` throws
  // MemoryLimitExceeded instead (nothing is allocated).
  void set_memory_limit(std::int64_t bytes) { memory_limit_ = bytes; }
  Stream& default_stream() override { return *default_stream_; }
  std::unique_ptr<Stream> create_stream(std::string name) override;
  std::unique_ptr<Event> create_event() override;
  // A per-layer profiler takes a timestamp (vTrain's cuptiActivityFlushAll(0), which
  // flushes the host's activity buffers and does not synchronize the device): the preset's
  // host_layer_timestamp on the host issue clock (sim/profiler_effects.hpp calls it).
  void host_layer_timestamp();
  std::chrono::steady_clock::time_point trace_time(Stream& s) override;

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
  // FP8 (sim_device_fp8.cpp): GEMMs priced as "fp8_gemm" at the GPU's FP8 rate,
  // quantization and the scale update as memory-bound ops.
  void fp8_quantize(Stream& s, const Fp8QuantizeArgs& a) override;
  void fp8_gemm(Stream& s, const Fp8GemmArgs& a) override;
  void fp8_update_scale(Stream& s, const Fp8ScaleUpdateArgs& a) override;
  void fp8_amax(Stream& s, const Tensor& x, Tensor& amax) override;
  void check_finite_and_unscale(Stream& s, Tensor& x, float inv_scale, Tensor& found) override;
  void fp8_compute_scale(Stream& s, const Fp8ComputeScaleArgs& a) override;
  void sum_squares(Stream& s, const Tensor& x, Tensor& out) override;
  void adam(Stream& s, const AdamArgs& a) override;

  // The host spends `seconds` issuing something other than a Device op (a collective, a
  // microbatch's or an iteration's fixed framework work): later work starts after it.
  // `what` names the kind of host work in host_seconds(): "collective issue",
  // "microbatch", "iteration" (Device ops book "kernel issue" themselves).
  void host_work(double seconds, const std::string& what);
  const HostCosts& host() const { return options_.host; }
  double host_clock() const { return host_; }
  // Where the host is now: done issuing what it was given and done with its last wait
  // (host_clock() alone lags after a wait: the next issue starts at the wait's end).
  double host_now() const { return std::max(host_, host_waited_); }
  // The host itself waited until now (a synchronize, Megatron's batch_p2p_sync after a
  // pipeline exchange, integers copied to the host): it issues nothing earlier. Waiting on
  // a collective's Work does not count: NCCL work orders the stream, not the host, so the
  // host runs ahead across tensor- and data-parallel collectives as PyTorch's does.
  void host_waited();
  // Ops one library call issues from its own C++ (Transformer Engine's userbuffers overlap,
  // model/tp_comm_overlap.hpp): between begin and end the first costs the host a framework
  // op's issue and every later kernel or p2p group host().library_launch, and the host
  // waits for none of the p2p (the library orders them on streams). Calls nest (a
  // Transformer Engine module's call holds its userbuffers GEMM's): the outermost one counts.
  void begin_library_call() {
    if (library_call_depth_++ == 0) library_call_ops_ = 0;
  }
  void end_library_call() {
    if (library_call_depth_ > 0 && --library_call_depth_ == 0) library_call_ops_ = -1;
  }
  bool in_library_call() const { return library_call_ops_ >= 0; }
  // Around the blocks of one split GEMM (StepObserver::begin_split_gemm): each GEMM issued
  // between them is priced with its last wave shared with the next block's first (cost-model
  // rule 2g). Nest as library calls do.
  void begin_split_gemm() { ++split_gemm_depth_; }
  void end_split_gemm() {
    if (split_gemm_depth_ > 0) --split_gemm_depth_;
  }
  // A named part of the step (StepObserver::begin_region): the compute stream's op seconds
  // between begin and end are also booked under the name (region_seconds).
  // Kept per host task: inside a combined 1F1B step the two microbatches' regions differ.
  void begin_region(std::string name) {
    region_[static_cast<std::size_t>(turns_.current_task())] = std::move(name);
  }
  void end_region() { region_[static_cast<std::size_t>(turns_.current_task())].clear(); }
  // Seconds of compute-stream ops per region, all iterations.
  const std::map<std::string, double>& region_seconds() const { return region_seconds_; }
  // The host's issue of a kernel or p2p group inside a library call, after its first op:
  // true when it costs host().library_launch instead of a framework op's issue.
  bool library_issue() { return library_call_ops_ >= 0 && library_call_ops_++ > 0; }
  // Seconds the compute stream starved for the host (see SimStream::host_starved).
  double host_bound() const { return default_stream_->host_starved(); }
  // Seconds the host spent per kind of work, all iterations.
  const std::map<std::string, double>& host_seconds() const { return host_seconds_; }

  // Told every op run on the compute stream: the op, its start (s), its duration (s) and
  // the seconds the stream starved for the host just before it (the predicted trace's
  // op-class and host-bound slices).
  using OpObserver =
      std::function<void(const OpDesc& op, double start, double seconds, double starved)>;
  void set_op_observer(OpObserver observer) { observer_ = std::move(observer); }

  const std::vector<IssuedOp>& issued_ops() const { return issued_; }
  // Seconds per op over everything issued (all streams), keyed by op_report_key (the op
  // name; attention ops with Megatron's unfused softmax apart).
  const std::map<std::string, double>& op_seconds() const { return op_seconds_; }
  // Seconds of ops run on the default stream (the compute stream).
  double compute_busy() const { return default_stream_->busy(); }

 private:
  void run(Stream& s, OpDesc op);
  // Bytes of `elements` values in the compute precision.
  double activation_bytes(std::int64_t elements) const;
  // Bytes a cross-entropy op moves over `logits`, per logit for 16-bit or fp32 compute.
  double cross_entropy_bytes(const Tensor& logits, double CrossEntropyBytes::*pass) const;

  // What run() derives from an op alone, once per distinct op: a step issues the same few
  // hundred shapes thousands of times, and pricing, counting kernels and naming the report
  // key took a third of a dry run.
  struct PricedOp {
    double seconds = 0;
    double issue_seconds = 0;        // the host's kernel issue cost
    int kernels = 1;                 // kernels_of_op: issued one after another
    double* report_total = nullptr;  // its op_seconds_ entry (std::map nodes stay put)
    bool sm_bound = false;           // a GEMM or attention: slowed by SMs NCCL holds
  };
  struct OpHash {
    std::size_t operator()(const OpDesc& op) const;
  };
  struct OpEqual {
    bool operator()(const OpDesc& a, const OpDesc& b) const;
  };
  const PricedOp& priced(const OpDesc& op);
  double issue_seconds(const OpDesc& op) const;  // the host's cost of issuing `op`

  Pricer price_;
  SimDeviceOptions options_;
  std::unordered_map<OpDesc, PricedOp, OpHash, OpEqual> priced_;
  SimActorTurns turns_;
  double host_ = 0;             // when the host finishes issuing what it was given so far
  double host_waited_ = 0;      // the latest time the host waited until (host_waited())
  int library_call_ops_ = -1;   // ops issued inside the current library call; -1: none
  int library_call_depth_ = 0;  // library calls begun and not yet ended
  int split_gemm_depth_ = 0;    // split GEMMs begun and not yet ended
  std::map<std::string, double> host_seconds_;
  std::array<std::string, 2> region_;  // per host task: the region being run, or empty
  std::map<std::string, double> region_seconds_;
  OpObserver observer_;
  std::shared_ptr<MemoryTracker> memory_;
  std::int64_t memory_limit_ = std::numeric_limits<std::int64_t>::max();
  std::unique_ptr<SimStream> default_stream_;
  std::vector<IssuedOp> issued_;
  std::map<std::string, double> op_seconds_;
};

// The simulated time (seconds) of the calling actor.
double sim_now();

// The calling actor sleeps until simulated time `t`, or for `seconds`; not at all for less
// than SimGrid's timing precision (its precision/timing option, 1e-9 s by default): such a
// sleep changes no result, and SimGrid would print a warning for each.
void sim_sleep_until(double t);
void sim_sleep_for(double seconds);

}  // namespace tandem::sim
