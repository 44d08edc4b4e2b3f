// The OpDesc of one measured fused-attention launch (bf16, causal, self-attention), as
// sim/op_cost_llama.cpp's flash_desc builds it, for the tests that hold the cost model to
// measured launches. Grouped key/value heads change neither the FLOPs nor, measurably, the
// time (the H200 table's grouped rows ran as fast), so only query heads × micro batch count.
#pragma once

#include <cstdint>
#include <string>

#include "sim/cost_model.hpp"
#include "sim/op_cost_llama.hpp"

namespace tandem::sim {

inline OpDesc causal_attention_launch(std::int64_t batch_heads, std::int64_t seq,
                                      std::int64_t head_dim, const std::string& library,
                                      bool backward) {
  const double pairs = attention_visible_pairs(seq, seq, 0, 0, true);
  const double hd = static_cast<double>(head_dim);
  return {.op = backward ? "flash_attention_backward" : "flash_attention",
          .dtype = DType::bf16,
          .m = seq,
          .n = seq,
          .k = head_dim,
          .batch = batch_heads,
          .flops = (backward ? 10.0 : 4.0) * hd * pairs * static_cast<double>(batch_heads),
          .bytes = 0,
          .visible_pairs = pairs,
          .library = library};
}

}  // namespace tandem::sim
