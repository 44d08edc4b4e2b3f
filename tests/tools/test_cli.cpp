// The tandem binary, run as a user runs it: the documented examples produce the documented
// output, files are written, bad input exits with code 2 and a message naming the field.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/trace.hpp"
#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/threads.hpp"
#include "tests/tools/run_tandem.hpp"
#include "tests/tools/scratch_files.hpp"

namespace {

using tandem::testing::fresh_dir;
using tandem::testing::read_json;
using tandem::testing::Result;
using tandem::testing::run;
namespace trace_thread = tandem::trace_thread;

// OpenBLAS's core names compare without case ("Haswell", "HASWELL").
bool same_name(std::string a, std::string b) {
  auto lower = [](std::string& s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  lower(a);
  lower(b);
  return a == b;
}

nlohmann::json run_json(const std::string& args) {
  const auto r = run(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

TEST(Cli, LayoutJsonMatchesTheDocumentedExample) {
  const auto j = run_json("layout --world-size 8 --tp 2 --pp 2 --json");
  EXPECT_EQ(j["world_size"], 8);
  using G = std::vector<std::vector<int>>;
  EXPECT_EQ(j["groups"]["tp"].get<G>(), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(j["groups"]["dp"].get<G>(), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(j["groups"]["pp"].get<G>(), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(j["groups"]["tp-pp"].get<G>(), (G{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(j["groups"]["embedding"].get<G>(), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  for (const char* kind : {"cp", "dp-cp", "tp-cp", "tp-dp-cp", "tp-dp"})
    EXPECT_TRUE(j["groups"].contains(kind)) << kind;
}

TEST(Cli, LayoutTextListsGroupsAndPlacement) {
  const auto r = run("layout --world-size 16 --tp 4 --pp 2 --gpus-per-node 8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world 16 = tp 4 × cp 1 × dp 2 × pp 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0,1,2,3]"), std::string::npos);
  EXPECT_NE(r.output.find("rank  node  gpu"), std::string::npos);
}

TEST(Cli, ScheduleJsonGivesMegatronsInterleavedOrder) {
  const auto j = run_json("schedule --pp 4 --vpp 2 --microbatches 8 --json");
  std::string order;
  for (const auto& op : j["ranks"][0])
    if (op["type"] == "F" || op["type"] == "B")
      order += (order.empty() ? "" : " ") + op["type"].get<std::string>() +
               std::to_string(op["microbatch"].get<int>()) + "." +
               std::to_string(op["chunk"].get<int>());
  EXPECT_EQ(order,
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 "
            "F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(j["ranks"].size(), 4u);
  // p2p calls carry Megatron's names.
  EXPECT_EQ(j["ranks"][1][0]["type"], "recv_forward");
  // Interleaved, Megatron-Core overlaps its p2p calls by default: each forward's
  // send_forward_recv_forward is posted and a "wait" for it comes before the next forward;
  // --overlap-p2p-comm false gives the batched calls, none posted.
  auto count = [](const nlohmann::json& ranks, const std::string& what) {
    int n = 0;
    for (const auto& ops : ranks)
      for (const auto& op : ops)
        if (what == "wait" ? op["type"] == "wait"
                           : op.contains("overlapped") && op["overlapped"].get<bool>())
          ++n;
    return n;
  };
  EXPECT_GT(count(j["ranks"], "wait"), 0);
  EXPECT_GT(count(j["ranks"], "overlapped"), 0);
  EXPECT_EQ(j["ranks"][0][1]["type"], "send_forward_recv_forward");
  EXPECT_TRUE(j["ranks"][0][1]["overlapped"].get<bool>());
  EXPECT_EQ(j["ranks"][0][2]["type"], "wait");
  EXPECT_EQ(j["ranks"][0][2]["call"], "send_forward_recv_forward");
  const auto batched =
      run_json("schedule --pp 4 --vpp 2 --microbatches 8 --json --overlap-p2p-comm false");
  EXPECT_EQ(count(batched["ranks"], "wait"), 0);
  EXPECT_EQ(count(batched["ranks"], "overlapped"), 0);
}

TEST(Cli, ScheduleTextShowsBubble) {
  const auto r = run("schedule --pp 4 --microbatches 8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bubble fraction 27.27%"), std::string::npos) << r.output;  // 3/11
}

TEST(Cli, ScheduleWritesTraceAndSvg) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tandem_cli_schedule";
  std::filesystem::create_directories(dir);
  const auto trace = (dir / "s.json").string(), svg = (dir / "s.svg").string();
  const auto r = run("schedule --pp 4 --microbatches 8 --trace " + trace + " --svg " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto check = run("trace check " + trace);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("pp rank 3 · compute"), std::string::npos);
}

TEST(Cli, BadLayoutIsRejectedWithTheNumbers) {
  const auto r = run("layout --world-size 8 --tp 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3"), std::string::npos) << r.output;
}

TEST(Cli, BadInterleavingIsRejectedWithMegatronsRule) {
  const auto r = run("schedule --pp 4 --vpp 2 --microbatches 9");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("num_microbatches = 9"), std::string::npos) << r.output;
}

TEST(Cli, MissingOutputFolderIsRejectedBeforeWork) {
  const auto r = run("schedule --pp 2 --microbatches 2 --svg /nonexistent/dir/x.svg");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/dir"), std::string::npos) << r.output;
}

TEST(Cli, ScenarioFlagsOverrideMegatronsDefaults) {
  const auto j =
      run_json("scenario --tensor-model-parallel-size 4 --sequence-parallel --world-size 8");
  EXPECT_EQ(j["parallelism"]["tensor_model_parallel_size"], 4);
  EXPECT_EQ(j["parallelism"]["pipeline_model_parallel_size"], 1);  // Megatron's default
  EXPECT_EQ(j["parallelism"]["sequence_parallel"], true);
  EXPECT_EQ(j["derived"]["data_parallel_size"], 2);  // 8 / (4 · 1)
}

// Megatron's switches that set a field under another name (store_false --no-…, the
// --recompute-activations shorthand) are taken as flags too, as after --; a field's own
// flag, given with them, wins.
TEST(Cli, MegatronSwitchesAreFlags) {
  const auto j = run_json("scenario --no-fp8-wgrad --no-bias-gelu-fusion --recompute-activations");
  EXPECT_EQ(j["name"], "megatron");  // Megatron flags alone: Megatron's defaults
  EXPECT_EQ(j["training"]["fp8_wgrad"], false);
  EXPECT_EQ(j["training"]["recompute_granularity"], "selective");
  EXPECT_EQ(j["training"]["bias_gelu_fusion"], false);
  const auto after = run_json(
      "scenario -- --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length "
      "1024 --max-position-embeddings 1024 --micro-batch-size 1 --no-fp8-wgrad "
      "--no-bias-gelu-fusion --recompute-activations");
  EXPECT_EQ(after["training"]["fp8_wgrad"], j["training"]["fp8_wgrad"]);
  EXPECT_EQ(after["training"]["recompute_granularity"], j["training"]["recompute_granularity"]);
  EXPECT_EQ(after["training"]["bias_gelu_fusion"], false);
  const auto won = run_json("scenario --no-fp8-wgrad --fp8-wgrad true");
  EXPECT_EQ(won["training"]["fp8_wgrad"], true);
  const auto help = run("simulate --help");
  EXPECT_NE(help.output.find("--no-fp8-wgrad"), std::string::npos) << help.output;
}

// Megatron flags without a scenario file mean Megatron's defaults in every subcommand, as
// in train (pretrain_gpt.py: one rank, tp 1, pp 1, global batch = micro batch × dp); bare,
// or with tandem's own flags (world size, topology) alone, they keep the built-in default
// scenario (TP 2 × PP 2 × DP 2 on 8 ranks) the demo runs.
TEST(Cli, MegatronFlagsWithoutAFileStartFromMegatronsDefaults) {
  const auto flagged = run_json("scenario --num-layers 4");
  EXPECT_EQ(flagged["name"], "megatron");
  EXPECT_EQ(flagged["model"]["num_layers"], 4);
  EXPECT_EQ(flagged["cluster"]["world_size"], 1);
  EXPECT_EQ(flagged["parallelism"]["tensor_model_parallel_size"], 1);
  EXPECT_EQ(flagged["parallelism"]["pipeline_model_parallel_size"], 1);
  EXPECT_EQ(flagged["training"]["global_batch_size"], 1);  // micro batch 1 × dp 1
  const auto bare = run_json("scenario");
  EXPECT_EQ(bare["name"], "default");
  EXPECT_EQ(bare["parallelism"]["tensor_model_parallel_size"], 2);
  EXPECT_EQ(bare["parallelism"]["pipeline_model_parallel_size"], 2);
  const auto wider = run_json("scenario --world-size 16");  // tandem's flag: the default still
  EXPECT_EQ(wider["name"], "default");
  EXPECT_EQ(wider["derived"]["data_parallel_size"], 4);  // 16 / (2 · 2)

  const auto dir = tandem::testing::fresh_dir("cli_megatron_defaults");
  const auto report = (dir / "r.json").string();
  const auto r = run("simulate --quiet --num-layers 4 --world-size 4 --json " + report);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(report);
  EXPECT_EQ(j["scenario"], "megatron");
  EXPECT_EQ(j["world_size"], 4);
  // tp 1 × pp 1: one pipeline stage, a data-parallel group of 4, no tp traffic.
  EXPECT_EQ(j["simulated_ranks"], 1) << j.dump();
  const auto bare_sim = run("simulate --quiet --json " + report);
  ASSERT_EQ(bare_sim.exit_code, 0) << bare_sim.output;
  EXPECT_EQ(read_json(report)["scenario"], "default");
  EXPECT_EQ(read_json(report)["world_size"], 8);
  // search enumerates the layouts of the scenario it resolves: one rank has one layout.
  const auto s = run("search --quiet --num-layers 4 --top 1 --jobs 1");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("megatron"), std::string::npos) << s.output;
}

TEST(Cli, ScenarioFileIsReadAndChecked) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tandem_cli_scenario";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "bad.json").string();
  std::ofstream(path) << R"({"parallelism": {"tensor_model_paralel_size": 2}})";
  const auto r = run("scenario " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tensor_model_parallel_size"), std::string::npos) << r.output;
  const auto ok =
      run(std::string("scenario ") + TANDEM_SOURCE_DIR + "/scenarios/gpt3-175b-1536gpu.json");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

TEST(Cli, InfoAndHelp) {
  const auto info = run("info");
  EXPECT_EQ(info.exit_code, 0);
  EXPECT_NE(info.output.find("sim (SimGrid 3.32)"), std::string::npos) << info.output;
  // The tandem process runs OpenBLAS's widest kernels for this CPU, whatever the library
  // chose when it loaded (kernels/cpu/blas_core.hpp: Prescott on Emerald Rapids), unless
  // OPENBLAS_CORETYPE names the kernels: then those (the user's choice).
  namespace kcpu = tandem::kernels::cpu;
  if (kcpu::gemm_backend() == "openblas") {
    const std::string tag = "GEMMs by OpenBLAS's ";
    const auto at = info.output.find(tag);
    ASSERT_NE(at, std::string::npos) << info.output;
    const auto begin = at + tag.size();
    const std::string core = info.output.substr(begin, info.output.find(' ', begin) - begin);
    if (const char* chosen = std::getenv("OPENBLAS_CORETYPE"))
      EXPECT_TRUE(same_name(core, chosen)) << "OPENBLAS_CORETYPE=" << chosen << "\n" << info.output;
    else
      EXPECT_EQ(kcpu::wider_blas_core(core, kcpu::cpu_vectors()), "") << info.output;
  } else {
    EXPECT_NE(info.output.find("GEMMs by Eigen"), std::string::npos) << info.output;
  }
  for (const char* sub : {"layout", "schedule", "scenario", "trace"}) {
    const auto h = run(std::string(sub) + " --help");
    EXPECT_EQ(h.exit_code, 0) << sub;
    EXPECT_NE(h.output.find("Usage"), std::string::npos) << sub;
  }
  EXPECT_NE(run("schedule --help").output.find("--microbatches"), std::string::npos);
  EXPECT_NE(run("layout --help").output.find("--tensor-model-parallel-size"), std::string::npos);
  EXPECT_NE(run("--help").output.find("schedule"), std::string::npos);
}

TEST(Cli, UnknownSubcommandOrFlagFails) {
  EXPECT_NE(run("frobnicate").exit_code, 0);
  EXPECT_NE(run("layout --tensor-paralel 2").exit_code, 0);
}

// A number out of its range is refused with the option, the value and the rule (CLI11's own
// checks printed "Value 0 not in range 0.000000 to 1797693134862315…").
TEST(Cli, NumbersOutOfRangeNameTheOptionValueAndRule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"search --top 0", "--top: value 0: must be > 0"},
      {"search --jobs -2", "--jobs: value -2: must be > 0"},
      {"simulate --iterations 0", "--iterations: value 0: must be > 0"},
      {"schedule --pp 0", "--pp: value 0: must be > 0"},
      {"schedule --forward-time -1", "--forward-time: value -1: must be ≥ 0"},
      {"search --top many", "--top: value many: must be a number"},
      {"search --vary precision=bf16,fp4", "precision = fp4: must be one of bf16, fp8"},
  };
  for (const auto& [args, expect] : cases) {
    const auto r = run(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(expect), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("e+308"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("179769"), std::string::npos) << r.output;
  }
}

// The cpu binding computes in fp32: a 16-bit run is refused before any work, naming the
// flag and the binding that runs it (fp16 with its loss scaler, or bf16, on cuda).
TEST(Cli, SixteenBitTrainingOnTheCpuBindingIsRefused) {
  for (const std::string flag : {"fp16", "bf16"}) {
    const auto r =
        run("train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
            "--seq-length 16 --vocab-size 128 --train-iters 1 --" +
            flag);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(flag + " = true"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(flag + " needs --device cuda"), std::string::npos) << r.output;
  }
}

// --tp-comm-overlap in FP8: the ring steps quantize each rank's rows before they move, which
// the one delayed scale allows; a current (tensorwise) scale would need the gathered tensor,
// and the overlapped backward's FP8 gradient codes need FP8 weight gradients.
TEST(Cli, Fp8TensorParallelOverlapRunsUnderPerTensorScalingOnly) {
  const std::string layout =
      "simulate --topology dgx-h100 --world-size 2 --tensor-model-parallel-size 2 "
      "--sequence-parallel true --tp-comm-overlap true --bf16 true --fp8-format hybrid ";
  for (const char* recipe : {"delayed", "tensorwise"}) {
    const auto r = run(layout + "--fp8-recipe " + recipe);
    EXPECT_EQ(r.exit_code, 0) << recipe << r.output;
    EXPECT_NE(r.output.find("iteration time"), std::string::npos) << r.output;
  }
  const auto blockwise = run(layout + "--fp8-recipe blockwise");
  EXPECT_EQ(blockwise.exit_code, 2) << blockwise.output;
  EXPECT_NE(blockwise.output.find("tp_comm_overlap = true: with FP8 the training step overlaps "
                                  "tensor-parallel communication under per-tensor scaling only"),
            std::string::npos)
      << blockwise.output;
  EXPECT_NE(blockwise.output.find("fp8_recipe is blockwise"), std::string::npos);
  const auto no_wgrad = run(layout + "--fp8-recipe delayed --fp8-wgrad false");
  EXPECT_EQ(no_wgrad.exit_code, 2) << no_wgrad.output;
  EXPECT_NE(no_wgrad.output.find("not with fp8_wgrad false"), std::string::npos) << no_wgrad.output;
}

// FP8 parameters (--fp8-param-gather) are built for the per-tensor recipes; the block recipes
// are refused before any work, with what Megatron does for each.
TEST(Cli, Fp8ParamGatherUnderBlockRecipesIsRefusedWithMegatronsWay) {
  const std::string layout =
      "simulate --topology dgx-h100 --world-size 2 --use-distributed-optimizer true --bf16 true "
      "--fp8-format hybrid --fp8-param-gather true ";
  const auto tensorwise = run(layout + "--fp8-recipe tensorwise");
  EXPECT_EQ(tensorwise.exit_code, 0) << tensorwise.output;
  const auto blockwise = run(layout + "--fp8-recipe blockwise");
  EXPECT_EQ(blockwise.exit_code, 2) << blockwise.output;
  EXPECT_NE(blockwise.output.find("fp8_param_gather = true: FP8 parameters are built for the "
                                  "delayed and tensorwise recipes"),
            std::string::npos)
      << blockwise.output;
  EXPECT_NE(blockwise.output.find("128 x 128 tile's amax"), std::string::npos) << blockwise.output;
  EXPECT_EQ(blockwise.output.find("iteration time"), std::string::npos) << blockwise.output;
  const auto mxfp8 =
      run("simulate --topology dgx-b200 --world-size 2 --use-distributed-optimizer "
          "true --bf16 true --fp8-format e4m3 --fp8-param-gather true "
          "--fp8-recipe mxfp8");
  EXPECT_EQ(mxfp8.exit_code, 2) << mxfp8.output;
  EXPECT_NE(mxfp8.output.find("gathers MXFP8 parameters in bf16"), std::string::npos)
      << mxfp8.output;
}

// --- Megatron command lines: pretrain_gpt.py's arguments after --, or a launch script ---

const std::string kMegatronScripts = std::string(TANDEM_SOURCE_DIR) + "/tests/tools/megatron/";

// The JSON on stdout after any "tandem: not modelled: ..." line on stderr.
nlohmann::json json_after_notes(const Result& r) {
  const auto brace = r.output.find('{');
  if (brace == std::string::npos) return nullptr;
  return nlohmann::json::parse(r.output.substr(brace));
}

TEST(CliMegatron, ArgumentListAfterDoubleDashWithMegatronDefaults) {
  const auto r =
      run("scenario -- --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
          "--max-position-embeddings 128 --micro-batch-size 2 --attention-backend auto "
          "--init-method-std 0.02");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not modelled: --init-method-std"), std::string::npos) << r.output;
  const auto j = json_after_notes(r);
  EXPECT_EQ(j["model"]["attention_backend"], "auto");  // modelled: Megatron-Core's AttnBackend
  EXPECT_EQ(j["model"]["num_layers"], 4);
  EXPECT_EQ(j["cluster"]["world_size"], 1);  // python pretrain_gpt.py: one process
  // Megatron's default global batch: micro_batch_size × data-parallel size = 2 × 1.
  EXPECT_EQ(j["training"]["global_batch_size"], 2);
  EXPECT_EQ(j["training"]["lr_decay_style"], "linear");  // Megatron's default, not tandem's
}

TEST(CliMegatron, ListsEveryArgumentAndWhatItSets) {
  const auto r = run("scenario --megatron-arguments");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--num-query-groups VALUE\tnum_query_groups\n"), std::string::npos);
  EXPECT_NE(r.output.find("--disable-bias-linear\tdisable_bias_linear\n"), std::string::npos);
  EXPECT_NE(r.output.find("--attention-backend VALUE\tattention_backend\n"), std::string::npos);
  EXPECT_NE(r.output.find("--init-method-std VALUE\tnot modelled\n"), std::string::npos);
  EXPECT_NE(r.output.find(" modelled, "), std::string::npos) << r.output.substr(0, 200);
}

TEST(CliMegatron, UnknownArgumentIsRefusedWithTheClosestFlag) {
  const auto r =
      run("scenario -- --num-layers 4 --hiden-size 256 --num-attention-heads 8 "
          "--max-position-embeddings 128");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--hiden-size"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did you mean --hidden-size?"), std::string::npos) << r.output;
}

TEST(CliMegatron, RequiredArgumentsAsMegatronRequiresThem) {
  const auto r = run("scenario -- --num-layers 4 --hidden-size 256");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--num-attention-heads"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--max-position-embeddings"), std::string::npos) << r.output;
}

// Megatron's examples/gpt3/train_gpt3_175b_distributed.sh, unchanged in its arguments: the
// script's torchrun starts 8 ranks, the layout needs tp 8 × pp 16 = 128 per replica, so
// the world is given (1024 GPUs: dp 8).
TEST(CliMegatron, Gpt3_175bScriptResolvesWithItsDerivedSizes) {
  const auto r =
      run("scenario --megatron-script " + kMegatronScripts + "gpt3_175b.sh --world-size 1024");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--step-batch-size-schedule"), std::string::npos) << r.output;
  const auto j = json_after_notes(r);
  EXPECT_EQ(j["parallelism"]["tensor_model_parallel_size"], 8);
  EXPECT_EQ(j["parallelism"]["pipeline_model_parallel_size"], 16);
  EXPECT_EQ(j["training"]["global_batch_size"], 1536);
  EXPECT_EQ(j["training"]["fp16"], true);
  EXPECT_EQ(j["cluster"]["gpus_per_node"], 8);  // torchrun --nproc_per_node
  EXPECT_EQ(j["derived"]["data_parallel_size"], 8);
  // GPT-2's vocabulary (the script's gpt2-vocab.json, 50257) padded to 128 · 8 = 1024:
  // 50176 + 1024 = 51200. Parameters 96 · (12h² + 13h) + (51200 + 2048)·h + 2h = 174.6e9.
  EXPECT_EQ(j["derived"]["padded_vocab_size"], 51200);
  const double h = 12288;
  EXPECT_DOUBLE_EQ(j["derived"]["parameters"].get<double>(),
                   96 * (12 * h * h + 13 * h) + (51200 + 2048) * h + 2 * h);
  // 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)) with B 1536, s 2048, L 96, V 51200.
  const double flops =
      72.0 * 1536 * 2048 * 96 * h * h * (1 + 2048 / (12 * h) + 51200 / (12 * 96 * h));
  EXPECT_NEAR(j["derived"]["flops_per_iteration"].get<double>(), flops, 1e-9 * flops);
  // Without --world-size the script's own 8 ranks cannot hold tp 8 × pp 16.
  const auto small = run("scenario --megatron-script " + kMegatronScripts + "gpt3_175b.sh");
  EXPECT_EQ(small.exit_code, 2) << small.output;
  EXPECT_NE(small.output.find("world_size = 8"), std::string::npos) << small.output;
}

TEST(CliMegatron, Llama3_8bScriptCountsItsPublishedParameters) {
  const auto r = run("scenario --megatron-script " + kMegatronScripts + "llama3_8b.sh");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = json_after_notes(r);
  EXPECT_EQ(j["training"]["fp8"], "hybrid");  // the script's FP8 flags, modelled
  EXPECT_EQ(j["training"]["fp8_amax_history_len"], 1024);
  EXPECT_EQ(j["training"]["fp8_param_gather"], true);
  EXPECT_EQ(j["cluster"]["world_size"], 8);  // torchrun --nproc_per_node 8 --nnodes 1
  EXPECT_EQ(j["model"]["num_query_groups"], 8);
  EXPECT_EQ(j["model"]["swiglu"], true);
  EXPECT_NEAR(j["derived"]["parameters"].get<double>(), 8.03e9, 0.005 * 8.03e9);
}

TEST(CliMegatron, Gpt3_175bExampleSimulatesUnchanged) {
  const auto r = run("simulate --quiet --megatron-script " + kMegatronScripts +
                     "gpt3_175b.sh --world-size 1024");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not modelled:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("iteration"), std::string::npos) << r.output;
}

TEST(CliMegatron, SimulateTakesAnArgumentListAfterDoubleDash) {
  const auto r =
      run("simulate --quiet --world-size 4 -- --num-layers 4 --hidden-size 512 "
          "--num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
          "--micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 2 --bf16 "
          "--use-mcore-models");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not modelled: --use-mcore-models"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 ranks"), std::string::npos) << r.output;
}

