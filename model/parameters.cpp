#include "model/parameters.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "model/optimizer_shard.hpp"

namespace tandem {

std::string_view shard_kind_name(ShardKind k) {
  switch (k) {
    case ShardKind::replicated:
      return "replicated";
    case ShardKind::rows:
      return "rows";
    case ShardKind::columns:
      return "columns";
    case ShardKind::qkv_rows:
      return "qkv_rows";
    case ShardKind::glu_rows:
      return "glu_rows";
  }
  return "?";
}

ShardKind parse_shard_kind(std::string_view name) {
  for (ShardKind k : {ShardKind::replicated, ShardKind::rows, ShardKind::columns,
                      ShardKind::qkv_rows, ShardKind::glu_rows})
    if (shard_kind_name(k) == name) return k;
  throw std::invalid_argument("unknown shard kind " + std::string(name));
}

Shape local_shape_of(const ParameterSpec& spec, int size) {
  const auto d = spec.full_shape.dims();
  std::vector<std::int64_t> dims(d.begin(), d.end());
  auto split = [&](std::size_t axis) {
    if (dims.size() <= axis || dims[axis] % size != 0)
      throw std::invalid_argument("parameter " + spec.name + " " + spec.full_shape.to_string() +
                                  " cannot be split " + std::to_string(size) + " ways");
    dims[axis] /= size;
  };
  switch (spec.shard) {
    case ShardKind::replicated:
      break;
    case ShardKind::rows:
      split(0);
      break;
    case ShardKind::columns:
      split(1);
      break;
    case ShardKind::qkv_rows:
      if (dims[0] % (3 * size) != 0)
        throw std::invalid_argument("qkv parameter " + spec.name + " cannot be split by heads");
      dims[0] /= size;
      break;
    case ShardKind::glu_rows:
      if (dims[0] % (2 * size) != 0)
        throw std::invalid_argument("gate+up parameter " + spec.name + " cannot be split " +
                                    std::to_string(size) + " ways");
      dims[0] /= size;
      break;
  }
  return Shape(dims);
}

namespace {

// Calls run(full_begin, shard_begin, count) for each contiguous run of rank `rank`'s shard
// inside the full (row-major) parameter, in shard order.
template <typename Run>
void for_each_shard_run(const ParameterSpec& spec, int size, int rank, Run run) {
  const auto& fs = spec.full_shape;
  const std::int64_t rows = fs[0];
  const std::int64_t cols = fs.rank() > 1 ? fs.numel() / rows : 1;
  switch (spec.shard) {
    case ShardKind::replicated:
      run(0, 0, fs.numel());
      break;
    case ShardKind::rows: {
      const std::int64_t r = rows / size;
      run(rank * r * cols, 0, r * cols);
      break;
    }
    case ShardKind::columns: {
      const std::int64_t c = cols / size;
      for (std::int64_t i = 0; i < rows; ++i) run(i * cols + rank * c, i * c, c);
      break;
    }
    case ShardKind::qkv_rows:
    case ShardKind::glu_rows: {
      // Rows are (3, heads·head_dim): this rank's heads from each of q, k, v; or (2, F):
      // this rank's rows of gate and of up, which Megatron's fused fc1 holds side by side.
      const std::int64_t pieces = spec.shard == ShardKind::qkv_rows ? 3 : 2;
      const std::int64_t per = rows / pieces, r = per / size;
      for (std::int64_t w = 0; w < pieces; ++w)
        run((w * per + rank * r) * cols, w * r * cols, r * cols);
      break;
    }
  }
}

}  // namespace

void extract_shard(const ParameterSpec& spec, int size, int rank, const std::vector<float>& full,
                   std::vector<float>& shard) {
  shard.assign(static_cast<std::size_t>(local_shape_of(spec, size).numel()), 0.0f);
  for_each_shard_run(spec, size, rank, [&](std::int64_t f, std::int64_t s, std::int64_t n) {
    std::copy(full.begin() + f, full.begin() + f + n, shard.begin() + s);
  });
}

std::vector<std::int64_t> shard_positions(const ParameterSpec& spec, int size, int rank) {
  std::vector<std::int64_t> at(static_cast<std::size_t>(local_shape_of(spec, size).numel()));
  for_each_shard_run(spec, size, rank, [&](std::int64_t f, std::int64_t s, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) at[static_cast<std::size_t>(s + i)] = f + i;
  });
  return at;
}

