// The trainer on one rank, on the cpu binding with mock data: a resumed run reproduces the
// uninterrupted run's losses exactly; an incompatible checkpoint is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

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

// The cpu binding computes in fp32 only; for the fp16 tests its 16-bit tensors are held as
// fp32 (an fp16 run's arithmetic without fp16's rounding or range: loss scaling's overflows
// then come from scales near fp32's own limit). Runs in fp32 never ask for 16 bits.
class Fp32CpuDevice : public CpuDevice {
 public:
  using CpuDevice::allocate;
  Tensor allocate(const Shape& shape, DType dtype, MemoryUse use) override {
    const bool sixteen = dtype == DType::bf16 || dtype == DType::fp16;
    return CpuDevice::allocate(shape, sixteen ? DType::fp32 : dtype, use);
  }
};

struct OneRank {
  Scenario scenario;
  Fp32CpuDevice device;
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
    trainer = std::make_unique<Trainer>(
        s, make_parallel_context(layout, 0), device,
        TrainerGroups{.tp = &tp, .pp = &pp, .dp = &dp, .model_parallel = &mp, .amax = &dp},
        *data[0], data[1].get());
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

// fp16's dynamic loss scaler on a real step. A NaN put into one weight makes every gradient
// non-finite: those steps are skipped — the main values, the learning rate and the optimizer
// as they were — with hysteresis 2 the scale holds once, then halves at each further one,
// not below min_loss_scale. With the weight mended, steps run again and after 2 clean ones
// (the window) the scale doubles. The checkpoint keeps the scaler's state.
TEST(Trainer, Fp16LossScalerSkipsNonFiniteStepsAndMovesTheScale) {
  Scenario s = tiny_scenario();
  s.training.fp16 = true;
  s.training.initial_loss_scale = 1024;
  s.training.min_loss_scale = 256;
  s.training.loss_scale_window = 2;
  validate(s);
  OneRank r(s);
  ParameterSet& p = r.trainer->parameters();
  Stream& st = r.device.default_stream();
  auto main_values = [&] {  // the optimizer's fp32 values, which a step that runs moves
    std::vector<float> v(static_cast<std::size_t>(p.numel()));
    r.device.download(st, p.main_values(0, p.numel()), v);
    return v;
  };
  auto load = [&](const std::vector<float>& v) {
    Tensor full = r.device.allocate(Shape{p.numel()}, DType::fp32);
    r.device.upload(st, full, Device::ProduceFloats([&](std::span<float> out) {
                      std::copy(v.begin(), v.end(), out.begin());
                    }));
    p.load_values(r.device, st, full);
  };
  const StepResult first = r.trainer->train_step();
  ASSERT_FALSE(first.skipped);
  EXPECT_EQ(first.loss_scale, 1024);
  const std::vector<float> good = main_values();
  std::vector<float> poisoned = good;
  poisoned[static_cast<std::size_t>(p[0].value_offset)] = std::nanf("");
  load(poisoned);
  const double lr = first.learning_rate;
  for (const double expected : {1024.0, 1024.0, 512.0, 256.0}) {  // the scale each step used
    const StepResult step = r.trainer->train_step();
    EXPECT_TRUE(step.skipped);
    EXPECT_EQ(step.loss_scale, expected);
    EXPECT_EQ(step.learning_rate, lr);  // the schedule did not step
    const std::vector<float> now = main_values();
    EXPECT_EQ(std::memcmp(now.data(), poisoned.data(), now.size() * sizeof(float)), 0)
        << "a skipped step moved the parameters";
  }
  load(good);
  const StepResult clean = r.trainer->train_step();
  EXPECT_FALSE(clean.skipped);
  EXPECT_EQ(clean.loss_scale, 256);  // the floor
  EXPECT_GT(clean.learning_rate, lr);
  EXPECT_NE(main_values(), good);
  EXPECT_EQ(r.trainer->train_step().loss_scale, 256);
  EXPECT_EQ(r.trainer->train_step().loss_scale, 512);  // the window of 2 completed
  const CheckpointState state = r.trainer->checkpoint_state();
  const auto saved =
      std::find_if(state.tensors.begin(), state.tensors.end(),
                   [](const CheckpointTensor& t) { return t.name == "grad_scaler"; });
  ASSERT_NE(saved, state.tensors.end());
  EXPECT_EQ(saved->values, (std::vector<float>{512.0f, 1.0f, 2.0f}));
}

TEST(Trainer, ResumeReproducesTheUninterruptedRun) {
  expect_resume_reproduces(tiny_scenario(), "trainer_resume");
}

// tiny_scenario with FP8 hybrid under delayed scaling (history 4, max), validated as bf16
// and run in fp32 beside FP8, as tandem train runs it on the cpu binding.
Scenario delayed_fp8_scenario() {
  Scenario s = tiny_scenario();
  s.training.bf16 = true;
  s.training.fp8.format = "hybrid";
  s.training.fp8.recipe = "delayed";
  s.training.fp8.amax_history_len = 4;
  s.training.fp8.amax_compute_algo = "max";
  s.training.eval_iters = 3;
  validate(s);
  s.training.bf16 = false;
  return s;
}

// Delayed scaling's amax history and scales are state: a checkpoint keeps them (TE's extra
// state), so the resumed run quantizes with the scales the uninterrupted one had. Without
// them the first step after the restore would quantize with scale 1 and lose the match.
TEST(Trainer, ResumeWithDelayedFp8ScalingReproducesTheUninterruptedRun) {
  expect_resume_reproduces(delayed_fp8_scenario(), "trainer_resume_fp8");
}

// An evaluation under delayed scaling quantizes with the scales training left and changes
// none of them: Transformer Engine records amaxes under torch.no_grad() but reduces and
// updates only where gradients are enabled. So two evaluations in a row give the same loss,
// the history and scales are those training left, and the evaluation's amaxes wait, maxed
// into the step's, for the next training step's update.
TEST(Trainer, EvaluationLeavesDelayedFp8ScalesAsTrainingLeftThem) {
  OneRank r(delayed_fp8_scenario());
  auto fp8_state = [&] {
    std::map<std::string, std::vector<float>> out;
    for (const CheckpointTensor& t : r.trainer->checkpoint_state().tensors)
      if (t.name.rfind("fp8.", 0) == 0) out[t.name] = t.values;
    return out;
  };
  // Before any training step: the evaluation leaves the history empty and the scales at 1,
  // and has recorded the amaxes of the inputs and weights it quantized (slot 3 · linear +
  // role: input 0, weight 1, output gradient 2), not of gradients.
  r.trainer->evaluate();
  const auto fresh = fp8_state();
  ASSERT_EQ(fresh.size(), 3u * 2u);  // history, scales and amaxes of each of 2 layers
  for (const auto& [name, values] : fresh) {
    for (std::size_t k = 0; k < values.size(); ++k) {
      if (name.ends_with(".amax_history")) {
        EXPECT_EQ(values[k], 0.0f) << name << " " << k;
      } else if (name.ends_with(".scale")) {
        EXPECT_EQ(values[k], 1.0f) << name << " " << k;
      } else if (k % 3 == 2) {
        EXPECT_EQ(values[k], 0.0f) << name << " slot " << k;
      } else {
        EXPECT_GT(values[k], 0.0f) << name << " slot " << k;
      }
    }
  }
  // After training: evaluations repeat, and move neither history nor scales; the amaxes
  // only grow (the evaluation's maxed into the step's).
  for (int i = 0; i < 2; ++i) r.trainer->train_step();
  const auto trained = fp8_state();
  const double first = r.trainer->evaluate();
  const double second = r.trainer->evaluate();
  EXPECT_EQ(first, second);
  const auto evaluated = fp8_state();
  for (const auto& [name, values] : trained) {
    const std::vector<float>& now = evaluated.at(name);
    ASSERT_EQ(now.size(), values.size());
    if (name.ends_with(".amax")) {
      for (std::size_t k = 0; k < values.size(); ++k)
        EXPECT_GE(now[k], values[k]) << name << " slot " << k;
    } else {
      EXPECT_EQ(now, values) << name << " moved in an evaluation";
    }
  }
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

// A mixture of experts with DeepSeek-V3's aux-loss-free balancing: 8 experts, top-2,
// sigmoid scores, in layer 1 only.
Scenario expert_bias_scenario(double rate, bool bias) {
  Scenario s = tiny_scenario();
  s.model.num_experts = 8;
  s.model.moe_router_topk = 2;
  s.model.moe_ffn_hidden_size = 16;
  s.model.moe_layer_pattern = {0, 1};
  s.model.disable_bias_linear = true;
  s.model.moe_router_score_function = "sigmoid";
  s.model.moe_router_enable_expert_bias = bias;
  s.model.moe_router_bias_update_rate = rate;
  s.model.moe_token_dispatcher_type = "alltoall";
  s.training.train_iters = 40;
  validate(s);
  return s;
}

struct OneMoeRank {
  CpuDevice device;
  SelfCommunicator tp{device, "tp"}, pp{device, "pp"}, dp{device, "dp"}, mp{device, "tp-pp"},
      ep{device, "ep"}, edp{device, "expert-dp"};
  data::SplitDatasets data;
  std::unique_ptr<Trainer> trainer;

  explicit OneMoeRank(const Scenario& s) {
    data::GptDataConfig dc;
    dc.mock = true;
    dc.mock_data.vocab_size = 256;
    dc.mock_data.eod = 255;
    dc.split = "90,10,0";
    dc.dataset.sequence_length = s.model.seq_length;
    data = data::build_gpt_datasets(dc, {400, 20, std::nullopt});
    const auto layout = make_layout({1, 1, 1, 1, 1, s.parallelism.order});
    trainer = std::make_unique<Trainer>(
        s, make_parallel_context(layout, 0), device,
        TrainerGroups{&tp, &pp, &dp, &mp, nullptr, nullptr, &ep, &edp, nullptr, &dp}, *data[0],
        data[1].get());
  }
  std::vector<float> bias() {
    for (const auto& t : trainer->checkpoint_state().tensors)
      if (t.name == "expert_bias") return t.values;
    return {};
  }
};

// After one step each bias moved by the rate toward balance: up for the experts that got
// fewer copies than the average (T·k / E), down for those that got more (Megatron's
// get_updated_expert_bias), and the choices it makes then even the load out: over the
// last steps the busiest and idlest experts are closer than without the bias.
TEST(Trainer, ExpertBiasMovesTowardBalancedLoad) {
  OneMoeRank r(expert_bias_scenario(0.01, true));
  r.trainer->train_step();
  const auto counts = r.trainer->routed_per_expert();  // this step's, one MoE layer
  ASSERT_EQ(counts.size(), 8u);
  const double average = 2.0 * 2 * 16 * 2 / 8;  // k · tokens (2 microbatches of 2 × 16) / E
  const std::vector<float> bias = r.bias();
  ASSERT_EQ(bias.size(), 8u);
  int moved = 0;
  for (std::size_t e = 0; e < 8; ++e) {
    const double c = static_cast<double>(counts[e]);
    const float want = c < average ? 0.01f : c > average ? -0.01f : 0.0f;
    EXPECT_EQ(bias[e], want) << "expert " << e << " got " << c << " of average " << average;
    moved += want != 0.0f;
  }
  EXPECT_GT(moved, 0) << "the first step's load was already balanced: no test";

  auto spread = [](bool with_bias) {
    OneMoeRank run(expert_bias_scenario(0.05, with_bias));
    std::vector<std::int64_t> before;
    for (int i = 0; i < 40; ++i) {
      if (i == 20) before = run.trainer->routed_per_expert();
      run.trainer->train_step();
    }
    const auto after = run.trainer->routed_per_expert();
    std::int64_t lo = INT64_MAX, hi = 0;
    for (std::size_t e = 0; e < after.size(); ++e) {
      lo = std::min(lo, after[e] - before[e]);
      hi = std::max(hi, after[e] - before[e]);
    }
    return hi - lo;  // over the last 20 steps
  };
  const std::int64_t with_bias = spread(true), without = spread(false);
  EXPECT_LT(with_bias * 2, without) << "with the bias " << with_bias << ", without " << without;
}

}  // namespace
}  // namespace tandem
