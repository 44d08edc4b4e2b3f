// cuda_availability and cuda_versions; see cuda_info.hpp.
#include "exec/cuda/cuda_info.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cublas_library.hpp"

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
  std::string cublas_text;
  try {
    const auto& blas = kernels::cuda::cublas();
    int major = 0, minor = 0, patch = 0;
    (void)blas.get_property(MAJOR_VERSION, &major);
    (void)blas.get_property(MINOR_VERSION, &minor);
    (void)blas.get_property(PATCH_LEVEL, &patch);
    cublas_text = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  } catch (const kernels::cuda::CudaError& e) {
    cublas_text = std::string("not loadable (") + e.what() + ")";
  }
  int nccl = 0;
  (void)ncclGetVersion(&nccl);
  // NCCL ≥ 2.9 encodes major·10000 + minor·100 + patch.
  const std::string nccl_text = std::to_string(nccl / 10000) + "." +
                                std::to_string((nccl % 10000) / 100) + "." +
                                std::to_string(nccl % 100);
  return "CUDA runtime " + cuda_version_string(runtime) + ", driver " +
         (driver ? cuda_version_string(driver) : std::string("none")) + ", cuBLAS " + cublas_text +
         ", NCCL " + nccl_text;
}

}  // namespace tandem