void insert_shard(const ParameterSpec& spec, int size, int rank, const std::vector<float>& shard,
                  std::vector<float>& full) {
  if (static_cast<std::int64_t>(shard.size()) != local_shape_of(spec, size).numel() ||
      static_cast<std::int64_t>(full.size()) != spec.full_shape.numel())
    throw std::invalid_argument("insert_shard: " + spec.name + " shard or full size mismatch");
  for_each_shard_run(spec, size, rank, [&](std::int64_t f, std::int64_t s, std::int64_t n) {
    std::copy(shard.begin() + s, shard.begin() + s + n, full.begin() + f);
  });
}

int ParameterSet::add(ParameterSpec spec) {
  if (grads_.storage) throw std::logic_error("ParameterSet: add after allocate");
  Parameter p{std::move(spec), Shape{}, 0, 0, Tensor{}, Tensor{}, Tensor{}, chunk_};
  p.local_shape = local_shape_of(p.spec, tp_size_);
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

// Megatron-Core's DistributedOptimizer._compute_per_buffer_param_layout: parameters in
// reverse order, each start aligned, a bucket closed once its parameters span
// bucket_elements (or around a parameter of its own, or where another model chunk's
// parameters begin: Megatron's buffer per chunk), its end padded.
std::vector<BufferBucket> layout_buffers(std::vector<Parameter>& params, const BufferLayout& layout,
                                         std::int64_t& numel) {
  if (layout.pad_to < 1 || layout.expert_pad_to < 1 || layout.param_align < 1 ||
      layout.fp8_pad_to < 1)
    throw std::invalid_argument(
        "BufferLayout: pad_to, expert_pad_to, fp8_pad_to and param_align must be ≥ 1");
  std::vector<BufferBucket> buckets;
  std::int64_t offset = 0;        // where the next parameter goes (before its alignment)
  std::int64_t bucket_start = 0;  // where the next bucket begins
  bool open = false;
  // Ends the open bucket at `end` (padded); the next bucket begins there.
  auto close = [&](std::int64_t end) {
    BufferBucket& b = buckets.back();
    b.end = round_up(end, b.fp8      ? layout.fp8_pad_to
                          : b.expert ? layout.expert_pad_to
                                     : layout.pad_to);
    offset = bucket_start = b.end;
    open = false;
  };
  enum Part { dense, experts, fp8 };
  auto part_of = [](const ParameterSpec& s) {
    if (s.fp8 && s.expert)
      throw std::invalid_argument("parameter " + s.name +
                                  ": an expert's weight is not held in FP8");
    return s.fp8 ? fp8 : s.expert ? experts : dense;
  };
  for (const Part part : {dense, experts, fp8}) {
    for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
      Parameter& p = params[static_cast<std::size_t>(i)];
      if (part_of(p.spec) != part) continue;
      if (part == fp8 && (p.local_shape.rank() != 2 || p.local_shape.numel() % 4 != 0))
        throw std::invalid_argument("parameter " + p.spec.name + " " + p.local_shape.to_string() +
                                    ": an FP8 parameter is a matrix of a multiple of 4 elements");
      const bool alone = layout.own_bucket && layout.own_bucket(p.spec);
      if (open && params[static_cast<std::size_t>(buckets.back().params.back())].chunk != p.chunk)
        close(offset);  // the previous chunk's buffer ends
      offset = round_up(offset, layout.param_align);
      if (alone && open) close(offset);
      const std::int64_t bucket_elements =
          p.chunk == 0 || layout.bucket_every_chunk ? layout.bucket_elements : 0;
      if (!open) {
        if (part == fp8 && bucket_start % 4 != 0)
          throw std::invalid_argument(
              "BufferLayout: the FP8 parameters' buffer would begin at element " +
              std::to_string(bucket_start) + ", not a multiple of 4 (pad the others to 4)");
        buckets.push_back({bucket_start, bucket_start, {}, part == experts, part == fp8});
        open = true;
      }
      if (part == fp8) offset = round_up(offset, 4);  // whole words of codes
      p.value_offset = p.grad_offset = offset;
      offset += p.local_shape.numel();
      buckets.back().params.push_back(i);
      if (alone || (bucket_elements > 0 && offset - buckets.back().begin >= bucket_elements))
        close(offset);
    }
    if (open) close(offset);  // the next part's buffer starts after this one's last bucket
  }
  numel = offset;
  return buckets;
}

