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
                                                 "moe_permute",
                                                 "moe_permute_backward",
                                                 "moe_unpermute",
                                                 "moe_unpermute_backward",
                                                 "upload",
                                                 "download"};
  return names;
}

}  // namespace tandem
