// Multi-token prediction through the tandem binary: the simulator prices the MTP block on
// the same step and shows its time (report, JSON, trace slices of its own inside the
// passes, in a real run's trace too), `tandem scenario` counts the module beside the main
// model, `tandem train` logs each depth's loss after the lm loss, and what the step does
// not build is refused before any work, naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/tools/run_tandem.hpp"
#include "tests/tools/scratch_files.hpp"

namespace {

using tandem::testing::run;

nlohmann::json read(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// Llama-3 8B on 64 H100s (16 microbatches a rank) with and without one MTP depth: the
// depth's compute is booked as "mtp" and accounts for what the compute stream gained (the
// rest: the rolled tokens' upload and one gradient add a microbatch, under 5 %); it is
// no less than its FLOPs at the GPU's bf16 peak (Megatron's FLOP count with and without the
// depth, over 64 GPUs); the trace holds an "mtp" slice in every forward and backward.
TEST(CliSimulate, MultiTokenPredictionShowsItsTime) {
  const std::string file = std::string(TANDEM_SOURCE_DIR) + "/scenarios/llama3-8b-64gpu.json";
  const auto dir = tandem::testing::fresh_dir("cli_simulate_mtp");
  const auto with = dir / "with.json", without = dir / "without.json", trace = dir / "trace.json";
  auto r = run("simulate " + file + " --quiet --json " + without.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run("simulate " + file + " --mtp-num-layers 1 --quiet --json " + with.string() + " --trace " +
          trace.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("multi-token prediction"), std::string::npos) << r.output;
  const auto a = read(without), b = read(with);
  EXPECT_FALSE(a["region_seconds"].contains("mtp"));
  const double mtp = b["region_seconds"]["mtp"].get<double>();
  EXPECT_EQ(b["ranks"][0]["region_seconds"]["mtp"].get<double>(), mtp);
  const double gained = b["ranks"][0]["compute_busy_seconds"].get<double>() -
                        a["ranks"][0]["compute_busy_seconds"].get<double>();
  EXPECT_GE(gained, mtp);
  EXPECT_LE(gained, 1.05 * mtp);
  const double flops = b["megatron_log_flops_per_iteration"].get<double>() -
                       a["megatron_log_flops_per_iteration"].get<double>();
  EXPECT_GT(flops, 0);
  EXPECT_GE(mtp, flops / 64 / 989e12);  // H100 SXM dense bf16
  EXPECT_GT(b["iteration_seconds"].get<double>(), a["iteration_seconds"].get<double>());
  EXPECT_GT(b["max_peak_memory_bytes"].get<double>(), a["max_peak_memory_bytes"].get<double>());
  const auto t = read(trace);
  int slices = 0;
  for (const auto& e : t["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("name", "") == "mtp") ++slices;
  EXPECT_EQ(slices, 2 * 16);  // 512 sequences / dp 32: 16 microbatches, forward and backward
  const auto check = run("trace check " + trace.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;  // nested inside their passes
}

// The MTP depth on a stage of its own layers' ("t,m") before a loss-only stage, interleaved,
// with as many microbatches as stages: every pipeline transfer first exchanges its shape
// (Megatron's p2p shape exchange), and a rank's shape batch sends to a peer that posts its
// receive only after the sender's next batch matched one of its own. A send that small
// completes without its receiver (MPI's eager protocol, NCCL's buffers); the simulator had
// made it wait for the receiver and ended in a deadlock ("a collective or p2p never
// matched"), while the same layout trained under mpirun. Both modes finish now.
TEST(CliSimulate, SmallPipelineSendsDoNotWaitForTheirReceivers) {
  for (const char* mode : {"symmetric", "full"}) {
    const auto r = run(std::string("simulate --mode ") + mode +
                       " --pipeline-model-parallel-size 4 --pipeline-model-parallel-layout "
                       "'Et|tt|tt|tt|tt|tt|t,m|L' --num-layers 12 --global-batch-size 4 "
                       "--micro-batch-size 1 --world-size 4 --mtp-num-layers 1 "
                       "--position-embedding-type rope --quiet");
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.output;
    EXPECT_EQ(r.output.find("never matched"), std::string::npos) << r.output;
  }
}

// The MTP module beside the main model (DeepSeek counts V3 without it). mtp-small's depth:
// a llama-small layer — QKV (8 + 2 · 2) · 32 · 256 = 98304, projection 65536, SwiGLU fc1
// 2 · 640 · 256 = 327680 and fc2 163840, two RMSNorms 512: 655872 — with enorm, hnorm and
// its final norm 3 · 256 and eh_proj 2 · 256² = 131072: 787712.
TEST(CliScenario, MultiTokenPredictionCountedApart) {
  const auto r = run("scenario " + std::string(TANDEM_SOURCE_DIR) + "/scenarios/mtp-small.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["derived"]["mtp_parameters"].get<double>(), 787712.0);
  const auto l = run("scenario " + std::string(TANDEM_SOURCE_DIR) + "/scenarios/llama-small.json");
  ASSERT_EQ(l.exit_code, 0) << l.output;
  const auto k = nlohmann::json::parse(l.output);
  EXPECT_EQ(j["derived"]["parameters"], k["derived"]["parameters"]);
  EXPECT_FALSE(k["derived"].contains("mtp_parameters"));
}

const std::string kTiny =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
    "--max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --vocab-size 512 "
    "--transformer-impl local --position-embedding-type rope ";
const std::string kTrain = "train --mock-data --threads 1 " + kTiny;

// Megatron's log line: "lm loss: … | mtp_1 loss: … | mtp_2 loss: … | loss scale: …".
TEST(CliTrain, MultiTokenPredictionLogsEachDepthsLoss) {
  const auto r = run(kTrain + "--train-iters 2 --log-interval 1 --mtp-num-layers 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lm = r.output.find("| lm loss: "), one = r.output.find("| mtp_1 loss: ");
  const auto two = r.output.find("| mtp_2 loss: "), scale = r.output.find("| loss scale: ");
  ASSERT_NE(lm, std::string::npos) << r.output;
  ASSERT_NE(one, std::string::npos) << r.output;
  ASSERT_NE(two, std::string::npos) << r.output;
  EXPECT_LT(lm, one);
  EXPECT_LT(one, two);
  EXPECT_LT(two, scale);
  // Near ln 512 at the start, as the lm loss.
  const double first = std::stod(r.output.substr(one + 14, 12));
  EXPECT_NEAR(first, std::log(512.0), 0.5) << r.output;
}

// A real run's trace (tandem train --trace) shows the block as the simulator's does: an
// "mtp" slice in every forward and backward (2 iterations × 2 microbatches × 2), nested.
TEST(CliTrain, MultiTokenPredictionInARealRunsTrace) {
  const auto dir = tandem::testing::fresh_dir("cli_train_mtp_trace");
  const auto trace = dir / "run.json";
  const auto r = run(kTrain + "--train-iters 2 --mtp-num-layers 1 --trace " + trace.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int slices = 0;
  const auto events = read(trace)["traceEvents"];
  for (const auto& e : events)
    if (e.value("ph", "") == "X" && e.value("name", "") == "mtp") ++slices;
  EXPECT_EQ(slices, 8);
  const auto check = run("trace check " + trace.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

TEST(CliTrain, MultiTokenPredictionTheStepDoesNotBuildIsRefused) {
  // Megatron's rule: RoPE or no position embedding.
  auto r = run(kTrain + "--train-iters 1 --mtp-num-layers 1 " +
               "--position-embedding-type learned_absolute");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("position_embedding_type = learned_absolute"), std::string::npos)
      << r.output;
  // The depths beside the loss, and on a stage of their own (Megatron's mtp_standalone):
  // built; in a later chunk of the embedding's rank (two copies of the word embedding on
  // one rank, of which Megatron synchronises one): refused.
  r = run("simulate " + kTiny + "--mtp-num-layers 1 --world-size 2 " +
          "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"Ett|mL\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run("simulate " + kTiny + "--mtp-num-layers 1 --world-size 3 " +
          "--pipeline-model-parallel-size 3 --pipeline-model-parallel-layout \"Et|t|||m|L\" " +
          "--global-batch-size 6");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("multi-token prediction"), std::string::npos) << r.output;
  r = run("simulate " + kTiny + "--mtp-num-layers 1 --world-size 2 " +
          "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"Et|t|m|L\"");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("later virtual stage of pp rank 0"), std::string::npos) << r.output;
  // FP8: eh_proj and the depths' layers are not built in it.
  r = run("simulate " + kTiny + "--mtp-num-layers 1 --bf16 --fp8-format hybrid " +
          "--topology dgx-h100");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fp8 = hybrid"), std::string::npos) << r.output;
}

}  // namespace
