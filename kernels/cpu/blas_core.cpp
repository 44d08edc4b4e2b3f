// OpenBLAS's kernel choice and the restart that widens it; see blas_core.hpp.
#include "kernels/cpu/blas_core.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <initializer_list>

#if defined(TANDEM_KERNELS_CBLAS)
#include <cblas.h>
#endif

namespace tandem::kernels::cpu {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool one_of(const std::string& name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the widest vectors they use.
bool uses_avx512(const std::string& core) {
  return one_of(core, {"skylakex", "cooperlake", "sapphirerapids"});
}
bool uses_avx2(const std::string& core) {
  return uses_avx512(core) || one_of(core, {"haswell", "zen", "excavator"});
}

}  // namespace

CpuVectors cpu_vectors() {
  CpuVectors v;
#if defined(__x86_64__)
  // libgcc's checks include the OS's XSAVE state (XGETBV), not only CPUID.
  v.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  v.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return v;
}

std::string blas_core() {
#if defined(TANDEM_KERNELS_CBLAS)
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string("unknown");
#else
  return "eigen";
#endif
}

std::string wider_blas_core(std::string_view loaded, CpuVectors cpu) {
  const std::string core = lower(loaded);
  if (core == "eigen") return "";
  if (cpu.avx512 && !uses_avx512(core)) return "SkylakeX";
  if (cpu.avx2_fma && !uses_avx2(core)) return "Haswell";
  return "";
}

void relaunch_with_blas_core(char** argv) {
  // A variable already set is the user's choice, or this is the restarted process.
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string wider = wider_blas_core(blas_core(), cpu_vectors());
  if (wider.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", wider.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: go on as loaded
}

}  // namespace tandem::kernels::cpu
