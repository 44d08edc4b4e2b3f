// The hardware a simulation runs on: one GPU model, a node of several of them joined by
// NVLink/NVSwitch, optionally an NVLink domain of several nodes (GB200 NVL72: 18 trays of 4
// GPUs on one NVSwitch fabric), and a fabric of NICs between nodes. Plain structs in SI units (the
// unit types of core/units.hpp); presets and files give them in the units datasheets use (TFLOP/s,
// GB/s, µs) and topology_json.cpp converts. Every number carries its source, because a simulator is
// only as good as the figures it is fed:
//
//   Topology dgx = load_topology("dgx-a100-80g");
//   dgx.gpu.peak(DType::bf16)            // FlopsPerSecond(312e12)
//   dgx.node.gpu_link.bandwidth          // BytesPerSecond(300e9), per direction per GPU
//   dgx.fabric.nic.bandwidth             // BytesPerSecond(25e9), per direction per NIC
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "core/units.hpp"

namespace tandem {

// One direction of a link: a flow alone on it takes latency + bytes / bandwidth.
struct LinkSpec {
  BytesPerSecond bandwidth{};  // per direction
  Seconds latency{};           // end to end between the two endpoints the link joins

  bool operator==(const LinkSpec&) const = default;
};

// Where each number came from: field name (as in the JSON) → datasheet, paper or
// "estimate: …" for numbers to be replaced by calibration.
using Sources = std::map<std::string, std::string>;

// The arithmetic rates a GPU offers: tf32 only for fp32 GEMMs that opt into it; fp8 and fp4
// only on GPUs whose tensor cores have them (Hopper: fp8; Blackwell: fp8 and fp4).
enum class Precision { fp32, tf32, bf16, fp16, fp8, fp4 };

struct GpuSpec {
  std::string name;                   // "A100-SXM4-80GB"
  FlopsPerSecond peak_fp32{};         // dense, CUDA cores (no tensor cores)
  FlopsPerSecond peak_tf32{};         // dense, tensor cores
  FlopsPerSecond peak_bf16{};         // dense, tensor cores
  FlopsPerSecond peak_fp16{};         // dense, tensor cores
  FlopsPerSecond peak_fp8{};          // dense, tensor cores; 0: none (A100)
  FlopsPerSecond peak_fp4{};          // dense, tensor cores; 0: none (A100, H100)
  BytesPerSecond memory_bandwidth{};  // HBM, read + write combined
  Bytes memory{};                     // device memory capacity
  int sm_count = 0;                   // streaming multiprocessors (CPU: cores per rank)
  Seconds kernel_launch{};            // fixed cost added to every op (one kernel launch)
  // The fraction of the tensor peak the best GEMM kernels (cuBLAS) reach on large,
  // tile-aligned shapes; tile and wave quantisation come on top (sim/cost_model.hpp).
  double gemm_peak_fraction = 1.0;
  // The same for a 16-bit GEMM with a dimension that is not a multiple of 8 elements (16
  // bytes): cuBLAS then cannot use its vectorised tensor-core kernels. 0: no penalty
  // (gemm_peak_fraction).
  double gemm_unaligned_peak_fraction = 0;
  // The same for a GEMM on FP8 operands (E4M3 / E5M2 with scales), of the FP8 tensor peak:
  // cuBLASLt's FP8 kernels reach a smaller share of their (twice as high) peak than the 16-bit
  // ones do of theirs. 0: gemm_peak_fraction.
  double gemm_fp8_peak_fraction = 0;
  // The SM clock a whole training step sustains, as a fraction of the clock the compute
  // figures above were measured at (short GEMM and attention microbenchmarks run boosted; a
  // step at the power limit does not): scales every SM-bound rate (tensor and CUDA-core
  // FLOPs, L2 bandwidth), not HBM. 0: 1, for figures taken from training runs already.
  double sustained_clock_fraction = 0;
  // The fraction of the tensor peak fused attention approaches on long launches (many heads,
  // long sequences; sim/op_cost_llama.hpp scales it by a launch's shape), forward and
  // backward: cuDNN's kernel (Transformer Engine's FusedAttention; 0: the flash-attn
  // figures below) and the flash-attn package's (FlashAttention-2, which TE's
  // FlashAttention backend and Megatron's use_flash_attn run; 0: FlashAttention-2's on A100,
  // sim/op_cost_llama.hpp).
  double fused_attention_forward_fraction = 0;
  double fused_attention_backward_fraction = 0;
  double flash_attn_forward_fraction = 0;
  double flash_attn_backward_fraction = 0;
  // The fraction of memory_bandwidth a streaming kernel reaches (STREAM-like copies).
  double memory_peak_fraction = 1.0;
  int gemm_tile_m = 1;  // output tile of one thread block, rows
  int gemm_tile_n = 1;  // output tile of one thread block, columns
  // What each output tile costs besides its K loop (filling the operand pipeline, the
  // epilogue that converts and writes C), as that many more steps of K: a GEMM of small K
  // runs further below gemm_peak_fraction than one of large K. 0: none.
  double gemm_tile_fixed_k = 0;
  // L2 → SM bandwidth, all SMs together (read). With it, a GEMM whose tiles do not fill
  // one wave may run on smaller tiles or split K, each tile then limited by the operand
  // traffic its size implies (sim/cost_model.hpp rule 2b). 0: one tile shape only.
  BytesPerSecond l2_bandwidth{};
  LinkSpec pcie{};  // host ↔ GPU (upload, download), per direction
  // The host that issues the GPU's work (a Python framework over CUDA and NCCL). Every
  // kernel and collective is issued by it, one after the other; when kernels are shorter
  // than their issue, the stream starves (sim/sim_device.hpp: the host issue clock).
  // All default to 0 (an infinitely fast host).
  Seconds host_kernel_issue{};      // per kernel: framework dispatch + launch call
  Seconds host_collective_issue{};  // per collective or p2p group (torch.distributed + NCCL)
  Seconds host_microbatch{};        // fixed per microbatch (forward + backward of a chunk)
  Seconds host_iteration{};         // fixed per iteration (optimizer step, loss scaler, logs)
  // Per parameter tensor of the optimizer step (adam, the grad norm's sums): Megatron runs
  // these as multi-tensor kernels (apex multi_tensor_apply, torch._foreach), so the host
  // pays for putting a tensor in a list, not for a launch of its own.
  Seconds host_optimizer_tensor{};
  // Per attention forward or backward whose softmax runs as Megatron's PyTorch fallback
  // (sim/cost_model.hpp rule 3b), beyond its kernels' issue: the Python of the fallback.
  Seconds host_unfused_softmax{};
  // Per transformer layer pass (forward, recomputed forward, backward) under a per-layer
  // profiler's timestamps (TrainingConfig::host_layer_timestamps: vTrain's CUPTI flushes at
  // each layer's start and end): host time only, the GPU is not synchronized.
  Seconds host_layer_timestamp{};
  // Whether the host sits through a collective's Work::wait until the collective ends (as
  // torch.distributed does with TORCH_NCCL_BLOCKING_WAIT) or only orders the stream and
  // runs ahead (NCCL's default). Pipeline exchanges and synchronizes always stop it.
  bool host_waits_for_collectives = false;
  Sources sources;

