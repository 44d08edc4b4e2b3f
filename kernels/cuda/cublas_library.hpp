// cuBLAS opened on first use (dlopen) instead of linked. Linking libcublas costs every
// process that links it 0.45-0.65 s of start-up (libcublasLt's static initialisers and the
// page faults of its 540 MB, measured on a 2-core EPYC VM), whether or not it runs a GEMM;
// and the cuda binding is built into tandem's one binary, so every `tandem simulate` and
// every rank of an MPI test on CPUs paid it. Only a CudaDevice (and `tandem info`) opens it.
#pragma once

#include <cublas_v2.h>

namespace tandem::kernels::cuda {

// The cuBLAS entry points tandem calls, resolved in libcublas.so.<CUBLAS_VER_MAJOR> (the
// major version of the headers it was compiled with).
struct CublasLibrary {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasGetProperty) get_property;
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
  // cublasGemmStridedBatchedEx with a cublasComputeType_t (the header also declares an
  // inline overload taking a cudaDataType, so its type is spelled out).
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long, const void*, cudaDataType, int,
                                            long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
};

// The library, opened on the first call and kept for the life of the process (as the
// dynamic linker would keep it); throws CudaError naming the file and dlerror()'s reason
// when it cannot be opened or lacks an entry point.
const CublasLibrary& cublas();

}  // namespace tandem::kernels::cuda
