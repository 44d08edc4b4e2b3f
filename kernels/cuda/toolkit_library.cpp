#include "kernels/cuda/toolkit_library.hpp"

namespace tandem::kernels::cuda {

void* open_toolkit_library(const std::string& file, const std::string& name) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle) return handle;
  const std::string first = dlerror();
  const std::string path = std::string(TANDEM_CUDA_LIBRARY_DIR) + "/" + file;
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw CudaError("cannot open " + name + ": " + first + "; nor " + path + ": " + dlerror() +
                    "; put the CUDA toolkit's library folder on LD_LIBRARY_PATH");
  return handle;
}

}  // namespace tandem::kernels::cuda