  // The dense peak for an op computing in `dtype`: fp32 → the CUDA-core rate (cuBLAS
  // does not use TF32 unless asked), bf16/fp16 → tensor cores, integers → fp32 rate.
  FlopsPerSecond peak(DType dtype) const;
  // The dense peak of a precision; 0 for fp8 or fp4 on a GPU without them.
  FlopsPerSecond peak(Precision p) const;
  // sustained_clock_fraction, 1 when unset.
  double clock_factor() const {
    return sustained_clock_fraction > 0 ? sustained_clock_fraction : 1;
  }

  bool operator==(const GpuSpec&) const = default;
};

struct NodeSpec {
  int gpus_per_node = 1;
  std::string interconnect;  // "nvswitch", "nvlink" or "shared-memory"
  // Each GPU's link into the node's switch. latency is GPU to GPU (both halves).
  LinkSpec gpu_link{};
  // The spread of a node's step time around the mean (standard deviation over mean):
  // nodes run the same work at slightly different speeds from step to step, and a
  // data-parallel gradient sync across nodes waits for the slowest of them (stragglers).
  // 0: every node keeps pace.
  double node_time_spread = 0;
  Sources sources;

  bool operator==(const NodeSpec&) const = default;
};

// NVLink beyond one host: GPUs of several consecutive nodes (trays) on one NVSwitch fabric,
// so that they talk at NVLink speed and NCCL treats them as one node (its multi-node
// NVLink "clique": NVLS and rings over NVLink, NICs only between domains). GB200 NVL72: 18
// trays of 4 GPUs, gpus = 72. Absent (gpus = 0), a domain is one node, as on DGX systems.
struct NvlinkDomainSpec {
  int gpus = 0;  // GPUs per domain, a multiple of node.gpus_per_node; 0: the node
  Sources sources;

  bool operator==(const NvlinkDomainSpec&) const = default;
};

enum class FabricKind {
  fat_tree,        // every NIC to one non-blocking (or oversubscribed) tree
  rail_optimized,  // NIC i of every node on rail switch i; rails joined by a spine
};

struct FabricSpec {
  FabricKind kind = FabricKind::fat_tree;
  int nics_per_node = 0;  // compute NICs; GPU g uses NIC g · nics / gpus_per_node
  // One NIC, per direction. latency is NIC to NIC through the fabric (both halves).
  LinkSpec nic{};
  // Injection bandwidth of all NICs / core (fat tree) or spine (rail) bandwidth; 1 is
  // non-blocking, 2 means the core carries half of what the NICs can inject.
  double oversubscription = 1.0;
  Sources sources;

