// FP8 parameters (--fp8-param-gather) on the cpu binding: the buffer holds their codes after
// the 16-bit parameters, and the cast from the fp32 main values gives each weight the scale its
// recipe asks for — tensorwise fp8_max / amax of the weight, delayed its layer's scale with
// the weight's amax recorded — and codes that decode to the main values within E4M3's
// rounding (3 mantissa bits: half a step, 2^-4 of the value, for values in the normal range).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "kernels/cpu/fp8.hpp"
#include "model/fp8_params.hpp"

namespace tandem {
namespace {

struct Fp8ParamsFixture {
  CpuDevice device;
  ParameterSet params{1, 0};
  int dense = -1, w0 = -1, w1 = -1;
  Fp8Config config;

  explicit Fp8ParamsFixture(const std::string& recipe) {
    config.format = "hybrid";
    config.recipe = recipe;
    config.param_gather = true;
    ParameterSpec norm{"norm", Shape{24}, ShardKind::replicated, 0.0f, 1.0f};
    ParameterSpec a{"a", Shape{8, 16}, ShardKind::rows, 0.02f, 0.0f};
    ParameterSpec b{"b", Shape{16, 8}, ShardKind::rows, 0.5f, 0.0f};
    a.fp8 = b.fp8 = true;
    dense = params.add(norm);
    w0 = params.add(a);
    w1 = params.add(b);
    // fp32, as the cpu binding computes (the 16-bit buffer's end: the simulator's tests).
    params.allocate(device, {.pad_to = 128, .fp8_pad_to = 128, .param_align = 64}, DType::fp32);
    params.initialize(device, device.default_stream(), 7);
  }

