// The trainer on one rank, on the cpu binding with mock data: a resumed run reproduces the
// uninterrupted run's losses exactly; an incompatible checkpoint is refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.hpp"
#include "data/dataset_builder.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "exec/cpu/self_communicator.hpp"
#include "schedules/layout.hpp"
#include "train/trainer.hpp"

namespace tandem {
namespace {

Scenario tiny_scenario() {
  Scenario s;
  s.model.num_layers = 2;
  s.model.hidden_size = 32;
  s.model.num_attention_heads = 4;
  s.model.seq_length = 16;
  s.model.vocab_size = 256;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 4;
  s.training.train_iters = 6;
  s.training.lr = 1e-3;
  s.training.min_lr = 1e-4;
  s.training.lr_warmup_iters = 2;
  s.cluster.world_size = 1;
  validate(s);
  return s;
}

struct OneRank {
  Scenario scenario;
  CpuDevice device;
  SelfCommunicator tp{device, "tp"}, pp{device, "pp"}, dp{device, "dp"}, mp{device, "tp-pp"};
  data::SplitDatasets data;
  std::unique_ptr<Trainer> trainer;

  explicit OneRank(const Scenario& s) : scenario(s) {
    data::GptDataConfig dc;
    dc.mock = true;
    dc.mock_data.vocab_size = 256;
    dc.mock_data.eod = 255;
    dc.split = "90,10,0";
    dc.dataset.sequence_length = s.model.seq_length;
    data = data::build_gpt_datasets(dc, {100, 20, std::nullopt});
    const auto layout = make_layout({1, 1, 1, 1, 1, s.parallelism.order});
    trainer = std::make_unique<Trainer>(s, make_parallel_context(layout, 0), device,
                                        TrainerGroups{&tp, &pp, &dp, &mp, nullptr}, *data[0],
                                        data[1].get());
  }
};

TEST(Trainer, LossesAreFiniteAndStartNearUniform) {
  OneRank r(tiny_scenario());
  const auto first = r.trainer->train_step();
  EXPECT_NEAR(first.lm_loss, std::log(256.0), 0.3);
  EXPECT_GT(first.grad_norm, 0.0);
  EXPECT_EQ(first.num_microbatches, 2);
  EXPECT_EQ(r.trainer->consumed_samples(), 4);
  const double valid = r.trainer->evaluate();
  EXPECT_TRUE(std::isfinite(valid));
}

// Trains 6 iterations straight, and 3 + (checkpoint, one lost iteration, restore) + 3:
// the losses must be the same, bit for bit.
void expect_resume_reproduces(const Scenario& s, const std::string& dir_name) {
  std::vector<double> straight;
  {
    OneRank r(s);
    for (int i = 0; i < 6; ++i) straight.push_back(r.trainer->train_step().lm_loss);
  }
  const auto dir = std::filesystem::path(::testing::TempDir()) / dir_name;
  std::filesystem::remove_all(dir);
  std::vector<double> resumed;
  {
    OneRank r(s);
    for (int i = 0; i < 3; ++i) resumed.push_back(r.trainer->train_step().lm_loss);
    save_checkpoint(dir, r.trainer->checkpoint_state());
    mark_latest_checkpoint(dir, r.trainer->iteration());
    r.trainer->train_step();  // work after the checkpoint is lost on purpose
  }
  {
    OneRank r(s);
    r.trainer->restore(load_checkpoint(dir, latest_checkpoint_iteration(dir), 0));
    EXPECT_EQ(r.trainer->iteration(), 3);
    for (int i = 0; i < 3; ++i) resumed.push_back(r.trainer->train_step().lm_loss);
  }
  ASSERT_EQ(resumed.size(), straight.size());
  for (std::size_t i = 0; i < straight.size(); ++i)
    EXPECT_EQ(resumed[i], straight[i]) << "iteration " << i + 1;
  EXPECT_LT(straight.back(), straight.front());
}

TEST(Trainer, ResumeReproducesTheUninterruptedRun) {
  expect_resume_reproduces(tiny_scenario(), "trainer_resume");
}

// Delayed scaling's amax history and scales are state: a checkpoint keeps them (TE's extra
// state), so the resumed run quantizes with the scales the uninterrupted one had. Without
// them the first step after the restore would quantize with scale 1 and lose the match.
TEST(Trainer, ResumeWithDelayedFp8ScalingReproducesTheUninterruptedRun) {
  Scenario s = tiny_scenario();
  s.training.bf16 = true;
  s.training.fp8.format = "hybrid";
  s.training.fp8.recipe = "delayed";
  s.training.fp8.amax_history_len = 4;
  s.training.fp8.amax_compute_algo = "max";
  validate(s);
  s.training.bf16 = false;  // the cpu binding computes beside FP8 in fp32, as tandem train runs it
  expect_resume_reproduces(s, "trainer_resume_fp8");
}

TEST(Trainer, IncompatibleCheckpointIsRefused) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "trainer_incompatible";
  std::filesystem::remove_all(dir);
  {
    OneRank r(tiny_scenario());
    save_checkpoint(dir, r.trainer->checkpoint_state());
  }
  Scenario other = tiny_scenario();
  other.model.hidden_size = 64;
  OneRank r(other);
  try {
    r.trainer->restore(load_checkpoint(dir, 0, 0));
    FAIL() << "a checkpoint of another model was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