  bool operator==(const FabricSpec&) const = default;
};

// A figure per NCCL protocol: LL (8-byte flag+data stores, lowest latency), LL128
// (128-byte lines with a flag, NVLink-only fast path) and Simple (bulk copies with fences).
struct PerProtocol {
  double ll = 0;
  double ll128 = 0;
  double simple = 0;

  bool operator==(const PerProtocol&) const = default;
};

// A figure for one node, two nodes and more than two, as NCCL's tuner indexes its caps.
struct PerNodeCount {
  double one = 0;
  double two = 0;
  double more = 0;

  bool operator==(const PerNodeCount&) const = default;
};

// How NCCL runs collectives on this hardware (sim/nccl_model.hpp): the bandwidths its
// topology search finds, the achieved NIC rate, NVLink SHARP, and the constants of its
// tuner (NVIDIA/nccl src/graph/tuning.cc: base and per-hop latencies per algorithm and
// protocol, LL/LL128/tree bandwidth caps). Kept apart from NodeSpec and FabricSpec, which
// describe the wires; this describes the library on them. `enabled` false (a preset
// without an "nccl" object, e.g. cpu-host) keeps ideal rings at line rate.
struct NcclSpec {
  bool enabled = false;
  BytesPerSecond nvlink_bus{};          // ring bus bandwidth inside a node (nChannels · bwIntra)
  int channels = 1;                     // ring channels inside a node (NCCL_MIN/MAX_NCHANNELS)
  BytesPerSecond nic_bus{};             // what one NIC carries for NCCL's rings (bwInter)
  BytesPerSecond nvls_bus{};            // NVLink SHARP all-reduce bus bandwidth in a node; 0: none
  int nvls_bus_ranks = 8;               // the group nvls_bus was measured on (sim/nccl_model.cpp)
  BytesPerSecond p2p_nvlink{};          // NCCL send/recv per GPU in an NVLink domain; 0: line rate
  Seconds nvls_latency{};               // NVLS per-operation latency (tuning.cc hwLat NVLINK NVLS)
  PerNodeCount ll_max_bus;              // LL bus bandwidth cap, bytes/s (llMaxBws)
  double ll128_max_channel = 0;         // ring LL128 per-channel cap, bytes/s
  PerNodeCount tree_max_channel;        // tree per-channel cap, bytes/s
  PerNodeCount tree_ll128_max_channel;  // tree LL128 per-channel cap, bytes/s
  PerProtocol ring_base_latency, tree_base_latency;      // seconds per operation
  PerProtocol ring_nvlink_latency, tree_nvlink_latency;  // seconds per NVLink step
  PerProtocol ring_net_latency, tree_net_latency;        // seconds per network step
  Seconds net_overhead{};     // host proxy cost per network step (AMD 2 µs, Intel 1 µs)
  double ring_plateau = 1.0;  // multi-node ring Simple latency factor on large buffers
  // Measured nccl-tests all_reduce_perf bus bandwidth inside one node: group size →
  // (bytes, bytes/s) at increasing sizes. Where present it replaces the tuner's bandwidth
  // term for ring collectives of that size of group in one node (sim/nccl_model.hpp).
  std::map<int, std::vector<std::pair<double, double>>> measured_all_reduce_busbw;
  // The bus bandwidth a ring of fewer GPUs reaches inside one NVLink domain, as a fraction of
  // nvlink_bus (an 8-GPU ring's), measured: "all_gather" / "reduce_scatter" → group size →
  // fraction. Absent: every group at nvlink_bus.
  std::map<std::string, std::map<int, double>> ring_group_fraction;
  Sources sources;

  bool operator==(const NcclSpec&) const = default;
};

// A preset parameter that was fitted on end-to-end runs rather than measured or read from a
// datasheet: which published or measured set it saw, and which rows of it.
struct FittedParameter {
  std::string set;   // the set of runs it was fitted on, as tandem validate names sets
  std::string rows;  // which rows of that set, in words
  bool operator==(const FittedParameter&) const = default;
};

struct Topology {
  std::string name;  // "dgx-a100-80g"
  std::string description;
  GpuSpec gpu;
  NodeSpec node;
  NvlinkDomainSpec nvlink_domain;
  FabricSpec fabric;
  NcclSpec nccl;
  // "section.key" (e.g. "gpu.gemm_peak_fraction") → where it was fitted. Every other
  // number is measured or from a datasheet, as its section's "source" says.
  std::map<std::string, FittedParameter> fitted_on;

  bool operator==(const Topology&) const = default;
};

std::string_view fabric_kind_name(FabricKind k);  // "fat-tree", "rail-optimized"

// The NIC (0-based, within the node) GPU `local_rank` sends through.
int nic_of_gpu(const Topology& t, int local_rank);

// GPUs joined by NVLink: nvlink_domain.gpus, or the node's GPUs without a domain section.
int gpus_per_nvlink_domain(const Topology& t);

}  // namespace tandem
