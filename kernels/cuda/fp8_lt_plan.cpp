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
  plan.fast_accumulate = !p.split_accumulator;
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
  if (std::string why = lt_dimension_rule(p.m, p.n, p.k, 16); !why.empty()) return refuse(why);
  return plan;
}

std::string lt_dimension_rule(std::int64_t m, std::int64_t n, std::int64_t k,
                              std::int64_t multiple) {
  for (const auto& [name, v] : {std::pair{"M", m}, std::pair{"N", n}, std::pair{"K", k}}) {
    if (v <= 0 || v % multiple != 0)
      return std::string(name) + " = " + std::to_string(v) +
             (multiple > 1 ? " is not a positive multiple of " + std::to_string(multiple)
                           : std::string(" is not positive"));
    if (v > std::numeric_limits<int>::max())
      return std::string(name) + " = " + std::to_string(v) + " does not fit an int";
  }
  return "";
}

}  // namespace tandem::kernels::cuda
