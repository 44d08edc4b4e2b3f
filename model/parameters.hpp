// Parameters of a model chunk: every weight and bias this rank holds (its tensor-parallel
// shard), laid out in one contiguous value buffer and one contiguous fp32 gradient buffer
// (Megatron's ParamAndGradBuffer, which the data-parallel buckets and the distributed
// optimizer slice). Under fp32 the value buffer is the fp32 parameters; under mixed
// precision it is the 16-bit model parameters, and the fp32 main parameters are held
// apart: for the whole buffer (Megatron's Float16OptimizerWithFloat16Params), or with the
// distributed optimizer for this data-parallel rank's slice of every bucket only
// (DistributedOptimizer's shard_fp32_from_float16_groups). Both buffers share one index map:
// parameters in reverse registration order, so that backward — which visits the model in reverse —
// fills the gradient buffer from the front and buckets become ready in order. The buffers are cut
// into buckets, each padded to a multiple of `pad_to` elements (with the distributed
// optimizer a multiple of the data-parallel size, so every dp rank owns an equal slice of
// every bucket), each parameter starting at a multiple of `param_align`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.hpp"

namespace tandem {

// How a logical (unsharded) parameter maps onto this rank's shard.
enum class ShardKind {
  replicated,  // every tp rank holds all of it (layer norms, row-parallel biases)
  rows,        // split along dim 0 (column-parallel weights and biases, vocab rows)
  columns,     // split along dim 1 (row-parallel weights)
  qkv_rows,    // (3·heads·head_dim, C) split by heads within each of q, k, v
  glu_rows,    // (2·F, …) split by rows within each of gate and up (SwiGLU's fused fc1)
};

struct ParameterSpec {
  std::string name;  // "layers.3.attention.qkv.weight"
  Shape full_shape;  // logical, unsharded
  ShardKind shard = ShardKind::replicated;
  float init_std = 0.0f;  // normal(0, std); 0 → constant init_value
  float init_value = 0.0f;
  bool weight_decay = true;  // Megatron: no decay on biases and norm parameters
  // A second copy of a parameter that lives on another stage (the tied output layer on the
  // last pipeline stage): counted once in the gradient norm.
  bool shared_copy = false;
  // Replicated over tp, but each rank's gradient sees only its sequence shard (layer norms,
  // row-parallel biases, the position embedding under sequence parallelism): the gradient
  // is all-reduced over tp (Megatron's `sequence_parallel` parameter attribute).
  bool sequence_parallel = false;
  // An expert's weight (mixture of experts): this rank holds its own experts, so the
  // gradient is reduced over the expert-data-parallel group, not the data-parallel one
  // (Megatron's allreduce = False), and its buckets hold expert weights only.
  bool expert = false;
  // Replicated over tp, but each rank's gradient covers only its own attention heads
  // (qk_layernorm's q and k norm weights): the gradient is summed over tp with or without
  // sequence parallelism (Megatron's finalize_model_grads picks q_layernorm / k_layernorm).
  bool heads_partial_grad = false;
  // Held in FP8 (Megatron's --fp8-param-gather: the weight of an FP8 linear layer is one of
  // Transformer Engine's FP8 tensors): no 16-bit copy; its model parameter is one E4M3 code
  // an element in the FP8 buffer, cast from the fp32 main values after each optimizer step
  // (model/fp8_params.hpp) and all-gathered over dp as codes.
  bool fp8 = false;
};

struct Parameter {
  ParameterSpec spec;
  Shape local_shape;
  std::int64_t value_offset = 0;  // elements into the value buffer
  std::int64_t grad_offset = 0;   // elements into the gradient buffer (= value_offset)
  Tensor value;    // fp32 parameter under fp32 compute (= compute); empty under mixed
                   // precision, whose fp32 main values ParameterSet::main_values holds
  Tensor grad;     // fp32 main gradient
  Tensor compute;  // what forward and backward read: the 16-bit model parameter under mixed
                   // precision (Megatron's bf16/fp16 model params), else the fp32 one
  int chunk = 0;   // the model chunk (virtual pipeline stage) that registered it
  // spec.fp8: the (rows, cols) FP8 model parameter, per-tensor scaled, its codes a view of
  // the FP8 buffer and its scale_inv one element of ParameterSet::fp8_scale_inv (compute
  // is empty then).
  Fp8Tensor fp8;
};

// How the buffers are cut into buckets: Megatron-Core's bucket_size and padding
// (DistributedOptimizer._compute_per_buffer_param_layout with the distributed optimizer,
// _compute_default_per_buffer_param_layout without: no padding, no own bucket).
struct BufferLayout {
  // A bucket closes once the parameters in it span this many elements (alignment gaps
  // included); 0: one bucket (Megatron's bucket_size None).
  std::int64_t bucket_elements = 0;
  int pad_to = 1;         // every bucket's end is padded to a multiple of this (elements)
  int expert_pad_to = 1;  // … of this for the experts' buckets
  // … of this for the FP8 parameters' buckets: a multiple of 4, so that every dp rank's
  // slice holds whole int32 words of packed codes.
  int fp8_pad_to = 4;
  int param_align = 1;  // every parameter starts at a multiple of this (elements)
  // Megatron-Core wraps each model chunk in a DDP of its own: a bucket never spans two
  // chunks, and bucket_elements cuts chunk 0 only (Megatron disables bucketing for later
  // chunks: each is one bucket) unless this is set.
  bool bucket_every_chunk = false;
  // Parameters that get a bucket of their own: Megatron's shared embedding with the
  // distributed optimizer, so the first and last stage shard it alike.
  std::function<bool(const ParameterSpec&)> own_bucket;
};

// A contiguous range [begin, end) of both buffers; end − begin is a multiple of pad_to, the
// tail past the last parameter and the gaps before aligned parameters are padding (zero).
struct BufferBucket {
  std::int64_t begin = 0, end = 0;
  std::vector<int> params;  // indices, in buffer order
  bool expert = false;      // holds experts' weights (after the dense ones in the buffer)
  bool fp8 = false;         // holds FP8 parameters (after all the others: Megatron's buffer
                            // of uint8 parameters)
};

// Which fp32 main values a rank holds under mixed precision: rank dp_rank of dp_size's slice
// of every bucket (the experts' buckets: of the expert-data-parallel group, when
// expert_dp_size is set), as make_optimizer_shard cuts them; the default, the whole buffer.
struct MainValueShard {
  int dp_size = 1, dp_rank = 0;
  int expert_dp_size = 0, expert_dp_rank = 0;
};

class ParameterSet {
 public:
  ParameterSet(int tp_size, int tp_rank) : tp_size_(tp_size), tp_rank_(tp_rank) {}

