// What the cuda binding can use on this machine, asked at run time: the number of GPUs
// (or why there are none: no driver, no device, …) and the versions of the CUDA runtime,
// the driver, cuBLAS and NCCL, for `tandem info` and for tests that skip without a GPU.
// No function here throws; none needs a GPU.
#pragma once

#include <string>

namespace tandem {

struct CudaAvailability {
  int devices = 0;     // GPUs visible to this process
  std::string reason;  // why devices is 0 ("cudaErrorNoDevice: no CUDA-capable device …")
};

CudaAvailability cuda_availability();

// "CUDA runtime 13.0, driver 12.8 (or: no driver), cuBLAS 13.0.2, NCCL 2.28.9"
std::string cuda_versions();

}  // namespace tandem
