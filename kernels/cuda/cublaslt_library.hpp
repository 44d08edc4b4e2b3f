// cuBLASLt opened on first use (dlopen), as cuBLAS is (cublas_library.hpp) and for the same
// reason: libcublasLt's initialisers cost every process that links it half a second of
// start-up. Only an FP8 GEMM on a CudaDevice (and the descriptor tests) open it.
#pragma once

#include <cublasLt.h>

namespace tandem::kernels::cuda {

// The cuBLASLt entry points tandem calls, resolved in libcublasLt.so.<CUBLAS_VER_MAJOR>.
// The descriptor calls run without a GPU; create() needs one.
struct CublasLtLibrary {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtGetVersion) get_version;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&::cublasLtMatmulDescGetAttribute) matmul_desc_get_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy;
  decltype(&::cublasLtMatrixLayoutGetAttribute) matrix_layout_get_attribute;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&::cublasLtMatmulPreferenceGetAttribute) preference_get_attribute;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&::cublasLtMatmul) matmul;
};

// The library, opened on the first call and kept for the life of the process; throws
// CudaError naming the file and dlerror()'s reason when it cannot be opened or lacks an
// entry point.
const CublasLtLibrary& cublaslt();

}  // namespace tandem::kernels::cuda
