// Which OpenBLAS kernels run the GEMMs, and whether a wider set should. Debian's OpenBLAS
// is a DYNAMIC_ARCH build: at load time it picks its kernels by the CPU's family and model,
// and a CPU newer than the library falls back to the SSE3 "Prescott" kernels. Bookworm's
// 0.3.21 does so on Emerald Rapids (family 6, model 207), where its AVX-512 kernels
// ("SkylakeX") run tandem's training steps' GEMMs about 5× faster. OpenBLAS reads the
// choice from OPENBLAS_CORETYPE only while it loads, so the program restarts itself with
// the variable set (relaunch_with_blas_core).
#pragma once

#include <string>
#include <string_view>

namespace tandem::kernels::cpu {

// The vector extensions of the CPU this process runs on, as the OS enables them.
struct CpuVectors {
  bool avx2_fma = false;
  bool avx512 = false;  // F, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
};
CpuVectors cpu_vectors();

// OpenBLAS's name for the kernels it loaded ("Prescott", "Haswell", "SkylakeX", …), or
// "eigen" when Eigen runs the GEMMs.
std::string blas_core();

// The OPENBLAS_CORETYPE that would run wider kernels than `loaded` on a CPU with `cpu`:
// "SkylakeX" for AVX-512, "Haswell" for AVX2 + FMA; empty when `loaded` already uses the
// widest the CPU has (or is "eigen").
std::string wider_blas_core(std::string_view loaded, CpuVectors cpu);

// When OpenBLAS runs narrower kernels than the CPU has and OPENBLAS_CORETYPE is unset:
// sets it and replaces this process by the same program with the same arguments (argv as
// given to main). Returns when there is nothing to do, or when the exec failed (the run
// goes on with the kernels it has).
void relaunch_with_blas_core(char** argv);

}  // namespace tandem::kernels::cpu