TEST(CliMegatron, TrainRunsFromFlagsAlone) {
  const auto r =
      run("train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
          "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 "
          "--train-iters 3 --vocab-size 512 --log-interval 1 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("iteration        3/       3"), std::string::npos) << r.output;
}

// The reported FLOPs follow the model's own shape (GQA, SwiGLU, untied output), worked by
// hand from Megatron-LM's num_floating_point_operations (training.py): per token
// 6·L·h·(ffn·3 + q + 2·kv + q) + 6·h·V, plus 6·B·s²·L·q for the causal half of the scores;
// the model FLOPs count all the scores (another 6·B·s²·L·q). llama-small: L 4, h 256,
// 8 heads of 32 in 2 groups (q 256, kv 64), ffn 640, V 50304 (no padding), s 128, B 8.
TEST(CliSimulate, ContextParallelismNeedsTheFusedAttentionOp) {
  // The validator accepts cp 2 (Megatron runs it); the step runs context parallelism on the
  // fused attention op only: a clear error naming the field, not a crash in the simulation.
  const auto r =
      run("simulate " + std::string(TANDEM_SOURCE_DIR) +
          "/scenarios/brown-small.json --world-size 2 --context-parallel-size 2 --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("context_parallel_size = 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use_flash_attn"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("xbt_exception"), std::string::npos) << r.output;
}

// Layouts the validator accepts (Megatron runs them) but the training step cannot build
// are refused before any work by simulate and train, naming the field, the value and the
// rule; they used to abort inside the simulation (SIGABRT, exit 134).
TEST(CliSimulate, LayoutsTheStepCannotBuildAreRefusedBeforeWork) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      // Grouped-query attention runs on the fused attention op only: Megatron's own layers
      // (local) without --use-flash-attn have none.
      {"--transformer-impl local --group-query-attention --num-query-groups 2",
       {"num_query_groups = 2", "use_flash_attn"}},
      // tp 2 over one key/value head: Megatron-Core's classic rule, groups % tp == 0.
      {"--use-flash-attn --group-query-attention --num-query-groups 1 "
       "--tensor-model-parallel-size 2 --world-size 2",
       {"num_query_groups = 1", "multiple of tensor_model_parallel_size = 2"}},
      // The output layer's deferred weight gradients beside a split backward, which places
      // them itself.
      {"--pipeline-model-parallel-size 2 --world-size 2 --defer-embedding-wgrad-compute "
       "--delay-wgrad-compute",
       {"defer_embedding_wgrad_compute = true", "split backward"}},
  };
  for (const auto& [flags, expect] : cases) {
    const auto r = run("simulate --quiet " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    for (const auto& text : expect)
      EXPECT_NE(r.output.find(text), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("xbt"), std::string::npos) << r.output;
  }
  // Under Megatron's default, Transformer Engine's layers, the same layout runs fused.
  const auto te = run("simulate --quiet --group-query-attention --num-query-groups 2");
  EXPECT_EQ(te.exit_code, 0) << te.output;
  // search varies the layout: it prunes the candidates the step cannot build, saying why.
  const auto s = run("search --quiet --jobs 1 --top 1 " + cases[1].first);
  EXPECT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("invalid: num_query_groups: must be a multiple of "
                          "tensor_model_parallel_size"),
            std::string::npos)
      << s.output;
}

