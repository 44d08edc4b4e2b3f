// CudaStream and CudaEvent; see cuda_stream.hpp.
#include "exec/cuda/cuda_stream.hpp"

#include <stdexcept>

#include "exec/cuda/device_memory_pool.hpp"
#include "kernels/cuda/check.hpp"

namespace tandem {

CudaEvent::CudaEvent() {
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  (void)cudaEventDestroy(event_);
}

void CudaEvent::synchronize() {
  TANDEM_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool CudaEvent::query() {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  TANDEM_CUDA_CHECK(status);
  return true;
}

CudaStream::CudaStream(std::string name, std::shared_ptr<DeviceMemoryPool> pool)
    : name_(std::move(name)), pool_(std::move(pool)) {
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  pool_->add_stream(stream_);
}

CudaStream::~CudaStream() {
  pool_->remove_stream(stream_);
  (void)cudaStreamDestroy(stream_);  // work still queued completes; the handle goes
}

void CudaStream::record(Event& event) {
  TANDEM_CUDA_CHECK(cudaEventRecord(cuda_event_of(event), stream_));
}

void CudaStream::wait(Event& event) {
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda_event_of(event), 0));
}

void CudaStream::synchronize() {
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

cudaStream_t cuda_stream_of(Stream& s) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  if (!cs)
    throw std::invalid_argument("stream '" + std::string(s.name()) +
                                "' was not made by a CudaDevice");
  return cs->handle();
}

cudaEvent_t cuda_event_of(Event& e) {
  auto* ce = dynamic_cast<CudaEvent*>(&e);
  if (!ce) throw std::invalid_argument("event was not made by a CudaDevice");
  return ce->handle();
}

}  // namespace tandem
