// Tensor: shape, dtype and an optional storage handle. On the sim binding the storage
// is empty (a phantom tensor): it still knows its bytes, so the simulator can price
// and account for it exactly as the real bindings do. Storage belongs to a Device's
// allocator; a Tensor is a cheap, shared handle to it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.hpp"

namespace tandem {

enum class DType { fp32, bf16, fp16, int32, int64 };

Bytes dtype_size(DType t);
std::string_view dtype_name(DType t);

// Dimensions, outermost first (row-major), e.g. (B, T, C). Held inline, with the element
// count kept beside them: the simulator's step copies shapes by the million (a search's dry
// runs), and a heap-held vector made that a third of its time.
class Shape {
 public:
  static constexpr std::size_t kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }
  explicit Shape(const std::vector<std::int64_t>& dims) { assign(dims.data(), dims.size()); }

  std::size_t rank() const { return rank_; }
  std::int64_t operator[](std::size_t i) const {
    if (i >= rank_) out_of_range(i);
    return dims_[i];
  }
  std::int64_t numel() const { return numel_; }
  std::span<const std::int64_t> dims() const { return {dims_.data(), rank_}; }
  // Dimensions past the rank are always 0, so comparing the arrays compares the shapes.
  bool operator==(const Shape& o) const { return rank_ == o.rank_ && dims_ == o.dims_; }
  std::string to_string() const;  // "(4, 64, 768)"

 private:
  void assign(const std::int64_t* dims, std::size_t rank);
  [[noreturn]] void out_of_range(std::size_t i) const;

  std::array<std::int64_t, kMaxRank> dims_{};
  std::size_t rank_ = 0;
  std::int64_t numel_ = 1;
};

// Memory owned by a device allocator. Releasing it (the destructor) returns the bytes
// to the allocator's accounting.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual void* data() = 0;  // nullptr for phantom storage
  virtual Bytes bytes() const = 0;
};

struct Tensor {
  Shape shape;
  DType dtype = DType::fp32;
  std::shared_ptr<Storage> storage;  // empty for phantom tensors
  std::int64_t offset = 0;           // in elements, for views into a larger buffer

  std::int64_t numel() const { return shape.numel(); }
  Bytes bytes() const { return dtype_size(dtype) * numel(); }
  bool has_data() const { return storage && storage->data() != nullptr; }

  // Typed access to the elements; throws if the dtype does not match T or there is no data.
  template <typename T>
  T* data() const;

  // A view of `shape` starting `element_offset` elements into this tensor's storage.
  Tensor view(Shape new_shape, std::int64_t element_offset = 0) const;
};

void check_dtype_matches(DType have, DType want, std::string_view what);
void* tensor_data_or_throw(const Tensor& t);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::fp32;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::int32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::int64;
}

template <typename T>
T* Tensor::data() const {
  check_dtype_matches(dtype, dtype_of<T>(), "Tensor::data");
  return static_cast<T*>(tensor_data_or_throw(*this)) + offset;
}

}  // namespace tandem