const std::string kTinyTrain =
    "train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
    "--max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --vocab-size 512 "
    "--threads 1 ";

TEST(CliTrain, LayoutsTheStepCannotBuildAreRefusedBeforeMpiStarts) {
  const auto r = run(kTinyTrain +
                     "--train-iters 1 --transformer-impl local --group-query-attention "
                     "--num-query-groups 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("num_query_groups = 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use_flash_attn"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
}

// A measured run's profiler effects are priced by the simulator's adapter only: tandem
// train refuses a scenario that asks for them, naming the field, before any work.
TEST(CliTrain, ProfilerEffectsOfMeasuredRunsAreRefused) {
  const auto dir = tandem::testing::fresh_dir("cli_train_profiler_fields");
  const auto file = dir / "profiled.json";
  tandem::testing::write(file, R"({"model": {"num_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "seq_length": 32, "vocab_size": 512},
    "training": {"micro_batch_size": 2, "global_batch_size": 4, "train_iters": 1,
                 "host_layer_timestamps": true}})");
  const auto r = run("train " + file.string() + " --mock-data --threads 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.host_layer_timestamps = true"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("only tandem simulate prices"), std::string::npos) << r.output;
}

// An error a single process meets once MPI runs (here loading a checkpoint of another
// model) is printed as any command's error, with exit code 2, not MPI's abort banner.
TEST(CliTrain, ASingleProcessReportsItsErrorWithoutMpisAbortBanner) {
  const auto dir = tandem::testing::fresh_dir("cli_train_single_error");
  const auto ckpt = (dir / "ckpt").string();
  const auto saved = run(kTinyTrain + "--train-iters 1 --save " + ckpt);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const auto r = run(kTinyTrain + "--train-iters 2 --load " + ckpt + " --ffn-hidden-size 128");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("load = model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("different model configuration"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0:"), std::string::npos) << r.output;  // MpiRuntime::abort's
}

