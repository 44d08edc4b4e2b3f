// The small pieces of topology.hpp that are code: which peak rate an op's dtype gets,
// fabric names, which NIC a GPU sends through, and how many GPUs share NVLink.
#include "topology/topology.hpp"

#include <stdexcept>

namespace tandem {

FlopsPerSecond GpuSpec::peak(Precision p) const {
  switch (p) {
    case Precision::fp32:
      return peak_fp32;
    case Precision::tf32:
      return peak_tf32;
    case Precision::bf16:
      return peak_bf16;
    case Precision::fp16:
      return peak_fp16;
    case Precision::fp8:
      return peak_fp8;
    case Precision::fp4:
      return peak_fp4;
  }
  throw std::logic_error("unknown precision");
}

FlopsPerSecond GpuSpec::peak(DType dtype) const {
  switch (dtype) {
    case DType::bf16:
      return peak_bf16;
    case DType::fp16:
      return peak_fp16;
    case DType::fp32:
    case DType::int32:
    case DType::int64:
      return peak_fp32;
  }
  throw std::logic_error("unknown dtype");
}

std::string_view fabric_kind_name(FabricKind k) {
  switch (k) {
    case FabricKind::fat_tree:
      return "fat-tree";
    case FabricKind::rail_optimized:
      return "rail-optimized";
  }
  throw std::logic_error("unknown fabric kind");
}

int nic_of_gpu(const Topology& t, int local_rank) {
  if (local_rank < 0 || local_rank >= t.node.gpus_per_node)
    throw std::out_of_range("local rank " + std::to_string(local_rank) + " outside a node of " +
                            std::to_string(t.node.gpus_per_node) + " GPUs");
  if (t.fabric.nics_per_node < 1) throw std::out_of_range("topology " + t.name + " has no NICs");
  // 8 GPUs, 8 NICs: GPU g → NIC g; 8 GPUs, 4 NICs: GPUs 2i and 2i+1 share NIC i.
  const auto nic =
      static_cast<std::int64_t>(local_rank) * t.fabric.nics_per_node / t.node.gpus_per_node;
  return static_cast<int>(nic);
}

int gpus_per_nvlink_domain(const Topology& t) {
  return t.nvlink_domain.gpus > 0 ? t.nvlink_domain.gpus : t.node.gpus_per_node;
}

}  // namespace tandem
