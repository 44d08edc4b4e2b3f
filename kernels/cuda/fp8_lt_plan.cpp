// plan_fp8_lt_gemm: the rules of fp8_lt_plan.hpp, in the order a reader checks them.
#include "kernels/cuda/fp8_lt_plan.hpp"

#include <limits>

namespace tandem::kernels::cuda {

cudaDataType_t cuda_data_type(math::Fp8Format f) {
  return f == math::Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

cudaDataType_t cuda_data_type(Precision p) {
  return p == Precision::bf16 ? CUDA_R_16BF : p == Precision::fp16 ? CUDA_R_16F : CUDA_R_32F;
}

Fp8LtPlan plan_fp8_lt_gemm(const Fp8LtProblem& p) {
  Fp8LtPlan plan;
  plan.rows = p.n;
  plan.cols = p.m;
  plan.depth = p.k;
  plan.first_type = cuda_data_type(p.format_b);
  plan.second_type = cuda_data_type(p.format_a);
  plan.out_type = cuda_data_type(p.out);
  plan.transpose_a_first = p.transpose_a;
  plan.transpose_b_first = !p.transpose_b;
  auto refuse = [&](std::string why) {
    plan.unsupported = std::move(why);
    return plan;
  };
  if (p.compute_capability < 89)
    return refuse("FP8 tensor cores need compute capability 8.9 or later; this GPU has " +
                  std::to_string(p.compute_capability / 10) + "." +
                  std::to_string(p.compute_capability % 10));
  if (!p.per_tensor_scales)
    return refuse("block scales (blockwise, MXFP8) are decoded before the GEMM");
  if (p.format_a == math::Fp8Format::e5m2 && p.format_b == math::Fp8Format::e5m2)
    return refuse("cuBLASLt has no E5M2 x E5M2 GEMM");
  if (!p.aligned) return refuse("an operand's or C's address is not a multiple of 16 bytes");
  for (const auto& [name, v] : {std::pair{"M", p.m}, std::pair{"N", p.n}, std::pair{"K", p.k}}) {
    if (v <= 0 || v % 16 != 0)
      return refuse(std::string(name) + " = " + std::to_string(v) +
                    " is not a positive multiple of 16");
    if (v > std::numeric_limits<int>::max())
      return refuse(std::string(name) + " = " + std::to_string(v) + " does not fit an int");
  }
  return plan;
}

}  // namespace tandem::kernels::cuda