// A run shorter than its log interval printed nothing; it now ends with Megatron's
// "[after training is done]" line: the iterations reached, the last loss, the wall time.
TEST(CliTrain, SaysWhatItDidAtTheEndWhateverTheLogInterval) {
  const auto r = run(kTinyTrain + "--train-iters 3 --log-interval 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("lm loss: "), std::string::npos) << r.output;  // no interval reached
  EXPECT_NE(r.output.find("[after training is done]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("iterations: 3/3 | steps run: 3 | last loss: "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("elapsed time (s): "), std::string::npos) << r.output;
}

// --trace-ops: one slice per Device op, named and shaped as a real run's trace has them
// (tandem train --trace), on a thread named "ops". The same simulation without it merges
// consecutive ops of one class; per rank the op time is the same either way.
TEST(CliSimulate, TraceOpsGivesEachOpItsSliceAndShape) {
  const auto dir = fresh_dir("tandem_trace_ops");
  const std::string base =
      "simulate " + std::string(TANDEM_SOURCE_DIR) + "/scenarios/brown-small.json --quiet --trace ";
  ASSERT_EQ(run(base + (dir / "classes.json").string()).exit_code, 0);
  const auto alone = run("simulate --quiet --trace-ops");
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("--trace-ops = true: needs --trace or --svg"), std::string::npos)
      << alone.output;
  const auto r = run(base + (dir / "ops.json").string() + " --trace-ops");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(run("trace check " + (dir / "ops.json").string()).exit_code, 0);
  const auto op_time = [](const nlohmann::json& trace, bool per_op,
                          std::map<std::string, int>& names, std::string& thread) {
    std::map<int, double> per_pid;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == trace_thread::op_classes)
        thread = e["args"]["name"].get<std::string>();
      if (e["ph"] != "X" || e["cat"] != "op") continue;
      per_pid[static_cast<int>(e["pid"].get<double>())] += e["dur"].get<double>();
      names[e["name"].get<std::string>()] += 1;
      if (per_op && e["name"] == "gemm") {
        EXPECT_GT(e["args"]["m"].get<double>(), 0) << e.dump();
        EXPECT_GT(e["args"]["k"].get<double>(), 0) << e.dump();
        EXPECT_EQ(e["args"]["class"], "gemm") << e.dump();
      }
    }
    return per_pid;
  };
  std::map<std::string, int> class_names, op_names;
  std::string class_thread, op_thread;
  const auto by_class = op_time(read_json(dir / "classes.json"), false, class_names, class_thread);
  const auto by_op = op_time(read_json(dir / "ops.json"), true, op_names, op_thread);
  EXPECT_EQ(class_thread, "op classes");
  EXPECT_EQ(op_thread, "ops");
  EXPECT_TRUE(class_names.contains("memory-bound"));
  EXPECT_FALSE(class_names.contains("layer_norm"));
  for (const char* op : {"gemm", "layer_norm", "layer_norm_backward", "attention", "adam"})
    EXPECT_TRUE(op_names.contains(op)) << op;
  EXPECT_FALSE(op_names.contains("memory-bound"));
  ASSERT_EQ(by_class.size(), by_op.size());
  for (const auto& [pid, us] : by_class) EXPECT_NEAR(by_op.at(pid), us, 1e-6 * us) << pid;
}

