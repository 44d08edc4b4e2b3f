// Stream and Event of the cuda binding, one to one onto cudaStream_t and cudaEvent_t:
// record = cudaEventRecord, wait = cudaStreamWaitEvent (the GPU waits, the host goes on),
// synchronize = cudaStreamSynchronize / cudaEventSynchronize. Streams are non-blocking
// (they never serialise with the legacy default stream) and register with the device's
// memory pool, so a freed block is reused only after every stream is past its last use.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "core/device.hpp"

namespace tandem {

class DeviceMemoryPool;

class CudaEvent final : public Event {
 public:
  CudaEvent();
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void synchronize() override;
  bool query() override;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, std::shared_ptr<DeviceMemoryPool> pool);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  std::string_view name() const override { return name_; }
  void record(Event& event) override;
  void wait(Event& event) override;
  void synchronize() override;
  cudaStream_t handle() const { return stream_; }

 private:
  std::string name_;
  std::shared_ptr<DeviceMemoryPool> pool_;
  cudaStream_t stream_ = nullptr;
};

// The CUDA handles behind core's interfaces; throw std::invalid_argument for a stream or
// event that another binding made.
cudaStream_t cuda_stream_of(Stream& s);
cudaEvent_t cuda_event_of(Event& e);

}  // namespace tandem