  // Registration phase: returns the parameter's index. Parameters added after
  // begin_chunk(c) belong to model chunk c (0 until then).
  int add(ParameterSpec spec);
  void begin_chunk(int chunk) { chunk_ = chunk; }
  // Lays the parameters out in buckets, allocates the value and gradient buffers on
  // `device` in the `compute` dtype and `grad` dtype, and makes every parameter a view into
  // them. With a 16-bit `compute` dtype a third, fp32 buffer holds the main values of the
  // slices `main` names, back to back (main_values). The gradient buffer is Megatron's
  // main_grad: fp32, or 16-bit when the run reduces its gradients in 16 bits
  // (grad_reduce_dtype), the weight-gradient GEMMs accumulating into it.
  void allocate(Device& device, const BufferLayout& layout = {}, DType compute = DType::fp32,
                const MainValueShard& main = {}, DType grad = DType::fp32);
  // Whether the fp32 main values are a buffer of their own (16-bit compute), and whether
  // it covers the whole value buffer (no distributed optimizer).
  bool separate_main() const { return compute_.storage != main_.storage; }
  bool holds_all_main() const { return main_.numel() == numel_; }
  // The fp32 main values of buffer elements [begin, begin + length), which must lie inside
  // one held slice: under fp32 a view of the value buffer itself.
  Tensor main_values(std::int64_t begin, std::int64_t length);
  // The held slices [begin, end) of the buffer, in buffer order.
  const std::vector<std::pair<std::int64_t, std::int64_t>>& main_slices() const {
    return main_slices_;
  }
  // Copies the fp32 main values into the 16-bit parameters (after each optimizer step
  // without the distributed optimizer); needs holds_all_main(); nothing under fp32.
  void refresh_compute(Device& device, Stream& s);
  // Sets every value from `full` (numel() fp32, e.g. a checkpoint's): the held main slices
  // and the 16-bit parameters.
  void load_values(Device& device, Stream& s, const Tensor& full);
  // Writes the held main values into their places in `full` (numel() fp32); the rest of
  // `full` is left as it is (the data-parallel gather fills it).
  void store_main_values(Device& device, Stream& s, Tensor& full);