// Llama-3 70B at 16384 tokens on 64 H100 (tp 8 × pp 4 from the scenario): cp 2 halves each
// rank's share of every sequence, so its activations, and its high-water mark, fall below
// cp 1's (where dp doubles instead), while the weights and optimizer state stay alike.
TEST(CliSimulate, ContextParallelismSplitsTheSequenceAndItsActivations) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  const std::string base = "simulate " + std::string(TANDEM_SOURCE_DIR) +
                           "/scenarios/llama3-70b-1024gpu.json --world-size 64 --seq-length "
                           "16384 --max-position-embeddings 16384 --global-batch-size 32 --quiet";
  auto peak = [&](int cp) {
    const auto out = dir / ("tandem_cp" + std::to_string(cp) + ".json");
    const auto r =
        run(base + " --context-parallel-size " + std::to_string(cp) + " --json " + out.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out);
    const auto j = nlohmann::json::parse(in);
    std::filesystem::remove(out);
    return j;
  };
  const auto j1 = peak(1), j2 = peak(2);
  const double cp1 = j1["max_peak_memory_bytes"].get<double>();
  const double cp2 = j2["max_peak_memory_bytes"].get<double>();
  EXPECT_LT(cp2, cp1);
  EXPECT_LT(cp2, 80.0 * (1 << 30));  // fits an H100
  // What held each mark adds up to it; cp 2 halves each rank's sequence, so the activations
  // shrink, while the weights and gradients (same tp and pp) stay, and so does the
  // distributed optimizer's share: Megatron shards it over dp × cp, 16 ranks either way.
  for (const auto* j : {&j1, &j2}) {
    double sum = 0;
    for (const auto& [use, bytes] : (*j)["max_peak_memory_by_use"].items())
      sum += bytes.get<double>();
    EXPECT_EQ(sum, (*j)["max_peak_memory_bytes"].get<double>()) << j->dump();
  }
  const auto& u1 = j1["max_peak_memory_by_use"];
  const auto& u2 = j2["max_peak_memory_by_use"];
  EXPECT_LT(u2["activations"].get<double>(), u1["activations"].get<double>());
  EXPECT_EQ(u2["weights"], u1["weights"]);
  EXPECT_EQ(u2["gradients"], u1["gradients"]);
  EXPECT_EQ(u2["optimizer"], u1["optimizer"]);
}

