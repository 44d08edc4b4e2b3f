// Device, Stream and Event: the compute half of the step program's contract.
// The model issues named, typed ops into streams; each binding decides what an op does:
// the cpu binding runs it (Eigen and our kernels), the cuda binding launches it
// (cuBLAS and our CUDA kernels), the sim binding prices it from its shapes and dtype
// and advances simulated time. Streams and events have CUDA semantics on all three:
// ops on one stream run in order, a stream can wait on an event recorded on another,
// and that is the only way the step program expresses overlap.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/memory_tracker.hpp"
#include "core/tensor.hpp"

namespace tandem {

class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // block the host until the recorded work is done
  virtual bool query() = 0;        // true when the recorded work is done
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual std::string_view name() const = 0;  // "compute", "tp comm", "dp comm", …
  virtual void record(Event& event) = 0;      // event fires when work issued so far is done
  virtual void wait(Event& event) = 0;        // later work waits for the event
  virtual void synchronize() = 0;             // block the host until the stream drains
};

// C = alpha · op(A) · op(B) + beta · C, row-major; op transposes when asked.
// With accumulate_fp32 the product is added into an fp32 C whatever A and B hold
// (Megatron's gradient-accumulation fusion into main_grad).
struct GemmArgs {
  const Tensor& a;  // (M, K), or (K, M) when transpose_a
  const Tensor& b;  // (K, N), or (N, K) when transpose_b
  Tensor& c;        // (M, N)
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};

struct LayerNormArgs {
  const Tensor& input;  // (rows, C)
  const Tensor& gamma;  // (C)
  const Tensor& beta;   // (C)
  Tensor& output;       // (rows, C)
  Tensor& mean;         // (rows) saved for backward
  Tensor& rstd;         // (rows) saved for backward
  float epsilon = 1e-5f;
};

struct LayerNormBackwardArgs {
  const Tensor& grad_output;  // (rows, C)
  const Tensor& input;        // (rows, C)
  const Tensor& gamma;        // (C)
  const Tensor& mean;         // (rows)
  const Tensor& rstd;         // (rows)
  Tensor& grad_input;         // (rows, C)
  Tensor& grad_gamma;         // (C), accumulated into
  Tensor& grad_beta;          // (C), accumulated into
};

// Causal scaled-dot-product attention over heads already split by tensor parallelism.
struct AttentionArgs {
  const Tensor& qkv;  // (B, T, 3, heads, head_dim)
  Tensor& output;     // (B, T, heads, head_dim)
  Tensor& softmax;    // (B, heads, T, T) probabilities saved for backward (may be phantom)
};

struct AttentionBackwardArgs {
  const Tensor& grad_output;  // (B, T, heads, head_dim)
  const Tensor& qkv;          // (B, T, 3, heads, head_dim)
  const Tensor& softmax;      // (B, heads, T, T)
  Tensor& grad_qkv;           // (B, T, 3, heads, head_dim)
};

// Cross entropy over a vocab-sharded logit block: each tp rank holds columns
// [vocab_begin, vocab_begin + local vocab) and the step program all-reduces the partial
// max and sum-of-exp between the two phases (Megatron's vocab-parallel cross entropy).
struct CrossEntropyArgs {
  const Tensor& logits;   // (rows, local_vocab)
  const Tensor& targets;  // (rows) int32 global token ids
  std::int64_t vocab_begin = 0;
};

struct AdamArgs {
  Tensor& param;       // fp32 main parameters
  const Tensor& grad;  // fp32 main gradients
  Tensor& exp_avg;     // fp32 first moment
  Tensor& exp_avg_sq;  // fp32 second moment
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0;
  std::int64_t step = 1;  // 1-based, for bias correction
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view kind() const = 0;  // "cpu", "cuda", "sim"

  // Memory: every allocation goes through the tracker, identically on all bindings.
  virtual Tensor allocate(const Shape& shape, DType dtype) = 0;
  virtual const MemoryTracker& memory() const = 0;

  virtual Stream& default_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream(std::string name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;

  // The op set of the GPT step, forward and backward.
  virtual void gemm(Stream& s, const GemmArgs& args) = 0;
  virtual void layer_norm(Stream& s, const LayerNormArgs& args) = 0;
  virtual void layer_norm_backward(Stream& s, const LayerNormBackwardArgs& args) = 0;
  virtual void attention(Stream& s, const AttentionArgs& args) = 0;
  virtual void attention_backward(Stream& s, const AttentionBackwardArgs& args) = 0;
  virtual void gelu(Stream& s, const Tensor& input, Tensor& output) = 0;
  virtual void gelu_backward(Stream& s, const Tensor& grad_output, const Tensor& input,
                             Tensor& grad_input) = 0;
  // output(b, t, :) = word(tokens(b, t), :) + position(t, :)
  virtual void embedding(Stream& s, const Tensor& tokens, const Tensor& word,
                         const Tensor& position, Tensor& output) = 0;
  virtual void embedding_backward(Stream& s, const Tensor& tokens, const Tensor& grad_output,
                                  Tensor& grad_word, Tensor& grad_position) = 0;
  // Phase 1: per-row max of the local logits, (rows).
  virtual void cross_entropy_max(Stream& s, const CrossEntropyArgs& args, Tensor& row_max) = 0;
  // Phase 2: per-row sum of exp(logit - max) and the target logit if local (else 0).
  virtual void cross_entropy_sums(Stream& s, const CrossEntropyArgs& args, const Tensor& row_max,
                                  Tensor& sum_exp, Tensor& target_logit) = 0;
  // d loss / d logits = (softmax - onehot) · grad_loss(row).
  virtual void cross_entropy_backward(Stream& s, const CrossEntropyArgs& args,
                                      const Tensor& row_max, const Tensor& sum_exp,
                                      const Tensor& grad_loss, Tensor& grad_logits) = 0;
  virtual void add(Stream& s, const Tensor& a, const Tensor& b, Tensor& out) = 0;  // out = a + b
  virtual void scale(Stream& s, Tensor& x, float factor) = 0;                      // x *= factor
  virtual void fill(Stream& s, Tensor& x, float value) = 0;
  virtual void copy(Stream& s, const Tensor& from, Tensor& to) = 0;
  virtual void adam(Stream& s, const AdamArgs& args) = 0;
};

}  // namespace tandem
