// A copy of `width` columns of every row of one row-major matrix into columns of another,
// or added to them: where element e of the copy reads and writes. Shared by the CPU loop
// (kernels/cpu/elementwise.cpp) and the CUDA kernel (kernels/cuda/elementwise.cu).
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

struct ColumnCopy {
  std::int64_t rows = 0, width = 0;
  std::int64_t from_ld = 0, from_column = 0;  // elements per row of the source; first column
  std::int64_t to_ld = 0, to_column = 0;      // the same of the destination
  bool accumulate = false;                    // add into the destination instead of writing
  TANDEM_HOST_DEVICE std::int64_t elements() const { return rows * width; }
  TANDEM_HOST_DEVICE std::int64_t from(std::int64_t e) const {
    return e / width * from_ld + from_column + e % width;
  }
  TANDEM_HOST_DEVICE std::int64_t to(std::int64_t e) const {
    return e / width * to_ld + to_column + e % width;
  }
};

}  // namespace tandem::kernels::math
