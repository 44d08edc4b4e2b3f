// Live and peak byte accounting shared by every allocator (cpu, cuda, sim). Because the
// three bindings count through this one type, the simulator's predicted high-water mark
// for a rank can equal the cpu binding's measured one to the byte.
//
// Each allocation says what it holds (MemoryUse, given to Device::allocate by the step), and
// the tracker keeps, beside the peak, what each use held at that moment: the breakdown of
// the high-water mark that tandem simulate prints.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <string_view>

#include "core/units.hpp"

namespace tandem {

// What an allocation holds. activations: everything the step allocates without saying
// otherwise (a layer's saved inputs, activation gradients, workspaces, logits).
enum class MemoryUse : int {
  activations,
  weights,        // the model's parameters as the layers read them (bf16/fp16/fp32, or FP8)
  gradients,      // the gradient buffer the backward accumulates into, and its fp32 staging
  optimizer,      // the optimizer's state: fp32 main parameters, Adam's two moments
  fp8,            // weights quantized for FP8 once a step (reused by every microbatch), and
                  // the FP8 scaling state (amax histories, scales)
  communication,  // scratch of the gradient reduction and the parameter gather (the last)
};
inline constexpr std::size_t kMemoryUses = static_cast<std::size_t>(MemoryUse::communication) + 1;
std::string_view memory_use_name(MemoryUse use);

using MemoryByUse = std::array<Bytes, kMemoryUses>;

class MemoryTracker {
 public:
  void on_allocate(Bytes b, MemoryUse use = MemoryUse::activations);
  void on_release(Bytes b, MemoryUse use = MemoryUse::activations);
  Bytes live() const;
  Bytes peak() const;
  // Bytes of each use live when the high-water mark was reached (they sum to peak()).
  MemoryByUse peak_by_use() const;
  MemoryByUse live_by_use() const;
  void reset_peak();  // peak := live, e.g. at the start of an iteration

 private:
  mutable std::mutex mutex_;
  Bytes live_{0};
  Bytes peak_{0};
  MemoryByUse live_by_use_{};
  MemoryByUse peak_by_use_{};
};

}  // namespace tandem
