// FP8 training as Megatron-LM's arguments set it (its --fp8-* flags, read by Megatron-Core's
// fp8_utils into a Transformer Engine recipe): which format, which scaling recipe, the
// delayed recipe's amax history, and which layers stay in bf16. A member of TrainingConfig;
// the fields and their rules live in core/fp8_fields.cpp. Off while `format` is empty.
#pragma once

#include <string>

namespace tandem {

struct Fp8Config {
  std::string format;              // "" (off) | e4m3 | hybrid (E4M3 forward, E5M2 gradients)
  std::string recipe = "delayed";  // delayed | tensorwise | blockwise | mxfp8
  int margin = 0;                  // delayed: scale = fp8_max / amax / 2^margin
  int amax_history_len = 1;        // delayed: amaxes kept (Megatron's default 1)
  std::string amax_compute_algo = "most_recent";  // delayed: max | most_recent
  bool param_gather = false;  // weights kept and all-gathered in FP8 (distributed optimizer)
  bool wgrad = true;          // weight-gradient GEMMs in FP8 (Megatron's --no-fp8-wgrad: off)
  bool first_last_layers_bf16 = false;
  int num_layers_at_start_in_bf16 = 1;  // with first_last_layers_bf16
  int num_layers_at_end_in_bf16 = 1;

  bool operator==(const Fp8Config&) const = default;
  bool enabled() const { return !format.empty(); }
  bool hybrid() const { return format == "hybrid"; }
  // Whether global layer `layer` (0-based) of `num_layers` runs its linear layers in FP8.
  bool layer_in_fp8(int layer, int num_layers) const {
    if (!enabled()) return false;
    if (!first_last_layers_bf16) return true;
    return layer >= num_layers_at_start_in_bf16 && layer < num_layers - num_layers_at_end_in_bf16;
  }
};

}  // namespace tandem
