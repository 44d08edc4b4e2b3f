// TANDEM_NCCL_CHECK(call): a failed NCCL call throws NcclError naming the call, the file
// and line, NCCL's error string and its last error message (ncclGetLastError).
#pragma once

#include <nccl.h>

#include <stdexcept>
#include <string>

namespace tandem {

class NcclError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* call, const char* file, int line);

inline void check_nccl(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess) throw_nccl_error(code, call, file, line);
}

}  // namespace tandem

#define TANDEM_NCCL_CHECK(call) ::tandem::check_nccl((call), #call, __FILE__, __LINE__)