  Parameter& operator[](int i) { return params_.at(i); }
  const Parameter& operator[](int i) const { return params_.at(i); }
  std::vector<Parameter>& all() { return params_; }
  const std::vector<Parameter>& all() const { return params_; }
  Tensor& grads() { return grads_; }
  // The fp32 gradients the optimizer reads, of buffer elements [begin, begin + length) inside
  // one held slice: a view of the gradient buffer when it is fp32; of a 16-bit one, the fp32
  // copy stage_main_grads made (Megatron's _copy_model_grads_to_main_grads).
  Tensor main_grads(std::int64_t begin, std::int64_t length);
  // With a 16-bit gradient buffer: copies the held slices' gradients into a fresh fp32
  // buffer laid out as the main values (once they are reduced), which the optimizer step
  // reads and release_main_grads frees; nothing with an fp32 gradient buffer.
  void stage_main_grads(Device& device, Stream& s);
  void release_main_grads() { main_grads_ = Tensor{}; }
  // The 16-bit model parameters, elements [0, fp8_begin()) of the buffer; under fp32 the
  // whole buffer of fp32 values (the FP8 parameters' main values too, which forward does not
  // read).
  Tensor& compute_values() { return compute_; }
  // The FP8 parameters (spec.fp8), in buffer order: they fill [fp8_begin(), numel()), their
  // codes packed four to an int32 element; fp8_scale_inv holds each one's scale_inv.
  bool has_fp8() const { return !fp8_params_.empty(); }
  std::int64_t fp8_begin() const { return fp8_begin_; }
  const std::vector<int>& fp8_params() const { return fp8_params_; }
  Tensor& fp8_scale_inv() { return fp8_scale_inv_; }
  // The codes of buffer elements [begin, begin + length), both multiples of 4, inside the
  // FP8 part.
  Tensor fp8_codes(std::int64_t begin, std::int64_t length);
  std::int64_t numel() const { return numel_; }  // of each buffer, padding included
  const std::vector<BufferBucket>& buckets() const { return buckets_; }
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }

  // Initialises every parameter as Megatron does, from the logical tensor: each rank
  // generates the full parameter from a seed derived from (seed, name) and keeps its
  // shard, so any tensor-parallel size starts from the same model. Under mixed precision
  // the held main values get the fp32 initial values and the model parameters their 16-bit
  // rounding, through one parameter-sized fp32 scratch tensor at a time.
  void initialize(Device& device, Stream& s, std::uint64_t seed);

 private:
  // Where buffer elements [begin, begin + length), inside one held slice, sit in the held
  // slices laid back to back (main_ and main_grads_); throws naming `what` otherwise.
  std::int64_t held_offset(std::int64_t begin, std::int64_t length, const char* what) const;

  int tp_size_, tp_rank_;
  int chunk_ = 0;  // of the parameters being added
  std::vector<Parameter> params_;
  std::vector<BufferBucket> buckets_;
  std::int64_t numel_ = 0;
  Tensor compute_;  // (fp8_begin_) 16-bit, or (numel_) fp32: the parameters forward reads
  std::int64_t fp8_begin_ = 0;
  Tensor fp8_codes_;             // ((numel_ − fp8_begin_) / 4) int32
  Tensor fp8_scale_inv_;         // (fp8_params_.size()) fp32
  std::vector<int> fp8_params_;  // indices, in buffer order
  Tensor grads_;                 // (numel_) fp32, or 16-bit (allocate's `grad`)
  Tensor main_grads_;            // (Σ held slices) fp32 while staged, with 16-bit grads_
  Tensor main_;                  // (Σ held slices) fp32 main values; compute_ itself under fp32
  std::vector<std::pair<std::int64_t, std::int64_t>> main_slices_;
  std::vector<std::int64_t> main_offsets_;  // each held slice's first element in main_
};

std::string_view shard_kind_name(ShardKind k);  // "replicated", "rows", "columns", "qkv_rows", …
ShardKind parse_shard_kind(std::string_view name);  // throws std::invalid_argument

// The local shape of a logical parameter on tp rank `rank` of `size`.
Shape local_shape_of(const ParameterSpec& spec, int size);
// Copies rank `rank`'s shard of `full` (row-major, spec.full_shape) into `shard`.
void extract_shard(const ParameterSpec& spec, int size, int rank, const std::vector<float>& full,
                   std::vector<float>& shard);
// For each element of rank `rank`'s shard, its index in the full (row-major) parameter.
std::vector<std::int64_t> shard_positions(const ParameterSpec& spec, int size, int rank);
// The inverse: writes rank `rank`'s `shard` into its place in `full` (spec.full_shape).
void insert_shard(const ParameterSpec& spec, int size, int rank, const std::vector<float>& shard,
                  std::vector<float>& full);
// Lays out `params` (their local shapes, registration order) as allocate() does and returns
// the buckets; sets every parameter's offsets. The experts' weights come after the dense
// ones, in buckets of their own (Megatron's separate expert buffer), and the FP8 parameters
// after both (Megatron's buffer per parameter dtype). Pure arithmetic.
//
// Example (Megatron's rules with the distributed optimizer, dp 3: param_align 64, pad_to
// lcm(3, 128) = 384, bucket_elements 500): parameters registered a (100), b (200), c (300)
// lie c [0, 300), b [320, 520) — closing the first bucket, 520 − 0 ≥ 500, padded to
// [0, 768) — then a [768, 868) in the bucket [768, 1152).
std::vector<BufferBucket> layout_buffers(std::vector<Parameter>& params, const BufferLayout& layout,
                                         std::int64_t& numel);

}  // namespace tandem
