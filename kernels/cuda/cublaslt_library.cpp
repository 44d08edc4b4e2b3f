// cublaslt(): dlopen libcublasLt.so.<major> once and resolve the entry points of
// CublasLtLibrary (the same search as cublas()).
#include "kernels/cuda/cublaslt_library.hpp"

#include <string>

#include "kernels/cuda/toolkit_library.hpp"

namespace tandem::kernels::cuda {
namespace {

CublasLtLibrary open_cublaslt() {
  const std::string file = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* handle = open_toolkit_library(file, "cuBLASLt");
  auto resolve = [&](const char* symbol, auto& f) { resolve_symbol(handle, symbol, f, file); };
  CublasLtLibrary l{};
  resolve("cublasLtCreate", l.create);
  resolve("cublasLtDestroy", l.destroy);
  resolve("cublasLtGetVersion", l.get_version);
  resolve("cublasLtMatmulDescCreate", l.matmul_desc_create);
  resolve("cublasLtMatmulDescDestroy", l.matmul_desc_destroy);
  resolve("cublasLtMatmulDescSetAttribute", l.matmul_desc_set_attribute);
  resolve("cublasLtMatmulDescGetAttribute", l.matmul_desc_get_attribute);
  resolve("cublasLtMatrixLayoutCreate", l.matrix_layout_create);
  resolve("cublasLtMatrixLayoutDestroy", l.matrix_layout_destroy);
  resolve("cublasLtMatrixLayoutGetAttribute", l.matrix_layout_get_attribute);
  resolve("cublasLtMatmulPreferenceCreate", l.preference_create);
  resolve("cublasLtMatmulPreferenceDestroy", l.preference_destroy);
  resolve("cublasLtMatmulPreferenceSetAttribute", l.preference_set_attribute);
  resolve("cublasLtMatmulPreferenceGetAttribute", l.preference_get_attribute);
  resolve("cublasLtMatmulAlgoGetHeuristic", l.algo_get_heuristic);
  resolve("cublasLtMatmul", l.matmul);
  return l;  // never closed: the table points into the library
}

}  // namespace

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary library = open_cublaslt();
  return library;
}

}  // namespace tandem::kernels::cuda
