// cublas(): dlopen libcublas.so.<major> once and resolve the entry points of CublasLibrary.
#include "kernels/cuda/cublas_library.hpp"

#include <dlfcn.h>

#include <string>

#include "kernels/cuda/check.hpp"

namespace tandem::kernels::cuda {
namespace {

const std::string kFile = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);

template <typename F>
void resolve(void* handle, const char* symbol, F& f) {
  f = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!f) throw CudaError("cuBLAS (" + kFile + ") has no " + symbol + ": " + dlerror());
}

CublasLibrary open_cublas() {
  // RTLD_LOCAL: its symbols stay out of the global namespace, as only this table uses them.
  // First the loader's search path (LD_LIBRARY_PATH, RUNPATH, ld.so.cache), then the
  // library folder of the toolkit tandem was built with.
  void* handle = dlopen(kFile.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const std::string first = dlerror();
    const std::string path = std::string(TANDEM_CUDA_LIBRARY_DIR) + "/" + kFile;
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      throw CudaError("cannot open cuBLAS: " + first + "; nor " + path + ": " + dlerror() +
                      "; put the CUDA toolkit's library folder on LD_LIBRARY_PATH");
  }
  CublasLibrary l{};
  resolve(handle, "cublasCreate_v2", l.create);
  resolve(handle, "cublasDestroy_v2", l.destroy);
  resolve(handle, "cublasSetStream_v2", l.set_stream);
  resolve(handle, "cublasSetMathMode", l.set_math_mode);
  resolve(handle, "cublasGetProperty", l.get_property);
  resolve(handle, "cublasGetStatusName", l.status_name);
  resolve(handle, "cublasGetStatusString", l.status_string);
  resolve(handle, "cublasGemmStridedBatchedEx", l.gemm_strided_batched_ex);
  return l;  // the handle is never closed: the table points into the library
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary library = open_cublas();  // thread-safe, once per process
  return library;
}

}  // namespace tandem::kernels::cuda
