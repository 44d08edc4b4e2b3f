// DeviceMemoryPool; see device_memory_pool.hpp.
#include "exec/cuda/device_memory_pool.hpp"

#include <algorithm>
#include <string>

#include "kernels/cuda/check.hpp"

namespace tandem {

DeviceMemoryPool::DeviceMemoryPool(int device) : device_(device) {}

DeviceMemoryPool::~DeviceMemoryPool() {
  // No throwing here: at process exit the CUDA runtime may already be unloading.
  std::lock_guard lock(mutex_);
  for (auto& [size, b] : free_) {
    for (cudaEvent_t e : b.pending) {
      (void)cudaEventSynchronize(e);
      (void)cudaEventDestroy(e);
    }
    (void)cudaFree(b.block);
  }
  for (cudaEvent_t e : spare_events_) (void)cudaEventDestroy(e);
}

std::size_t DeviceMemoryPool::size_class(std::size_t bytes) {
  constexpr std::size_t kQuantum = 512;
  return std::max<std::size_t>(kQuantum, (bytes + kQuantum - 1) / kQuantum * kQuantum);
}

bool DeviceMemoryPool::ready(const FreeBlock& b) const {
  return std::all_of(b.pending.begin(), b.pending.end(),
                     [](cudaEvent_t e) { return cudaEventQuery(e) == cudaSuccess; });
}

void DeviceMemoryPool::recycle_events(FreeBlock& b) {
  spare_events_.insert(spare_events_.end(), b.pending.begin(), b.pending.end());
  b.pending.clear();
}

void* DeviceMemoryPool::take(std::size_t bytes) {
  const std::size_t size = size_class(bytes);
  {
    std::lock_guard lock(mutex_);
    auto [first, last] = free_.equal_range(size);
    for (auto it = first; it != last; ++it) {
      if (!ready(it->second)) continue;
      void* block = it->second.block;
      recycle_events(it->second);
      free_.erase(it);
      return block;
    }
  }
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  void* block = nullptr;
  cudaError_t status = cudaMalloc(&block, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    {
      std::lock_guard lock(mutex_);
      release_cached();
    }
    status = cudaMalloc(&block, size);
  }
  if (status == cudaErrorMemoryAllocation)
    throw kernels::cuda::CudaError("out of GPU memory: cudaMalloc of " + std::to_string(size) +
                                   " bytes failed on device " + std::to_string(device_) +
                                   " even after freeing the allocator's cache");
  TANDEM_CUDA_CHECK(status);
  return block;
}

void DeviceMemoryPool::give(std::size_t bytes, void* block) {
  std::lock_guard lock(mutex_);
  FreeBlock b{block, {}};
  for (cudaStream_t s : streams_) {
    cudaEvent_t e = nullptr;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaStreamSynchronize(s);  // no event to spare: make the block safe by waiting
      continue;
    }
    if (cudaEventRecord(e, s) != cudaSuccess) {
      (void)cudaStreamSynchronize(s);
      spare_events_.push_back(e);
      continue;
    }
    b.pending.push_back(e);
  }
  free_.emplace(size_class(bytes), std::move(b));
}

std::size_t DeviceMemoryPool::cached_bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (const auto& [size, b] : free_) total += size;
  return total;
}

void DeviceMemoryPool::add_stream(cudaStream_t s) {
  std::lock_guard lock(mutex_);
  streams_.push_back(s);
}

void DeviceMemoryPool::remove_stream(cudaStream_t s) {
  std::lock_guard lock(mutex_);
  streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

void DeviceMemoryPool::release_cached() {
  for (auto& [size, b] : free_) {
    for (cudaEvent_t e : b.pending) (void)cudaEventSynchronize(e);
    recycle_events(b);
    (void)cudaFree(b.block);
  }
  free_.clear();
}

}  // namespace tandem
