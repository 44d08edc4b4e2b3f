#include "core/device.hpp"

namespace tandem {

const std::vector<std::string>& device_op_names() {
  static const std::vector<std::string> names = {"gemm",
                                                 "bias_add",
                                                 "bias_grad",
                                                 "layer_norm",
                                                 "layer_norm_backward",
                                                 "attention",
                                                 "attention_backward",
                                                 "gelu",
                                                 "gelu_backward",
                                                 "bias_gelu",
                                                 "bias_gelu_backward",
                                                 "bias_dropout_add",
                                                 "dropout",
                                                 "dropout_backward",
                                                 "embedding",
                                                 "embedding_backward",
                                                 "cross_entropy_max",
                                                 "cross_entropy_sums",
                                                 "cross_entropy_loss",
                                                 "cross_entropy_backward",
                                                 "add",
                                                 "scale",
                                                 "fill",
                                                 "copy",
                                                 "copy_columns",
                                                 "copy_rows",
                                                 "sum_squares",
                                                 "adam",
                                                 "rms_norm",
                                                 "rms_norm_backward",
                                                 "swiglu",
                                                 "swiglu_backward",
                                                 "rope",
                                                 "flash_attention",
                                                 "flash_attention_backward",
                                                 "moe_router",
                                                 "moe_router_backward",
                                                 "moe_drop_tokens",
                                                 "moe_permute",
                                                 "moe_permute_backward",
                                                 "moe_unpermute",
                                                 "moe_unpermute_backward",
                                                 "fp8_quantize",
                                                 "fp8_gemm",
                                                 "fp8_update_scale",
                                                 "upload",
                                                 "download"};
  return names;
}

std::string_view fp8_format_name(Fp8Format f) {
  return f == Fp8Format::e4m3 ? "e4m3" : "e5m2";
}

Fp8Tensor allocate_fp8(Device& d, std::int64_t rows, std::int64_t cols, const Fp8Layout& layout) {
  Fp8Layout l = layout;
  if (l.scaling == Fp8Scaling::tensor) l.block_rows = l.block_cols = 0;
  auto blocks = [](std::int64_t dim, std::int64_t block) {
    return block > 0 ? (dim + block - 1) / block : 1;
  };
  return {.codes = d.allocate(Shape{(rows * cols + 3) / 4}, DType::int32),
          .scale_inv = d.allocate(Shape{blocks(rows, l.block_rows), blocks(cols, l.block_cols)},
                                  DType::fp32),
          .rows = rows,
          .cols = cols,
          .layout = l};
}

}  // namespace tandem