void ParameterSet::allocate(Device& device, const BufferLayout& layout, DType compute,
                            const MainValueShard& main, DType grad) {
  buckets_ = layout_buffers(params_, layout, numel_);
  fp8_params_.clear();
  fp8_begin_ = numel_;
  for (const auto& b : buckets_)
    if (b.fp8) {
      fp8_begin_ = std::min(fp8_begin_, b.begin);
      fp8_params_.insert(fp8_params_.end(), b.params.begin(), b.params.end());
    }
  grads_ = device.allocate(Shape{numel_}, grad, MemoryUse::gradients);
  // Under fp32 (the cpu binding's FP8 runs) the buffer is the main values, the FP8
  // parameters' included; under 16-bit compute it stops where the FP8 parameters begin.
  compute_ = device.allocate(Shape{compute == DType::fp32 ? numel_ : fp8_begin_}, compute,
                             MemoryUse::weights);
  if (has_fp8()) {
    fp8_codes_ =
        device.allocate(Shape{(numel_ - fp8_begin_) / 4}, DType::int32, MemoryUse::weights);
    fp8_scale_inv_ = device.allocate(Shape{static_cast<std::int64_t>(fp8_params_.size())},
                                     DType::fp32, MemoryUse::weights);
  }
  main_slices_.clear();
  main_offsets_.clear();
  if (compute == DType::fp32) {
    main_ = compute_;
    main_slices_.emplace_back(0, numel_);
    main_offsets_.push_back(0);
  } else {
    std::int64_t held = 0;
    for (const auto& [begin, end] : make_optimizer_shard(*this, main.dp_size, main.dp_rank,
                                                         main.expert_dp_size, main.expert_dp_rank)
                                        .bucket_slices) {
      main_slices_.emplace_back(begin, end);
      main_offsets_.push_back(held);
      held += end - begin;
    }
    main_ = device.allocate(Shape{held}, DType::fp32, MemoryUse::optimizer);
  }
  for (auto& p : params_) {
    if (compute == DType::fp32) p.value = compute_.view(p.local_shape, p.value_offset);
    p.grad = grads_.view(p.local_shape, p.grad_offset);
    if (!p.spec.fp8) p.compute = compute_.view(p.local_shape, p.value_offset);
  }
  for (std::size_t k = 0; k < fp8_params_.size(); ++k) {
    Parameter& p = params_[static_cast<std::size_t>(fp8_params_[k])];
    p.fp8 = Fp8Tensor{.codes = fp8_codes(p.value_offset, p.local_shape.numel()),
                      .scale_inv = fp8_scale_inv_.view(Shape{1}, static_cast<std::int64_t>(k)),
                      .rows = p.local_shape[0],
                      .cols = p.local_shape[1]};
  }
}

Tensor ParameterSet::fp8_codes(std::int64_t begin, std::int64_t length) {
  if (begin < fp8_begin_ || begin + length > numel_ || begin % 4 != 0 || length % 4 != 0)
    throw std::logic_error("ParameterSet: elements [" + std::to_string(begin) + ", " +
                           std::to_string(begin + length) +
                           ") are not whole words of the FP8 buffer [" +
                           std::to_string(fp8_begin_) + ", " + std::to_string(numel_) + ")");
  return fp8_codes_.view(Shape{length / 4}, (begin - fp8_begin_) / 4);
}

std::int64_t ParameterSet::held_offset(std::int64_t begin, std::int64_t length,
                                       const char* what) const {
  for (std::size_t k = 0; k < main_slices_.size(); ++k) {
    const auto [lo, hi] = main_slices_[k];
    if (begin >= lo && begin + length <= hi) return main_offsets_[k] + begin - lo;
  }
  throw std::logic_error("ParameterSet: " + std::string(what) + " [" + std::to_string(begin) +
                         ", " + std::to_string(begin + length) + ") are not held by this rank");
}

Tensor ParameterSet::main_values(std::int64_t begin, std::int64_t length) {
  return main_.view(Shape{length}, held_offset(begin, length, "main values"));
}

Tensor ParameterSet::main_grads(std::int64_t begin, std::int64_t length) {
  if (grads_.dtype == DType::fp32) return grads_.view(Shape{length}, begin);
  if (!main_grads_.storage)
    throw std::logic_error("ParameterSet: the 16-bit gradients' fp32 copy is not staged");
  return main_grads_.view(Shape{length}, held_offset(begin, length, "main gradients"));
}

