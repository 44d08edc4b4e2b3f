// A copy of `width` columns of every row of one row-major matrix into columns of another,
// or added to them: where element e of the copy reads and writes. Shared by the CPU loop
// (kernels/cpu/elementwise.cpp) and the CUDA kernel (kernels/cuda/elementwise.cu).
//
// A row may hold `count` such blocks, block k at from_column + k·from_stride and
// to_column + k·to_stride (multi-latent attention's heads out of their projection into the
// attention's rows). A from_stride of 0 copies one block to every destination block (its
// one positional key into each head); a to_stride of 0 with count > 1 lands every block on
// the same columns, which then get their sum, added in block order (that key's gradient
// summed over the heads).
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

struct ColumnCopy {
  std::int64_t rows = 0, width = 0;
  std::int64_t from_ld = 0, from_column = 0;    // elements per row of the source; first column
  std::int64_t to_ld = 0, to_column = 0;        // the same of the destination
  bool accumulate = false;                      // add into the destination instead of writing
  std::int64_t count = 1;                       // blocks per row
  std::int64_t from_stride = 0, to_stride = 0;  // columns from one block to the next
  // The blocks meet on one destination: each element is the sum of count sources.
  TANDEM_HOST_DEVICE bool sums() const { return count > 1 && to_stride == 0; }
  // Destination elements written (or added to).
  TANDEM_HOST_DEVICE std::int64_t elements() const { return rows * width * (sums() ? 1 : count); }
  TANDEM_HOST_DEVICE std::int64_t per_row() const { return sums() ? width : count * width; }
  // Element e's source: in its own block, or with sums() in block `block`.
  TANDEM_HOST_DEVICE std::int64_t from(std::int64_t e, std::int64_t block = 0) const {
    const std::int64_t r = e / per_row(), c = e % per_row();
    return r * from_ld + from_column + (c / width + block) * from_stride + c % width;
  }
  TANDEM_HOST_DEVICE std::int64_t to(std::int64_t e) const {
    const std::int64_t r = e / per_row(), c = e % per_row();
    return r * to_ld + to_column + (c / width) * to_stride + c % width;
  }
};

}  // namespace tandem::kernels::math
