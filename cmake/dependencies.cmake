# Third-party dependencies, all from Debian packages. SimGrid 3.32 ships no CMake
# package config in Debian, so it is found through pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SimGrid REQUIRED IMPORTED_TARGET simgrid>=3.32)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
if(TANDEM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TANDEM_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# CUDA, cuBLAS and NCCL are optional: AUTO turns them on when nvcc is found.
set(TANDEM_WITH_CUDA OFF)
if(NOT TANDEM_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  # tandem's CUDA code targets A100 (sm_80) and H100 (sm_90) unless told otherwise.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures to compile for")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      set(TANDEM_WITH_CUDA ON)
      if(NOT CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES MATCHES "^(52|75)$")
        set(CMAKE_CUDA_ARCHITECTURES 80 90)
      endif()
      # C++20 in .cu files too. CMake 3.25 does not know nvcc 13's flag for the CUDA20
      # dialect (newer CMake does): tell it.
      if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      endif()
      set(CMAKE_CUDA_STANDARD 20)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    elseif(TANDEM_CUDA STREQUAL "ON")
      message(FATAL_ERROR "TANDEM_CUDA=ON but NCCL (nccl.h, libnccl) was not found next to the CUDA toolkit")
    endif()
  elseif(TANDEM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TANDEM_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

# libsimgrid also exports the MPI_* symbols (SMPI), and the dynamic linker binds each
# symbol to the first library that defines it: a binary linking both must name Open MPI's
# libmpi before libsimgrid. Link order of imported targets is CMake's to choose, so the
# library goes into the link options, which precede every library on the command line.
function(tandem_link_mpi_before_simgrid target)
  target_link_options(${target} PRIVATE "LINKER:--no-as-needed" "${MPI_mpi_LIBRARY}"
    "LINKER:--as-needed")
endfunction()
