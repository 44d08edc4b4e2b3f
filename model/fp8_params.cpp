#include "model/fp8_params.hpp"

#include <stdexcept>
#include <string>

namespace tandem {

Fp8ParamCast::Fp8ParamCast(ParameterSet& params, const std::vector<Fp8Weight>& weights)
    : params_(params), slot_of_(params.all().size(), -1) {
  const auto& order = params.fp8_params();
  if (weights.size() != order.size())
    throw std::invalid_argument("Fp8ParamCast: " + std::to_string(weights.size()) +
                                " weights for " + std::to_string(order.size()) + " FP8 parameters");
  for (std::size_t k = 0; k < order.size(); ++k)
    slot_of_[static_cast<std::size_t>(order[k])] = static_cast<int>(k);
  weights_.resize(order.size());
  for (const Fp8Weight& w : weights) {
    const int k = w.param >= 0 && static_cast<std::size_t>(w.param) < slot_of_.size()
                      ? slot_of_[static_cast<std::size_t>(w.param)]
                      : -1;
    if (k < 0 || w.state == nullptr)
      throw std::invalid_argument("Fp8ParamCast: parameter " + std::to_string(w.param) +
                                  " is not an FP8 parameter with a layer state");
    weights_[static_cast<std::size_t>(k)] = w;
  }
  if (weights_.empty()) return;
  const std::string& recipe = weights_.front().state->config().recipe;
  if (recipe != "delayed" && recipe != "tensorwise")
    throw std::invalid_argument("Fp8ParamCast: FP8 parameters under the " + recipe +
                                " recipe are not built (delayed and tensorwise are)");
  delayed_ = recipe == "delayed";
}

void Fp8ParamCast::cast(Device& d, Stream& s, const OptimizerShard& shard, Communicator& dp) {
  if (weights_.empty()) return;
  const auto n = static_cast<std::int64_t>(weights_.size());
  constexpr int kWeight = Fp8LayerState::weight;
  auto slot = [](const Fp8Weight& w) { return 3 * w.linear + kWeight; };
  static constexpr Fp8Format kE4m3[] = {Fp8Format::e4m3};
  Tensor& scale_inv = params_.fp8_scale_inv();
  if (delayed_) {
    // The scales the casts use, and their inverses for every weight (TE's reciprocal of the
    // delayed scales, held or not on this rank).
    for (std::int64_t k = 0; k < n; ++k) {
      const Fp8Weight& w = weights_[static_cast<std::size_t>(k)];
      w.state->prepare(d, s);
      Tensor scale = *w.state->scale(slot(w));
      Tensor inv = scale_inv.view(Shape{1}, k);
      d.fp8_compute_scale(s, {.scale = scale, .scale_inv = inv, .formats = kE4m3});
    }
  } else {
    if (!amax_.storage) {
      amax_ = d.allocate(Shape{n}, DType::fp32, MemoryUse::fp8);
      scale_ = d.allocate(Shape{n}, DType::fp32, MemoryUse::fp8);
    }
    d.fill(s, amax_, 0.0f);
    for (const ShardPiece& p : shard.pieces) {
      const int k = slot_of_[static_cast<std::size_t>(p.param)];
      if (k < 0) continue;
      Tensor amax = amax_.view(Shape{1}, k);
      d.fp8_amax(s, params_.main_values(p.begin, p.length), amax);
    }
    if (dp.size() > 1) dp.all_reduce(s, amax_, ReduceOp::max)->wait();
    const std::vector<Fp8Format> formats(static_cast<std::size_t>(n), Fp8Format::e4m3);
    d.fp8_compute_scale(
        s, {.amax = &amax_, .scale = scale_, .scale_inv = scale_inv, .formats = formats});
  }
  for (const ShardPiece& p : shard.pieces) {
    const int k = slot_of_[static_cast<std::size_t>(p.param)];
    if (k < 0) continue;
    const Fp8Weight& w = weights_[static_cast<std::size_t>(k)];
    Fp8Tensor codes{.codes = params_.fp8_codes(p.begin, p.length),
                    .scale_inv = scale_inv.view(Shape{1}, k),
                    .rows = 1,
                    .cols = p.length};
    const Tensor scale = delayed_ ? *w.state->scale(slot(w)) : scale_.view(Shape{1}, k);
    d.fp8_quantize(s, {.input = params_.main_values(p.begin, p.length),
                       .output = codes,
                       .scale = &scale,
                       .amax = delayed_ ? w.state->amax(slot(w)) : nullptr});
  }
}

}  // namespace tandem
