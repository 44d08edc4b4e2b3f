// One op ready to run at one shape: the tensors a Device op needs for an OpShape,
// allocated on a real Device and filled with deterministic, well-scaled values (no NaN or
// denormal slows a kernel down), and the call that issues the op on a stream. What
// `tandem calibrate` times, many times over.
//
// The OpShape does not say everything the step program passed: a gemm is run as
// C = A · B (no transpose, β = 0) — OpenBLAS times the model's three forms (A·Bᵀ forward,
// A·B data gradient, Aᵀ·B accumulated weight gradient) within a few percent of each other
// on the GPT shapes here; attention runs B = 1 sequence of `batch` heads (the same strides
// as B sequences of batch / B heads); embedding tables have `vocab_rows` rows, the tokens
// fall in them and the vocabulary shard starts at 0.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/device.hpp"
#include "exec/calibrate/op_shape.hpp"

namespace tandem::calibrate {

struct OpCaseOptions {
  std::int64_t vocab_rows = 1024;  // rows of the embedding table (the local vocabulary)
  std::uint64_t seed = 1;          // of the values the tensors are filled with
};

class OpCase {
 public:
  using Issue = std::function<void(Device&, Stream&, std::vector<Tensor>&)>;
  OpCase(Device& device, std::vector<Tensor> tensors, Issue issue)
      : device_(device), tensors_(std::move(tensors)), issue_(std::move(issue)) {}

  // Issues the op once on `s` (asynchronously where the device is).
  void run(Stream& s) { issue_(device_, s, tensors_); }
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  Device& device_;
  std::vector<Tensor> tensors_;
  Issue issue_;
};

// The ops make_op_case knows: every Device op (core/device.hpp) by its method name.
const std::vector<std::string>& measurable_ops();

// Allocates and fills the tensors of `shape` on `device`. Throws std::invalid_argument for
// an op it does not know or a size the op cannot have (negative, or 0 where it needs one).
OpCase make_op_case(Device& device, const OpShape& shape, const OpCaseOptions& options = {});

}  // namespace tandem::calibrate
