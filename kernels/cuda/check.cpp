// The messages of check.hpp's CudaError.
#include "kernels/cuda/check.hpp"

#include "kernels/cuda/cublas_library.hpp"

namespace tandem::kernels::cuda {

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  // Clear a sticky-free error so the next check does not report this one again.
  if (code != cudaErrorMemoryAllocation) (void)cudaGetLastError();
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")");
}

void throw_cublas_error(cublasStatus_t code, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cublas().status_name(code) + " (" + cublas().status_string(code) + ")");
}

}  // namespace tandem::kernels::cuda
