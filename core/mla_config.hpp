// Multi-latent attention (DeepSeek-V2/V3) as Megatron-LM's arguments set it (its MLA
// argument group, read into Megatron-Core's MLATransformerConfig): the query path through
// a low-rank latent of q_lora_rank (absent: one projection), the keys and values through
// one latent of kv_lora_rank shared by every head, heads whose queries and keys are
// qk_head_dim + qk_pos_emb_head_dim wide and whose values are v_head_dim, and RoPE on the
// positional part only (a single positional key shared by the heads). A member of
// ModelConfig; the fields and their rules live in core/mla_fields.cpp. Off unless
// `multi_latent_attention`.
#pragma once

#include <optional>
#include <string>

namespace tandem {

struct MlaConfig {
  bool multi_latent_attention = false;
  std::optional<int> q_lora_rank;  // absent (Megatron's None): a plain linear_q_proj
  int kv_lora_rank = 32;           // Megatron's argument defaults
  int qk_head_dim = 128;
  int qk_pos_emb_head_dim = 64;
  int v_head_dim = 128;
  // rope | yarn; absent: Megatron's default, yarn for MLA (MLATransformerConfig) and rope
  // for other attention. YaRN at rotary_scaling_factor ≤ 1 is RoPE exactly (its
  // interpolated and extrapolated frequencies coincide and its concentration factor is 1);
  // above 1 the step does not model it and the scenario says so.
  std::optional<std::string> rope_type;
  double rotary_scaling_factor = 1.0;  // YaRN's; Megatron's argument default
  double mscale = 1.0;                 // YaRN's concentration factors
  double mscale_all_dim = 0.0;

  bool operator==(const MlaConfig&) const = default;
  bool enabled() const { return multi_latent_attention; }
  // Each head's query and key width (DeepSeek-V3: 128 + 64).
  int q_head_dim() const { return qk_head_dim + qk_pos_emb_head_dim; }
  // YaRN rotates all of a head's positional features; rope rotary_percent of them.
  bool yarn() const { return rope_type.value_or("yarn") == "yarn"; }
};

}  // namespace tandem
