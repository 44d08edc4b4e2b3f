#include "sim/device_options.hpp"

#include "sim/fp8_gpu_rules.hpp"

namespace tandem::sim {

DType compute_dtype(const Scenario& s) {
  if (s.training.bf16) return DType::bf16;
  if (s.training.fp16) return DType::fp16;
  return DType::fp32;
}

SimDeviceOptions device_options(const Scenario& s, const Topology& topology) {
  const std::optional<int> capability = compute_capability(topology.gpu);
  return {.compute_dtype = compute_dtype(s),
          .host = host_costs(topology.gpu, megatron_grad_copy_kernels(s.training)),
          .fp8_transposed_copy = capability.value_or(0) < 100,
          .fused_attention_library =
              fused_attention_library(s.model, capability) == FusedAttentionLibrary::flash_attn
                  ? "flash_attn"
                  : "",
          .loss_scale_check_in_optimizer = s.training.deepspeed,
          .cross_entropy = !s.training.cross_entropy_loss_fusion ? CrossEntropyKernels::megatron
                           : s.training.cross_entropy_fusion_impl == "te"
                               ? CrossEntropyKernels::transformer_engine
                               : CrossEntropyKernels::megatron_fused};
}

}  // namespace tandem::sim
