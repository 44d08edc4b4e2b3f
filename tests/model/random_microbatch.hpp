// One microbatch of seeded random tokens and labels (0..100) with their positions, for the
// model tests on the cpu binding: rows are sequence-first, t·B + b, as the model's.
#pragma once

#include <cstdint>
#include <random>

#include "core/device.hpp"
#include "model/gpt_chunk.hpp"

namespace tandem::testing {

inline MicrobatchTensors random_microbatch(Device& device, const GptDims& dims, unsigned seed = 3) {
  const std::int64_t rows = std::int64_t{dims.seq} * dims.micro_batch;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, 100);
  MicrobatchTensors mb;
  mb.tokens = device.allocate(Shape{rows}, DType::int32);
  mb.labels = device.allocate(Shape{rows}, DType::int32);
  mb.positions = device.allocate(Shape{rows}, DType::int32);
  for (std::int64_t i = 0; i < rows; ++i) {
    mb.tokens.data<std::int32_t>()[i] = tok(gen);
    mb.labels.data<std::int32_t>()[i] = tok(gen);
    mb.positions.data<std::int32_t>()[i] = static_cast<std::int32_t>(i / dims.micro_batch);
  }
  return mb;
}

}  // namespace tandem::testing
