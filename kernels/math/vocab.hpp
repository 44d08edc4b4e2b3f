// Megatron's vocab-parallel sharding of one token: a tensor-parallel rank holds the rows
// [begin, begin + size) of the embedding table (and the same columns of the logits). The
// embedding lookup, its gradient and the cross entropy's target logit all ask the same
// question — which local row, if any, holds this global id — and answer it here, on the
// CPU loops and in the CUDA kernels alike.
#pragma once

#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace tandem::kernels::math {

// The local row of global token id `token` in the shard [begin, begin + size), or -1
// when another rank holds it. Example: with a vocabulary of 50304 over tp = 2, rank 1 has
// begin = 25152, size = 25152, so token 30000 is its row 4848 and token 7 is not local.
TANDEM_HOST_DEVICE inline std::int64_t vocab_local_index(std::int64_t token, std::int64_t begin,
                                                         std::int64_t size) {
  const std::int64_t j = token - begin;
  return j >= 0 && j < size ? j : -1;
}

}  // namespace tandem::kernels::math
