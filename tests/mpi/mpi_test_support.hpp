// What the MPI test programs share: the world communicator their main made, host tensors
// backed by plain memory (the cpu Device is not needed to test communication), typed
// fill/read helpers, and a compact check that reports the first mismatching element.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/tensor.hpp"
#include "exec/mpi/mpi_communicator.hpp"

namespace tandem::testing {

// Set by mpi_gtest_main.cpp for the duration of RUN_ALL_TESTS.
MpiCommunicator& world();

class HostStorage final : public Storage {
 public:
  explicit HostStorage(Bytes bytes) : bytes_(static_cast<std::size_t>(bytes.value)) {}
  void* data() override { return bytes_.data(); }
  Bytes bytes() const override { return Bytes(static_cast<std::int64_t>(bytes_.size())); }

 private:
  std::vector<std::byte> bytes_;
};

inline Tensor host_tensor(std::int64_t numel, DType dtype) {
  Tensor t{Shape{numel}, dtype, nullptr, 0};
  t.storage = std::make_shared<HostStorage>(t.bytes());
  return t;
}

// The communicator ignores the stream (cpu ops run at issue time); tests pass this one.
class NullStream final : public Stream {
 public:
  std::string_view name() const override { return "test"; }
  void record(Event&) override {}
  void wait(Event&) override {}
  void synchronize() override {}
};

// Element i of a tensor of dtype fp32, int32 or int64, read or written as int64 (the tests
// use integers small enough to be exact in fp32).
inline std::int64_t get(const Tensor& t, std::int64_t i) {
  switch (t.dtype) {
    case DType::fp32:
      return static_cast<std::int64_t>(t.data<float>()[i]);
    case DType::int32:
      return t.data<std::int32_t>()[i];
    case DType::int64:
      return t.data<std::int64_t>()[i];
    default:
      throw std::logic_error("get: unsupported dtype");
  }
}

inline void set(const Tensor& t, std::int64_t i, std::int64_t v) {
  switch (t.dtype) {
    case DType::fp32:
      t.data<float>()[i] = static_cast<float>(v);
      return;
    case DType::int32:
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
      return;
    case DType::int64:
      t.data<std::int64_t>()[i] = v;
      return;
    default:
      throw std::logic_error("set: unsupported dtype");
  }
}

inline Tensor filled(std::int64_t numel, DType dtype,
                     const std::function<std::int64_t(std::int64_t)>& value) {
  Tensor t = host_tensor(numel, dtype);
  for (std::int64_t i = 0; i < numel; ++i) set(t, i, value(i));
  return t;
}

// Every element equals expected(i); on failure names the first wrong element and the count.
inline ::testing::AssertionResult holds(const Tensor& t,
                                        const std::function<std::int64_t(std::int64_t)>& expected) {
  std::int64_t wrong = 0;
  std::string first;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (get(t, i) == expected(i)) continue;
    if (wrong++ == 0)
      first = "element " + std::to_string(i) + " is " + std::to_string(get(t, i)) + ", expected " +
              std::to_string(expected(i));
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << wrong << " of " << t.numel() << " elements wrong; " << first;
}

}  // namespace tandem::testing
