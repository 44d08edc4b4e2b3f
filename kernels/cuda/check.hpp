// Error checks for every CUDA runtime and cuBLAS call: a failed call throws CudaError
// naming the call as written, the file and line it was made from, and the library's own
// error name and message. Library code never exits; main decides.
//   TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
//   TANDEM_CUBLAS_CHECK(cublasGemmEx(...));
//   TANDEM_CUDA_CHECK_LAUNCH();  // after a <<<…>>> launch: a bad configuration shows here
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace tandem::kernels::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "cudaMalloc(&p, n) failed at exec/cuda/cuda_memory.cpp:42: cudaErrorMemoryAllocation
// (out of memory)"
[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t code, const char* call, const char* file,
                                     int line);

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw_cuda_error(code, call, file, line);
}

inline void check_cublas(cublasStatus_t code, const char* call, const char* file, int line) {
  if (code != CUBLAS_STATUS_SUCCESS) throw_cublas_error(code, call, file, line);
}

}  // namespace tandem::kernels::cuda

#define TANDEM_CUDA_CHECK(call) \
  ::tandem::kernels::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define TANDEM_CUBLAS_CHECK(call) \
  ::tandem::kernels::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define TANDEM_CUDA_CHECK_LAUNCH() \
  ::tandem::kernels::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
