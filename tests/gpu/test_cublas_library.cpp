// kernels/cuda/cublas_library: cuBLAS is not in a process that links the cuda binding until
// the first cublas() call opens it, and then its entry points answer. No GPU needed: these
// calls never touch a device, so the test runs wherever the binding is built.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "kernels/cuda/cublas_library.hpp"

namespace {

bool cublas_is_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublas") != std::string::npos;
}

TEST(CublasLibrary, OpenedOnFirstUseAndAnswers) {
  ASSERT_FALSE(cublas_is_mapped()) << "libcublas is mapped before the first cublas() call: "
                                      "something links it again";
  const auto& blas = tandem::kernels::cuda::cublas();
  EXPECT_TRUE(cublas_is_mapped());
  int major = -1;
  ASSERT_EQ(blas.get_property(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);  // the library opened is the one the headers describe
  EXPECT_STREQ(blas.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_EQ(&tandem::kernels::cuda::cublas(), &blas);  // opened once
}

}  // namespace
