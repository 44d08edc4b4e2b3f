// The tandem binary, run as a user runs it: the documented examples produce the documented
// output, files are written, bad input exits with code 2 and a message naming the field.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/tools/run_tandem.hpp"

namespace {

using tandem::testing::Result;
using tandem::testing::run;

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

TEST(Cli, ScenarioFlagsOverrideTheDefault) {
  const auto j = run_json(
      "scenario --tensor-model-parallel-size 4 --pipeline-model-parallel-size 1 "
      "--sequence-parallel");
  EXPECT_EQ(j["parallelism"]["tensor_model_parallel_size"], 4);
  EXPECT_EQ(j["parallelism"]["sequence_parallel"], true);
  EXPECT_EQ(j["derived"]["data_parallel_size"], 2);  // 8 / (4 · 1)
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

}  // namespace
