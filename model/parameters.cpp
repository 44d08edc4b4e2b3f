#include "model/parameters.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace tandem {

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
  }
  return Shape(dims);
}

void extract_shard(const ParameterSpec& spec, int size, int rank, const std::vector<float>& full,
                   std::vector<float>& shard) {
  const auto& fs = spec.full_shape;
  const std::int64_t rows = fs[0];
  const std::int64_t cols = fs.rank() > 1 ? fs.numel() / rows : 1;
  shard.clear();
  switch (spec.shard) {
    case ShardKind::replicated:
      shard = full;
      break;
    case ShardKind::rows: {
      const std::int64_t r = rows / size;
      shard.assign(full.begin() + rank * r * cols, full.begin() + (rank + 1) * r * cols);
      break;
    }
    case ShardKind::columns: {
      const std::int64_t c = cols / size;
      for (std::int64_t i = 0; i < rows; ++i)
        shard.insert(shard.end(), full.begin() + i * cols + rank * c,
                     full.begin() + i * cols + (rank + 1) * c);
      break;
    }
    case ShardKind::qkv_rows: {
      // Rows are (3, heads·head_dim): take this rank's heads from each of q, k, v.
      const std::int64_t per = rows / 3, r = per / size;
      for (int w = 0; w < 3; ++w) {
        const std::int64_t first = w * per + rank * r;
        shard.insert(shard.end(), full.begin() + first * cols, full.begin() + (first + r) * cols);
      }
      break;
    }
  }
}

int ParameterSet::add(ParameterSpec spec) {
  if (values_.storage) throw std::logic_error("ParameterSet: add after allocate");
  Parameter p{std::move(spec), Shape{}, 0, 0, Tensor{}, Tensor{}};
  p.local_shape = local_shape_of(p.spec, tp_size_);
  p.value_offset = numel_;
  numel_ += p.local_shape.numel();
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void ParameterSet::allocate(Device& device) {
  values_ = device.allocate(Shape{numel_}, DType::fp32);
  grads_ = device.allocate(Shape{numel_}, DType::fp32);
  std::int64_t g = 0;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    it->grad_offset = g;
    g += it->local_shape.numel();
  }
  for (auto& p : params_) {
    p.value = values_.view(p.local_shape, p.value_offset);
    p.grad = grads_.view(p.local_shape, p.grad_offset);
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
  for (auto& p : params_) {
    device.upload(s, p.value, Device::ProduceFloats([&](std::span<float> host) {
                    std::vector<float> full(static_cast<std::size_t>(p.spec.full_shape.numel()),
                                            p.spec.init_value);
                    if (p.spec.init_std > 0)
                      fill_normal(full, p.spec.init_std, seed_for(seed, p.spec.name));
                    std::vector<float> shard;
                    extract_shard(p.spec, tp_size_, tp_rank_, full, shard);
                    std::copy(shard.begin(), shard.end(), host.begin());
                  }));
  }
  device.fill(s, grads_, 0.0f);
}

}  // namespace tandem
