// RoPE loop; see rope.hpp. One sequence position per task: its angles are computed once
// and applied to every batch entry and rotated head.
#include "kernels/cpu/rope.hpp"

#include <cmath>
#include <vector>

#include "kernels/cpu/threads.hpp"
#include "kernels/math/rope.hpp"

namespace tandem::kernels::cpu {

void rope_apply(RopeShape s, float* x, bool inverse) {
  const std::int64_t half = s.rotary_dim / 2;
  const std::int64_t heads = s.groups * s.per_group;
  const std::int64_t row = s.B * heads * s.head_dim;
#pragma omp parallel if (s.T * row >= kMinParallelElements)
  {
    std::vector<float> cos_t(static_cast<std::size_t>(half)), sin_t(cos_t.size());
#pragma omp for schedule(static)
    for (std::int64_t t = 0; t < s.T; ++t) {
      for (std::int64_t i = 0; i < half; ++i) {
        const float theta = math::rope_angle(s.position_offset + t, i, s.rotary_dim, s.base);
        cos_t[static_cast<std::size_t>(i)] = std::cos(theta);
        sin_t[static_cast<std::size_t>(i)] = std::sin(theta);
      }
      for (std::int64_t bh = 0; bh < s.B * heads; ++bh) {
        if (bh % s.per_group >= s.rotate_per_group) continue;
        float* v = x + t * row + bh * s.head_dim + s.first_feature;
        for (std::int64_t i = 0; i < half; ++i) {
          const auto at = math::rope_pair(i, s.rotary_dim, s.interleaved);
          const auto r =
              math::rope_rotate(v[at.first], v[at.second], cos_t[static_cast<std::size_t>(i)],
                                sin_t[static_cast<std::size_t>(i)], inverse);
          v[at.first] = r.first;
          v[at.second] = r.second;
        }
      }
    }
  }
}

}  // namespace tandem::kernels::cpu