  // a as the layer's qkv (linear 0), b as its fc1 (linear 2), cast on one dp rank.
  void cast_all(Fp8LayerState& state) {
    Fp8ParamCast cast(params, {{w0, &state, 0}, {w1, &state, 2}});
    SelfCommunicator dp(device, "dp");
    cast.cast(device, device.default_stream(), make_optimizer_shard(params, 1, 0), dp);
  }
  std::vector<float> main_of(int i) {
    const Parameter& p = params[i];
    std::vector<float> out(static_cast<std::size_t>(p.local_shape.numel()));
    device.download(device.default_stream(),
                    params.main_values(p.value_offset, p.local_shape.numel()), out);
    return out;
  }
  float scale_inv_of(int i) {
    float v = 0;
    device.download(device.default_stream(), params[i].fp8.scale_inv, std::span<float>(&v, 1));
    return v;
  }
  std::vector<float> decoded(int i) {
    const Parameter& p = params[i];
    const float inv = scale_inv_of(i);
    std::vector<float> out(static_cast<std::size_t>(p.local_shape.numel()));
    kernels::cpu::fp8_dequantize(
        reinterpret_cast<const std::uint8_t*>(p.fp8.codes.data<std::int32_t>()), &inv, p.fp8.rows,
        p.fp8.cols, kernels::math::Fp8Format::e4m3, {}, out.data());
    return out;
  }
};

float amax_of(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

TEST(Fp8Params, HeldAsCodesAfterTheSixteenBitParameters) {
  Fp8ParamsFixture f("tensorwise");
  // Dense: norm [0, 24) in a bucket padded to 128; FP8 (last registered first): b [128, 256),
  // a [256, 384) in a bucket padded to 384.
  EXPECT_EQ(f.params.fp8_begin(), 128);
  EXPECT_EQ(f.params.numel(), 384);
  EXPECT_EQ(f.params.fp8_params(), (std::vector<int>{f.w1, f.w0}));
  ASSERT_EQ(f.params.buckets().size(), 2u);
  EXPECT_TRUE(f.params.buckets()[1].fp8);
  EXPECT_FALSE(f.params.buckets()[0].fp8);
  // No 16-bit copy; codes four to an int32, one scale_inv each.
  EXPECT_EQ(f.params[f.w0].compute.storage, nullptr);
  EXPECT_EQ(f.params[f.w0].fp8.codes.numel(), 8 * 16 / 4);
  EXPECT_EQ(f.params[f.w0].fp8.codes.offset, (256 - 128) / 4);
  EXPECT_EQ(f.params[f.w0].fp8.rows, 8);
  EXPECT_EQ(f.params[f.w0].fp8.cols, 16);
  EXPECT_NE(f.params[f.dense].compute.storage, nullptr);
  EXPECT_THROW(f.params.fp8_codes(130, 4), std::logic_error);  // not whole words
  EXPECT_THROW(f.params.fp8_codes(0, 4), std::logic_error);    // not in the FP8 part
}

// The cpu binding computes in fp32: the buffer is then the main values throughout, the FP8
// parameters' included, and they still have no compute view (forward reads their codes).
TEST(Fp8Params, UnderFp32TheBufferHoldsTheirMainValues) {
  CpuDevice d;
  ParameterSet p(1, 0);
  ParameterSpec a{"a", Shape{8, 16}, ShardKind::rows, 0.02f, 0.0f};
  a.fp8 = true;
  const int i = p.add(a);
  p.allocate(d, {.pad_to = 4}, DType::fp32);
  EXPECT_EQ(p.compute_values().numel(), p.numel());
  EXPECT_EQ(p[i].compute.storage, nullptr);
  EXPECT_EQ(p[i].value.numel(), 8 * 16);
  EXPECT_EQ(p[i].fp8.codes.numel(), 8 * 16 / 4);
}

void expect_close_to_main(Fp8ParamsFixture& f, int i) {
  const auto main = f.main_of(i), got = f.decoded(i);
  ASSERT_EQ(main.size(), got.size());
  // Below E4M3's normal range the step is 2^-9 (in units of the scale): half of it.
  const float tiny = f.scale_inv_of(i) * std::ldexp(1.0f, -10);
  for (std::size_t e = 0; e < main.size(); ++e)
    EXPECT_NEAR(got[e], main[e], std::abs(main[e]) / 16 + tiny) << "element " << e;
}

TEST(Fp8Params, TensorwiseCastScalesEachWeightByItsAmax) {
  Fp8ParamsFixture f("tensorwise");
  Fp8LayerState state(f.config);
  f.cast_all(state);
  for (int i : {f.w0, f.w1}) {
    EXPECT_FLOAT_EQ(f.scale_inv_of(i), amax_of(f.main_of(i)) / 448.0f);
    expect_close_to_main(f, i);
  }
  // Different weights, different scales (std 0.02 against 0.5).
  EXPECT_GT(f.scale_inv_of(f.w1), 10 * f.scale_inv_of(f.w0));
}

TEST(Fp8Params, DelayedCastUsesTheLayersScaleAndRecordsTheAmax) {
  Fp8ParamsFixture f("delayed");
  Fp8LayerState state(f.config);
  f.cast_all(state);
  // The first scale is 1 (TE's initial one): scale_inv 1, the amaxes recorded in the weight
  // slots (3 · linear + 1) for the next update.
  EXPECT_FLOAT_EQ(f.scale_inv_of(f.w0), 1.0f);
  EXPECT_FLOAT_EQ(f.scale_inv_of(f.w1), 1.0f);
  std::vector<float> amax(Fp8LayerState::kSlots);
  f.device.download(f.device.default_stream(), state.step_amaxes(), amax);
  EXPECT_FLOAT_EQ(amax[1], amax_of(f.main_of(f.w0)));
  EXPECT_FLOAT_EQ(amax[7], amax_of(f.main_of(f.w1)));
  EXPECT_EQ(amax[4], 0.0f);  // proj: no FP8 parameter here
  // b (std 0.5) sits in E4M3's normal range at scale 1: its codes round to 2^-4.
  expect_close_to_main(f, f.w1);
}

TEST(Fp8Params, BlockRecipesAreNotCast) {
  Fp8ParamsFixture f("tensorwise");
  Fp8Config blockwise = f.config;
  blockwise.recipe = "blockwise";
  Fp8LayerState state(blockwise);
  EXPECT_THROW(Fp8ParamCast(f.params, {{f.w0, &state, 0}, {f.w1, &state, 2}}),
               std::invalid_argument);
  Fp8LayerState ok(f.config);
  EXPECT_THROW(Fp8ParamCast(f.params, {{f.w0, &ok, 0}}), std::invalid_argument);  // one missing
}

}  // namespace
}  // namespace tandem
