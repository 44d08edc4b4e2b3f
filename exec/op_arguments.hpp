// Argument checks and shape reading shared by the real bindings (cpu and cuda): both run
// the same kernels' shape structs (kernels/cpu/*.hpp), so both read them off the tensors
// the same way and reject the same mistakes with the same messages.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/device.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"

namespace tandem::op_arguments {

inline void same_numel(const char* op, const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel())
    throw std::invalid_argument(std::string(op) + ": " + a.shape.to_string() + " and " +
                                b.shape.to_string() + " differ in element count");
}

// C of a tensor read as (rows, C).
inline std::int64_t last_dim(const Tensor& t) {
  return t.shape[t.shape.rank() - 1];
}

inline kernels::cpu::AttentionShape attention_shape(const Tensor& qkv) {
  if (qkv.shape.rank() != 5 || qkv.shape[2] != 3)
    throw std::invalid_argument("attention: qkv must be (T, B, 3, heads, head_dim), got " +
                                qkv.shape.to_string());
  return {.B = qkv.shape[1], .T = qkv.shape[0], .NH = qkv.shape[3], .HD = qkv.shape[4]};
}

inline kernels::cpu::CrossEntropyShape ce_shape(const CrossEntropyArgs& a) {
  return {a.logits.shape[0], last_dim(a.logits), a.vocab_begin};
}

}  // namespace tandem::op_arguments
