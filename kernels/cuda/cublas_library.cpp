// cublas(): dlopen libcublas.so.<major> once and resolve the entry points of CublasLibrary.
#include "kernels/cuda/cublas_library.hpp"

#include <string>

#include "kernels/cuda/toolkit_library.hpp"

namespace tandem::kernels::cuda {
namespace {

CublasLibrary open_cublas() {
  const std::string file = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* handle = open_toolkit_library(file, "cuBLAS");
  auto resolve = [&](const char* symbol, auto& f) { resolve_symbol(handle, symbol, f, file); };
  CublasLibrary l{};
  resolve("cublasCreate_v2", l.create);
  resolve("cublasDestroy_v2", l.destroy);
  resolve("cublasSetStream_v2", l.set_stream);
  resolve("cublasSetMathMode", l.set_math_mode);
  resolve("cublasGetProperty", l.get_property);
  resolve("cublasGetStatusName", l.status_name);
  resolve("cublasGetStatusString", l.status_string);
  resolve("cublasGemmStridedBatchedEx", l.gemm_strided_batched_ex);
  return l;  // the handle is never closed: the table points into the library
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary library = open_cublas();  // thread-safe, once per process
  return library;
}

}  // namespace tandem::kernels::cuda
