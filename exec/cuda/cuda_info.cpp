// cuda_availability and cuda_versions; see cuda_info.hpp.
#include "exec/cuda/cuda_info.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace tandem {

namespace {

// 13000 → "13.0"
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

CudaAvailability cuda_availability() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status)};
  }
  if (count == 0) return {0, "cudaGetDeviceCount found no CUDA device"};
  return {count, ""};
}

std::string cuda_versions() {
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  int major = 0, minor = 0, patch = 0;
  (void)cublasGetProperty(MAJOR_VERSION, &major);
  (void)cublasGetProperty(MINOR_VERSION, &minor);
  (void)cublasGetProperty(PATCH_LEVEL, &patch);
  int nccl = 0;
  (void)ncclGetVersion(&nccl);
  // NCCL ≥ 2.9 encodes major·10000 + minor·100 + patch.
  const std::string nccl_text = std::to_string(nccl / 10000) + "." +
                                std::to_string((nccl % 10000) / 100) + "." +
                                std::to_string(nccl % 100);
  return "CUDA runtime " + cuda_version_string(runtime) + ", driver " +
         (driver ? cuda_version_string(driver) : std::string("none")) + ", cuBLAS " +
         std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) +
         ", NCCL " + nccl_text;
}

}  // namespace tandem