// The Llama scenarios' parameter counts, as `tandem scenario` prints them, against the
// counts of Meta's released checkpoints (Hugging Face model cards: Llama-2 7B 6,738,415,616
// and 70B 68,976,648,192; Llama-3 8B 8,030,261,248, 70B 70,553,706,496, 405B
// 405,853,388,800). Megatron counts the vocabulary padded to 128 × tp rows, a few rows more.
TEST(CliScenario, LlamaScenariosHaveThePublishedParameterCounts) {
  const std::pair<const char*, double> published[] = {{"llama2-7b-64gpu", 6'738'415'616.0},
                                                      {"llama2-70b-512gpu", 68'976'648'192.0},
                                                      {"llama3-8b-64gpu", 8'030'261'248.0},
                                                      {"llama3-70b-1024gpu", 70'553'706'496.0},
                                                      {"llama3-405b-8192gpu", 405'853'388'800.0}};
  for (const auto& [name, count] : published) {
    const auto r =
        run("scenario " + std::string(TANDEM_SOURCE_DIR) + "/scenarios/" + name + ".json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double n = nlohmann::json::parse(r.output)["derived"]["parameters"].get<double>();
    EXPECT_NEAR(n / count, 1.0, 1e-3) << name << ": " << n;
  }
}

TEST(CliScenario, MixtralHasThePublishedSizesAndSimulatesItsTokenExchangeOverEp) {
  const std::string file = std::string(TANDEM_SOURCE_DIR) + "/scenarios/mixtral-8x7b-64gpu.json";
  const auto r = run("scenario " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  // Mistral AI: 46.7B total parameters, 12.9B used per token.
  EXPECT_NEAR(j["derived"]["parameters"].get<double>() / 1e9, 46.7, 0.05);
  EXPECT_NEAR(j["derived"]["active_parameters"].get<double>() / 1e9, 12.9, 0.05);
  // 64 H100 with ep 8: the all-to-all of the tokens is the ep group's exposed time in the
  // report and slices on the trace's ep thread.
  const auto dir = std::filesystem::path(::testing::TempDir());
  const auto report = dir / "tandem_mixtral.json", trace = dir / "tandem_mixtral_trace.json";
  const auto sim =
      run("simulate " + file + " --quiet --json " + report.string() + " --trace " + trace.string());
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  std::ifstream in(report);
  const auto rep = nlohmann::json::parse(in);
  EXPECT_GT(rep["exposed_seconds"]["ep"].get<double>(), 0.0);
  std::ifstream tin(trace);
  const auto t = nlohmann::json::parse(tin);
  int exchanges = 0;
  bool named = false;
  for (const auto& e : t["traceEvents"]) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
      named = named || e["args"].value("name", "") == "ep comm";
    if (e.value("ph", "") == "X" && e.value("name", "") == "alltoallv ep") ++exchanges;
  }
  EXPECT_TRUE(named);
  // Every MoE layer exchanges twice forward and twice backward, per microbatch.
  EXPECT_GT(exchanges, 0);
}

TEST(CliSimulate, FlopsFollowTheLlamaShape) {
  const auto out = std::filesystem::path(::testing::TempDir()) / "tandem_llama_flops.json";
  const auto r = run("simulate " + std::string(TANDEM_SOURCE_DIR) +
                     "/scenarios/llama-small.json --ffn-hidden-size 640 --vocab-size 50304 "
                     "--quiet --json " +
                     out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  const double per_token = 6.0 * 4 * 256 * (640.0 * 3 + 256 + 2 * 64 + 256) + 6.0 * 256 * 50304;
  const double half_scores = 6.0 * 8 * 128.0 * 128 * 4 * 256;
  const double log_flops = 8 * 128 * per_token + half_scores;  // 96,032,784,384
  EXPECT_DOUBLE_EQ(j["megatron_log_flops_per_iteration"].get<double>(), log_flops);
  EXPECT_DOUBLE_EQ(j["model_flops_per_iteration"].get<double>(), log_flops + half_scores);
  // No recomputation in llama-small: the hardware does the model's FLOPs.
  EXPECT_DOUBLE_EQ(j["hardware_flops_per_iteration"].get<double>(), log_flops + half_scores);
}

}  // namespace