void ParameterSet::stage_main_grads(Device& device, Stream& s) {
  if (grads_.dtype == DType::fp32) return;
  main_grads_ = device.allocate(Shape{main_.numel()}, DType::fp32, MemoryUse::gradients);
  for (std::size_t k = 0; k < main_slices_.size(); ++k) {
    const auto [lo, hi] = main_slices_[k];
    Tensor to = main_grads_.view(Shape{hi - lo}, main_offsets_[k]);
    device.copy(s, grads_.view(Shape{hi - lo}, lo), to);
  }
}

void ParameterSet::refresh_compute(Device& device, Stream& s) {
  if (!separate_main()) return;
  if (!holds_all_main() || has_fp8())
    throw std::logic_error(
        "ParameterSet: the 16-bit parameters cannot be refreshed from a "
        "shard of the main values, nor FP8 parameters by a copy (the data-parallel gather "
        "and the FP8 cast do it)");
  device.copy(s, main_, compute_);
}

void ParameterSet::load_values(Device& device, Stream& s, const Tensor& full) {
  if (!separate_main()) {
    device.copy(s, full, compute_);
    return;
  }
  for (const auto& [lo, hi] : main_slices_) {
    Tensor to = main_values(lo, hi - lo);
    device.copy(s, full.view(Shape{hi - lo}, lo), to);
  }
  // The FP8 parameters are cast from the main values by their owner (model/fp8_params.hpp).
  device.copy(s, full.view(Shape{compute_.numel()}, 0), compute_);
}

void ParameterSet::store_main_values(Device& device, Stream& s, Tensor& full) {
  for (const auto& [lo, hi] : main_slices_) {
    Tensor to = full.view(Shape{hi - lo}, lo);
    device.copy(s, main_values(lo, hi - lo), to);
  }
}

namespace {

// splitmix64: a well-mixed 64-bit seed from (seed, name) so that every parameter has
// its own stream regardless of registration order.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t seed_for(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = mix(seed);
  for (unsigned char c : name) h = mix(h ^ c);
  return h;
}

// Box–Muller by hand: std::normal_distribution's algorithm is implementation-defined,
// and checkpoints and tests must not depend on the standard library's choice.
void fill_normal(std::vector<float>& out, float std_dev, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const double two_pi = 6.283185307179586476925286766559;
  auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53; };
  for (std::size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = two_pi * uniform();
    out[i] = static_cast<float>(std_dev * r * std::cos(a));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(std_dev * r * std::sin(a));
  }
}

}  // namespace

void ParameterSet::initialize(Device& device, Stream& s, std::uint64_t seed) {
  auto produce = [&](const Parameter& p) {
    return Device::ProduceFloats([&](std::span<float> host) {
      std::vector<float> full(static_cast<std::size_t>(p.spec.full_shape.numel()),
                              p.spec.init_value);
      if (p.spec.init_std > 0) fill_normal(full, p.spec.init_std, seed_for(seed, p.spec.name));
      std::vector<float> shard;
      extract_shard(p.spec, tp_size_, tp_rank_, full, shard);
      std::copy(shard.begin(), shard.end(), host.begin());
    });
  };
  device.fill(s, compute_, 0.0f);  // the buckets' padding
  if (has_fp8()) {                 // codes 0 (+0.0) until the first cast
    device.fill(s, fp8_codes_, 0.0f);
    device.fill(s, fp8_scale_inv_, 1.0f);
  }
  if (separate_main()) device.fill(s, main_, 0.0f);
  for (auto& p : params_) {
    if (!separate_main()) {
      device.upload(s, p.value, produce(p));
      continue;
    }
    // One parameter's fp32 values at a time: rounded into the model parameter, and the
    // slices of it this rank holds main values for.
    Tensor scratch = device.allocate(p.local_shape, DType::fp32);
    device.upload(s, scratch, produce(p));
    if (!p.spec.fp8) device.copy(s, scratch, p.compute);
    const std::int64_t begin = p.value_offset, end = begin + p.local_shape.numel();
    for (const auto& [lo, hi] : main_slices_) {
      const std::int64_t a = std::max(lo, begin), b = std::min(hi, end);
      if (a >= b) continue;
      Tensor to = main_values(a, b - a);
      device.copy(s, scratch.view(Shape{b - a}, a - begin), to);
    }
  }
  device.fill(s, grads_, 0.0f);
}

}  // namespace tandem
