// A library of the CUDA toolkit opened at run time (dlopen) rather than linked, and its entry
// points resolved: cuBLAS and cuBLASLt (cublas_library.hpp, cublaslt_library.hpp). Linking
// them costs every process half a second of start-up, GEMM or not.
#pragma once

#include <dlfcn.h>

#include <string>

#include "kernels/cuda/check.hpp"

namespace tandem::kernels::cuda {

// `file` (e.g. libcublas.so.13), searched first on the loader's path (LD_LIBRARY_PATH,
// RUNPATH, ld.so.cache), then in the library folder of the toolkit tandem was built with;
// RTLD_LOCAL, never closed. Throws CudaError with both reasons when neither opens.
void* open_toolkit_library(const std::string& file, const std::string& name);

// f = the library's `symbol`, or CudaError naming the library, the symbol and dlerror().
template <typename F>
void resolve_symbol(void* handle, const char* symbol, F& f, const std::string& file) {
  f = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!f) throw CudaError(file + " has no " + symbol + ": " + dlerror());
}

}  // namespace tandem::kernels::cuda
