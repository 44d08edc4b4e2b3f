#include "core/tensor.hpp"

#include <numeric>
#include <stdexcept>

namespace tandem {

Bytes dtype_size(DType t) {
  switch (t) {
    case DType::fp32:
      return Bytes(4);
    case DType::bf16:
      return Bytes(2);
    case DType::fp16:
      return Bytes(2);
    case DType::int32:
      return Bytes(4);
    case DType::int64:
      return Bytes(8);
  }
  throw std::logic_error("unknown dtype");
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::fp32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
  }
  throw std::logic_error("unknown dtype");
}

void Shape::assign(const std::int64_t* dims, std::size_t rank) {
  if (rank > kMaxRank)
    throw std::invalid_argument("Shape: rank " + std::to_string(rank) + " exceeds the " +
                                std::to_string(kMaxRank) + " dimensions a shape holds");
  rank_ = rank;
  for (std::size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0)
      throw std::invalid_argument("Shape: negative dimension " + std::to_string(dims[i]));
    dims_[i] = dims[i];
    numel_ *= dims[i];
  }
}

void Shape::out_of_range(std::size_t i) const {
  throw std::out_of_range("Shape: dimension " + std::to_string(i) + " of a rank-" +
                          std::to_string(rank_) + " shape " + to_string());
}

std::string Shape::to_string() const {
  std::string s = "(";
  for (std::size_t i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + ")";
}

void check_dtype_matches(DType have, DType want, std::string_view what) {
  if (have != want)
    throw std::invalid_argument(std::string(what) + ": tensor holds " +
                                std::string(dtype_name(have)) + ", asked for " +
                                std::string(dtype_name(want)));
}

void* tensor_data_or_throw(const Tensor& t) {
  if (!t.has_data())
    throw std::logic_error("tensor " + t.shape.to_string() +
                           " has no storage (phantom tensor): its elements cannot be read");
  return t.storage->data();
}

Tensor Tensor::view(Shape new_shape, std::int64_t element_offset) const {
  Tensor v{std::move(new_shape), dtype, storage, offset + element_offset};
  if (storage && (v.offset + v.numel()) * dtype_size(dtype).value > storage->bytes().value)
    throw std::out_of_range("Tensor::view " + v.shape.to_string() + " at offset " +
                            std::to_string(element_offset) + " runs past its storage");
  return v;
}

}  // namespace tandem
