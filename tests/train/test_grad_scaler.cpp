// Megatron's loss scaler (megatron/core/optimizer/grad_scaler.py), its rules worked by hand:
// which scaler a precision gets, the dynamic scale's hysteresis and backoff (not below the
// floor) and its growth after a window of clean steps, and the constant scale that never moves.
#include <gtest/gtest.h>

#include "train/grad_scaler.hpp"

namespace tandem {
namespace {

TrainingConfig fp16(double initial = 1024, double min = 256, std::int64_t window = 3,
                    std::int64_t hysteresis = 2) {
  TrainingConfig t;
  t.fp16 = true;
  t.initial_loss_scale = initial;
  t.min_loss_scale = min;
  t.loss_scale_window = window;
  t.hysteresis = hysteresis;
  return t;
}

TEST(GradScaler, WhichScalerAPrecisionGets) {
  TrainingConfig t;  // fp32: none
  EXPECT_FALSE(GradScaler::of(t));
  t.bf16 = true;  // bf16: none, unless a constant scale is asked for
  EXPECT_FALSE(GradScaler::of(t));
  t.loss_scale = 128;
  ASSERT_TRUE(GradScaler::of(t));
  EXPECT_FALSE(GradScaler::of(t)->dynamic());
  EXPECT_EQ(GradScaler::of(t)->scale(), 128);
  const auto dynamic = GradScaler::of(fp16());
  ASSERT_TRUE(dynamic);
  EXPECT_TRUE(dynamic->dynamic());
  EXPECT_EQ(dynamic->scale(), 1024);
  EXPECT_EQ(GradScaler::of(TrainingConfig{.fp16 = true})->scale(), 4294967296.0);  // 2^32
}

TEST(GradScaler, HysteresisThenBackoffToTheFloor) {
  auto s = *GradScaler::of(fp16());
  s.update(true);  // hysteresis 2 → 1: the scale holds
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // → 0: halves
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // stays at 0 (≤ 0): every further one halves
  EXPECT_EQ(s.scale(), 256);
  s.update(true);  // the floor
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.state().hysteresis_tracker, -2);
}

TEST(GradScaler, GrowsAfterAWindowOfCleanStepsAndResetsTheHysteresis) {
  auto s = *GradScaler::of(fp16());
  s.update(true);  // hysteresis 1, growth 0
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.state().hysteresis_tracker, 1);  // clean steps alone do not reset it
  s.update(false);                             // the third clean step: the window
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_EQ(s.state(),
            (GradScalerState{.scale = 2048, .growth_tracker = 0, .hysteresis_tracker = 2}));
  s.update(false);
  s.update(true);  // an inf resets the growth count
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048);
}

TEST(GradScaler, ConstantScaleNeverMoves) {
  TrainingConfig t = fp16();
  t.loss_scale = 64;
  auto s = *GradScaler::of(t);
  for (bool found : {true, true, true, false, false, false, false}) s.update(found);
  EXPECT_EQ(s.scale(), 64);
}

TEST(GradScaler, RestoresItsState) {
  auto s = *GradScaler::of(fp16());
  s.restore({.scale = 8, .growth_tracker = 2, .hysteresis_tracker = 1});
  s.update(false);  // the window of 3 completes
  EXPECT_EQ(s.scale(), 16);
}

}  // namespace
}  // namespace tandem
