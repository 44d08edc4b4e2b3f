// The cuda binding's caching allocator, as PyTorch's CUDACachingAllocator in miniature:
// cudaMalloc is slow and synchronising, and a training step frees and re-allocates the
// same activation sizes every microbatch, so freed blocks are kept, per size class, for
// reuse. The MemoryTracker is not involved: it counts tensor bytes (what the model asked
// for, the figure the cpu binding and the simulator report), not cached blocks.
//
// Stream safety: a tensor may be freed while kernels that use it are still queued on some
// stream. A freed block therefore records an event on every live stream of its device
// (streams register themselves here) and is handed out again only once all those events
// have completed; a request that finds no such block gets a fresh cudaMalloc. When
// cudaMalloc runs out of memory, the pool waits for its pending blocks, frees every
// cached block and tries once more before throwing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace tandem {

class DeviceMemoryPool {
 public:
  explicit DeviceMemoryPool(int device);
  ~DeviceMemoryPool();  // frees the cached blocks (blocks still handed out leak by design)
  DeviceMemoryPool(const DeviceMemoryPool&) = delete;
  DeviceMemoryPool& operator=(const DeviceMemoryPool&) = delete;

  // Bytes a request of `bytes` occupies: a multiple of 512 (at least 512).
  static std::size_t size_class(std::size_t bytes);

  void* take(std::size_t bytes);              // a block of size_class(bytes)
  void give(std::size_t bytes, void* block);  // back to the cache; never throws
  std::size_t cached_bytes() const;           // blocks held for reuse

  void add_stream(cudaStream_t s);
  void remove_stream(cudaStream_t s);

 private:
  struct FreeBlock {
    void* block = nullptr;
    std::vector<cudaEvent_t> pending;  // one per stream live at release
  };
  bool ready(const FreeBlock& b) const;
  void recycle_events(FreeBlock& b);
  void release_cached();  // waits for pending events, cudaFree's every cached block

  int device_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, FreeBlock> free_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace tandem
