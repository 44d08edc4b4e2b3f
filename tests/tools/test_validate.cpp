// `tandem validate` and `tandem trace diff`, run as a user runs them. The validate table's
// errors are checked against numbers computed here from `tandem simulate --json` run on
// its own; bad tables are rejected before any simulation, naming the line, the column, the
// value and the rule; trace diff's JSON gives the per-class sums of two hand-written traces.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/tools/run_tandem.hpp"
#include "tests/tools/scratch_files.hpp"

namespace {

namespace fs = std::filesystem;

using tandem::testing::Result;
using tandem::testing::run;

using tandem::testing::fresh_dir;
using tandem::testing::read_json;
using tandem::testing::write;

// Two small GPTs on one DGX A100 node: tp 2 × pp 2 × dp 2, and pp 4 × dp 2.
void write_small_scenarios(const fs::path& dir) {
  write(dir / "small-tp2-pp2.json", R"({"name": "small-tp2-pp2",
    "model": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
              "seq_length": 1024, "vocab_size": 50257},
    "parallelism": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
    "training": {"micro_batch_size": 2, "global_batch_size": 16, "fp16": true},
    "cluster": {"world_size": 8, "gpus_per_node": 8, "topology": "dgx-a100-80g"}})");
  write(dir / "small-pp4.json", R"({"name": "small-pp4",
    "model": {"num_layers": 8, "hidden_size": 512, "num_attention_heads": 8,
              "seq_length": 512, "vocab_size": 50257},
    "parallelism": {"pipeline_model_parallel_size": 4},
    "training": {"micro_batch_size": 1, "global_batch_size": 16, "fp16": true},
    "cluster": {"world_size": 8, "gpus_per_node": 8, "topology": "dgx-a100-80g"}})");
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string one_decimal(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

class Validate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("tandem_validate_small");
    write_small_scenarios(dir_);
    // The predictions, from `tandem simulate` run on its own.
    for (const char* name : {"small-tp2-pp2", "small-pp4"}) {
      const auto out = dir_ / (std::string(name) + ".report.json");
      const auto r = run("simulate " + (dir_ / (std::string(name) + ".json")).string() +
                         " --quiet --json " + out.string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
      reports_[name] = read_json(out);
    }
  }
  static fs::path dir_;
  static std::map<std::string, nlohmann::json> reports_;
};
fs::path Validate::dir_;
std::map<std::string, nlohmann::json> Validate::reports_;

TEST_F(Validate, ErrorsMatchSeparateSimulateRuns) {
  const double t_a = reports_["small-tp2-pp2"]["iteration_seconds"].get<double>();
  const double t_b = reports_["small-pp4"]["iteration_seconds"].get<double>();
  const double tf_a = reports_["small-tp2-pp2"]["hardware_tflops_per_gpu"].get<double>();
  ASSERT_GT(t_a, 0);
  ASSERT_GT(t_b, 0);
  // Published values 2 % below and 30 % above the predictions: errors +2.04 % and −23.08 %.
  const double pub_a = t_a / 1.02, pub_b = t_b * 1.3, pub_tf = tf_a * 2;
  write(dir_ / "published.csv",
        "scenario,metric,value,unit,source\n"
        "small-tp2-pp2,iteration_time," +
            number(pub_a) + ",s,\"made up, for the test\"\nsmall-pp4,iteration_time," +
            number(pub_b) + ",s,made up\nsmall-tp2-pp2,hardware_tflops_per_gpu," + number(pub_tf) +
            ",TFLOP/s,made up\n");
  const auto json = dir_ / "validate.json";
  const auto r = run("validate " + dir_.string() + " --jobs 2 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;  // target missed, no --check: still 0

  const double err_a = (t_a - pub_a) / pub_a * 100, err_b = (t_b - pub_b) / pub_b * 100;
  const double err_tf = (tf_a - pub_tf) / pub_tf * 100;
  EXPECT_NEAR(err_a, 2.0, 1e-9);
  EXPECT_NEAR(err_b, -100.0 * 0.3 / 1.3, 1e-9);
  const auto j = read_json(json);
  ASSERT_EQ(j["rows"].size(), 3u);
  const std::vector<double> expected{err_a, err_b, err_tf};
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(j["rows"][i]["error_percent"].get<double>(), expected[i], 1e-9) << i;
  EXPECT_NEAR(j["rows"][1]["predicted"].get<double>(), t_b, 1e-12 * t_b);
  EXPECT_EQ(j["rows"][0]["source"], "made up, for the test");
  // Median of two |errors| is their mean; max is the larger.
  const auto& s = j["summary"]["iteration_time"];
  EXPECT_EQ(s["rows"], 2);
  EXPECT_NEAR(s["median_abs_error_percent"].get<double>(), (std::abs(err_a) + std::abs(err_b)) / 2,
              1e-9);
  EXPECT_NEAR(s["max_abs_error_percent"].get<double>(), std::abs(err_b), 1e-9);
  EXPECT_FALSE(j["target_met"].get<bool>());
  EXPECT_EQ(j["mode"], "symmetric");
  EXPECT_TRUE(j["reports"].contains("small-pp4"));

  // The printed table carries the same errors, one decimal.
  EXPECT_NE(r.output.find(one_decimal(err_a)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(one_decimal(err_b)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MISSED"), std::string::npos) << r.output;

  const auto checked = run("validate " + dir_.string() + " --check");
  EXPECT_EQ(checked.exit_code, 1) << checked.output;
  EXPECT_NE(checked.output.find("target missed"), std::string::npos) << checked.output;
}

// A throughput and a time of one run give the work per iteration the source measured
// (published TFLOP/s × published time); the scenario does predicted TFLOP/s × predicted time.
// A row whose two disagree by more than 2 % is named: the scenario is not the measured run.
TEST_F(Validate, AThroughputAndATimeThatImplyAnotherRunAreNamed) {
  const double t_a = reports_["small-tp2-pp2"]["iteration_seconds"].get<double>();
  const double t_b = reports_["small-pp4"]["iteration_seconds"].get<double>();
  const double tf_a = reports_["small-tp2-pp2"]["hardware_tflops_per_gpu"].get<double>();
  const double tf_b = reports_["small-pp4"]["hardware_tflops_per_gpu"].get<double>();
  const auto dir = fresh_dir("tandem_validate_work");
  write_small_scenarios(dir);
  // Run a: 10 % slower than predicted, at the TFLOP/s its own FLOPs give (work ratio 1).
  // Run b: at the predicted time, 5 % more TFLOP/s (ratio 1.05: 5 % more work).
  const double pub_t_a = t_a * 1.1, pub_tf_a = tf_a / 1.1, pub_tf_b = tf_b * 1.05;
  write(dir / "published.csv",
        "scenario,metric,value,unit,source\nsmall-tp2-pp2,iteration_time," + number(pub_t_a) +
            ",s,made up\nsmall-tp2-pp2,hardware_tflops_per_gpu," + number(pub_tf_a) +
            ",TFLOP/s,made up\nsmall-pp4,iteration_time," + number(t_b) +
            ",s,made up\nsmall-pp4,hardware_tflops_per_gpu," + number(pub_tf_b) +
            ",TFLOP/s,made up\n");
  const auto json = dir / "validate.json";
  const auto r = run("validate " + dir.string() + " --jobs 2 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(json);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_TRUE(j["rows"][0]["work_ratio"].is_null());  // a time row
  EXPECT_NEAR(j["rows"][1]["work_ratio"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(j["rows"][3]["work_ratio"].get<double>(), 1.05, 1e-9);
  EXPECT_NE(r.output.find("throughput × time: 1 row(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("small-pp4 hardware_tflops_per_gpu (5.0 % above)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("small-tp2-pp2 hardware_tflops_per_gpu ("), std::string::npos)
      << r.output;
}

TEST_F(Validate, CheckPassesWhenWithinTheTarget) {
  const double t_a = reports_["small-tp2-pp2"]["iteration_seconds"].get<double>();
  const double t_b = reports_["small-pp4"]["iteration_seconds"].get<double>();
  // Errors +2 % and −3 %: median 2.5 %, max 3 %, inside 5 % / 10 %.
  const auto dir = fresh_dir("tandem_validate_met");
  write_small_scenarios(dir);
  write(dir / "published.csv", "scenario,metric,value,unit,source\nsmall-tp2-pp2,iteration_time," +
                                   number(t_a / 1.02) + ",s,x\nsmall-pp4,iteration_time," +
                                   number(t_b / 0.97) + ",s,x\n");
  const auto r = run("validate " + dir.string() + " --check --json " + (dir / "v.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(dir / "v.json");
  EXPECT_TRUE(j["target_met"].get<bool>());
  EXPECT_NEAR(j["summary"]["iteration_time"]["median_abs_error_percent"].get<double>(), 2.5, 1e-9);
  EXPECT_NEAR(j["summary"]["iteration_time"]["max_abs_error_percent"].get<double>(), 3.0, 1e-9);
  EXPECT_NE(r.output.find(": met"), std::string::npos) << r.output;
  // --target-max / --target-median hold the published runs to other bounds: max 3 % is
  // missed at 2.9, met at 3.1.
  const auto tight = run("validate " + dir.string() + " --check --target-max 2.9");
  EXPECT_EQ(tight.exit_code, 1) << tight.output;
  EXPECT_NE(tight.output.find("max ≤ 2.9 % over all sets"), std::string::npos) << tight.output;
  EXPECT_NE(tight.output.find("MISSED"), std::string::npos) << tight.output;
  EXPECT_EQ(run("validate " + dir.string() + " --check --target-max 3.1").exit_code, 0);
  EXPECT_EQ(run("validate " + dir.string() + " --check --target-median 2.4").exit_code, 1);
}

// A table of several sets: each row's iteration-time error (a throughput's turned into the
// time it implies: published / predicted − 1), summarised per set and over all, each set's
// median held to its own bound, a run read twice (its time and its TFLOP/s) counted once,
// the presets' fitted parameters named under the set they saw.
TEST_F(Validate, SetsAreSummarisedAndJudgedApart) {
  const double t_a = reports_["small-tp2-pp2"]["iteration_seconds"].get<double>();
  const double tf_a = reports_["small-tp2-pp2"]["hardware_tflops_per_gpu"].get<double>();
  const double tf_b = reports_["small-pp4"]["hardware_tflops_per_gpu"].get<double>();
  const auto dir = fresh_dir("tandem_validate_sets");
  write_small_scenarios(dir);
  // Set korthikanti2022: small-tp2-pp2 predicted fast (the run took 1.02 of the predicted
  // time: time error 1/1.02 − 1). Set b: small-pp4's TFLOP/s published
  // 25 % above the prediction, i.e. the run took 1/1.25 of the time predicted: time error
  // +25 %; and small-tp2-pp2's TFLOP/s, the run whose time is already counted: shown, not
  // counted.
  write(dir / "published.csv",
        "scenario,metric,value,unit,set,source\n"
        "small-tp2-pp2,iteration_time," +
            number(t_a * 1.02) +
            ",s,korthikanti2022,x\n"
            "small-pp4,hardware_tflops_per_gpu," +
            number(tf_b * 1.25) +
            ",TFLOP/s,b,x\n"
            "small-tp2-pp2,hardware_tflops_per_gpu," +
            number(tf_a * 0.5) + ",TFLOP/s,b,x\n");
  const auto json = dir / "v.json";
  const auto r = run("validate " + dir.string() + " --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(json);
  EXPECT_NEAR(j["rows"][1]["error_percent"].get<double>(), -20.0, 1e-9);  // 1/1.25 − 1
  EXPECT_NEAR(j["rows"][1]["time_error_percent"].get<double>(), 25.0, 1e-9);
  EXPECT_TRUE(j["rows"][1]["counted"].get<bool>());
  EXPECT_NEAR(j["rows"][2]["time_error_percent"].get<double>(), -50.0, 1e-9);  // 0.5 − 1
  EXPECT_FALSE(j["rows"][2]["counted"].get<bool>());
  EXPECT_EQ(j["rows"][1]["set"], "b");
  EXPECT_EQ(j["sets"]["b"]["rows"], 1);
  EXPECT_NEAR(j["sets"]["b"]["median_abs_error_percent"].get<double>(), 25.0, 1e-9);
  const double fast = (1 / 1.02 - 1) * 100;  // −1.96 %
  EXPECT_NEAR(j["sets"]["korthikanti2022"]["median_abs_error_percent"].get<double>(), -fast, 1e-9);
  EXPECT_EQ(j["overall"]["rows"], 2);
  EXPECT_NEAR(j["overall"]["median_abs_error_percent"].get<double>(), (25 - fast) / 2, 1e-9);
  // Which way each set leans: the signed median and the rows predicted fast.
  EXPECT_NEAR(j["sets"]["korthikanti2022"]["median_error_percent"].get<double>(), fast, 1e-9);
  EXPECT_EQ(j["sets"]["korthikanti2022"]["rows_below_zero"], 1);
  EXPECT_NEAR(j["sets"]["b"]["median_error_percent"].get<double>(), 25.0, 1e-9);
  EXPECT_EQ(j["sets"]["b"]["rows_below_zero"], 0);
  EXPECT_NEAR(j["overall"]["median_error_percent"].get<double>(), (25 + fast) / 2, 1e-9);
  EXPECT_EQ(j["overall"]["rows_below_zero"], 1);
  EXPECT_NE(r.output.find("1 of 2"), std::string::npos) << r.output;
  // The sets no preset parameter saw (b; korthikanti2022 fitted dgx-a100-80g's GEMM
  // fraction): what transfers, summarised apart.
  EXPECT_EQ(j["unfitted_sets"]["rows"], 1);
  EXPECT_NEAR(j["unfitted_sets"]["median_error_percent"].get<double>(), 25.0, 1e-9);
  EXPECT_NE(r.output.find("sets nothing was fitted on"), std::string::npos) << r.output;
  EXPECT_NEAR(j["overall"]["p95_abs_error_percent"].get<double>(), 25.0, 1e-9);  // 2nd of 2
  EXPECT_NEAR(j["overall"]["max_abs_error_percent"].get<double>(), 25.0, 1e-9);
  EXPECT_NE(r.output.find("(the same run as its time row)"), std::string::npos) << r.output;
  // dgx-a100-80g says its GEMM fraction saw Korthikanti's rows and its host costs vTrain's.
  bool named = false;
  for (const auto& f : j["fitted_on"]["korthikanti2022"])
    named =
        named || (f["topology"] == "dgx-a100-80g" && f["parameter"] == "gpu.gemm_peak_fraction");
  EXPECT_TRUE(named) << j["fitted_on"].dump();
  EXPECT_NE(r.output.find("dgx-a100-80g gpu.gemm_peak_fraction"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(fitted on vtrain_single_node, not in this table: dgx-a100-80g gpu."),
            std::string::npos)
      << r.output;
  // Over all: median 13.5 %, max 25 %. Allowing those, set b's median of 25 % still misses
  // the per-set bound of 7 %; 26 % lets it pass.
  const std::string loose = " --check --target-median 14 --target-max 30";
  EXPECT_EQ(run("validate " + dir.string() + loose).exit_code, 1);
  EXPECT_EQ(run("validate " + dir.string() + loose + " --target-set-median 26").exit_code, 0);
  // --set keeps one set's rows; a set the table lacks is refused before any simulation.
  const auto one = run("validate " + dir.string() + " --set korthikanti2022 --check");
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(one.output.find("small-pp4"), std::string::npos) << one.output;
  const auto bad = run("validate " + dir.string() + " --set c");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--set = c: is not a set of"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("simulated in"), std::string::npos) << bad.output;
}

// searched.csv: a scenario whose micro batch its authors did not state is compared at the
// fastest micro batch; here the fastest of `tandem simulate` run on its own at each.
TEST_F(Validate, SearchedKnobsAreComparedAtTheFastestLayout) {
  const auto dir = fresh_dir("tandem_validate_searched");
  write_small_scenarios(dir);
  double fastest = 0;
  int fastest_mbs = 0;
  for (int mbs : {1, 2, 4, 8}) {  // global batch 16 over dp 2: each divides 8
    const auto out = dir / ("mbs" + std::to_string(mbs) + ".json");
    const auto r =
        run("simulate " + (dir / "small-tp2-pp2.json").string() + " --quiet --micro-batch-size " +
            std::to_string(mbs) + " --json " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double t = read_json(out)["iteration_seconds"].get<double>();
    if (fastest_mbs == 0 || t < fastest) fastest = t, fastest_mbs = mbs;
  }
  const double t_b = reports_["small-pp4"]["iteration_seconds"].get<double>();
  write(dir / "published.csv",
        "scenario,metric,value,unit,source\nsmall-tp2-pp2,iteration_time,1,s,x\n"
        "small-pp4,iteration_time," +
            number(t_b) + ",s,x\n");
  write(dir / "searched.csv",
        "scenario,fields,source\nsmall-tp2-pp2,mbs,\"micro batch not stated, for the test\"\n");
  const auto dry = run("validate " + dir.string() + " --dry-run");
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("small-tp2-pp2.json (searched: mbs)"), std::string::npos) << dry.output;
  const auto json = dir / "v.json";
  const auto r = run("validate " + dir.string() + " --jobs 2 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(json);
  EXPECT_NEAR(j["rows"][0]["predicted"].get<double>(), fastest, 1e-9 * fastest);
  EXPECT_NEAR(j["rows"][1]["predicted"].get<double>(), t_b, 1e-9 * t_b);  // not searched
  const auto& s = j["searched"]["small-tp2-pp2"];
  EXPECT_EQ(s["fields"], nlohmann::json::array({"mbs"}));
  EXPECT_NE(s["picked"].get<std::string>().find("mbs" + std::to_string(fastest_mbs)),
            std::string::npos)
      << s.dump();
  EXPECT_FALSE(j["searched"].contains("small-pp4"));
  EXPECT_NE(r.output.find("small-tp2-pp2 [mbs]: tp2 pp2 mbs" + std::to_string(fastest_mbs)),
            std::string::npos)
      << r.output;

  // A field the search does not know, a scenario the table lacks and a row without a source
  // are refused before anything runs.
  write(dir / "searched.csv",
        "scenario,fields,source\nsmall-tp2-pp2,mbs microbatch,x\nno-such-run,mbs,x\n"
        "small-pp4,mbs,\n");
  const auto bad = run("validate " + dir.string());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  for (const std::string& expected :
       {std::string("line 2, fields = microbatch: is not a field tandem search searches"),
        std::string("line 3, scenario = no-such-run: is not a scenario of published.csv"),
        std::string("line 4, source: must say what the publication leaves out")})
    EXPECT_NE(bad.output.find(expected), std::string::npos) << expected << "\n" << bad.output;
  EXPECT_EQ(bad.output.find("searched in"), std::string::npos) << bad.output;
}

TEST(ValidateInput, MissingTableIsRejected) {
  const auto dir = fresh_dir("tandem_validate_missing");
  const auto r = run("validate " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "published.csv").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot be opened"), std::string::npos) << r.output;
}

TEST(ValidateInput, EveryBadRowIsNamedBeforeAnySimulation) {
  const auto dir = fresh_dir("tandem_validate_bad");
  write_small_scenarios(dir);
  write(dir / "published.csv",
        "scenario,metric,value,unit,source\n"
        "small-pp4,iteration_time,1.2x,s,unparsable value\n"
        "no-such-run,iteration_time,3,s,unknown scenario\n"
        "small-pp4,iteration_time,2,ms,\"wrong unit, quoted source\"\n"
        "small-tp2-pp2,step_time,2,s,unknown metric\n"
        "small-tp2-pp2,iteration_time,-1,s,negative\n");
  const auto r = run("validate " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string csv = (dir / "published.csv").string();
  for (const std::string& expected :
       {csv, std::string("line 2, value = 1.2x: must be a positive number"),
        "line 3, scenario = no-such-run: no such scenario: " + (dir / "no-such-run.json").string(),
        std::string("line 4, unit = ms: the unit of iteration_time must be s"),
        std::string("line 5, metric = step_time: must be one of iteration_time"),
        std::string("line 6, value = -1: must be a positive number")})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
  EXPECT_EQ(r.output.find("simulated in"), std::string::npos) << r.output;  // nothing ran
}

TEST(ValidateInput, InvalidScenarioAndHeaderAreRejected) {
  const auto dir = fresh_dir("tandem_validate_bad_scenario");
  write(dir / "broken.json",
        R"({"model": {"num_layers": 6}, "parallelism": {"pipeline_model_parallel_size": 4},
            "cluster": {"world_size": 4}})");
  write(dir / "published.csv", "scenario,metric,value,unit,source\nbroken,iteration_time,1,s,x\n");
  auto r = run("validate " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 2, scenario = broken"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("num_layers"), std::string::npos) << r.output;

  write(dir / "published.csv", "scenario;metric;value\n");
  r = run("validate " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 1, header = scenario;metric;value"), std::string::npos) << r.output;
}

TEST(ValidateInput, PublishedScenariosAreAllValid) {
  const auto r =
      run("validate " + std::string(TANDEM_SOURCE_DIR) + "/scenarios/published --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Korthikanti's 9 runs, the Megatron README's, Narayanan et al.'s 16, MegaScale's 12
  // Megatron-LM baselines, BLOOM's, Megatron-Core's 11 H100 runs, NeMo 24.07's 12 and MLPerf
  // v3.1's 7 H100 FP8 runs, NeMo 25.02's 6 B200 and 1 H100, NeMo 25.04's 5 GB200 and NeMo
  // 25.11's 11 B200 / GB200 / GB300 / H100 FP8 and MXFP8 runs: one scenario each.
  EXPECT_NE(r.output.find("92 scenario(s), all valid"), std::string::npos) << r.output;
}

TEST(TraceDiffCli, PerClassSumsOfTwoTraces) {
  const auto dir = fresh_dir("tandem_trace_diff");
  auto slice = [](const std::string& name, int pid, double ts, double dur) {
    return nlohmann::json{{"name", name}, {"ph", "X"}, {"pid", pid},
                          {"tid", 0},     {"ts", ts},  {"dur", dur}};
  };
  // A: F0 1 ms, F1 2 ms, B0 3 ms. B: F0.0 1.5 ms, F0.1 1.5 ms, F1.0 3 ms, B0.0 6 ms.
  write(dir / "a.json", nlohmann::json{{"traceEvents",
                                        {slice("F0", 0, 0, 1000), slice("F1", 0, 1000, 2000),
                                         slice("B0", 0, 3000, 3000)}}}
                            .dump());
  write(dir / "b.json",
        nlohmann::json{{"traceEvents",
                        {slice("F0.0", 0, 0, 1500), slice("F0.1", 0, 1500, 1500),
                         slice("F1.0", 0, 3000, 3000), slice("B0.0", 0, 6000, 6000)}}}
            .dump());
  const auto out = dir / "diff.json";
  const auto r = run("trace diff " + (dir / "a.json").string() + " " + (dir / "b.json").string() +
                     " --json " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(out);
  ASSERT_EQ(j["classes"].size(), 2u);
  EXPECT_EQ(j["classes"][1]["class"], "F");
  EXPECT_EQ(j["classes"][1]["a"]["count"], 2);
  EXPECT_EQ(j["classes"][1]["b"]["count"], 3);
  EXPECT_DOUBLE_EQ(j["classes"][1]["total_ratio"].get<double>(), 6.0 / 3.0);
  EXPECT_DOUBLE_EQ(j["classes"][1]["mean_ratio"].get<double>(), 2.0 / 1.5);
  EXPECT_DOUBLE_EQ(j["classes"][0]["total_ratio"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["a"]["span_ms"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(j["b"]["span_ms"].get<double>(), 12.0);
  EXPECT_NE(r.output.find("total B/A"), std::string::npos) << r.output;

  const auto missing = run("trace diff " + (dir / "a.json").string() + " /nonexistent.json");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent.json"), std::string::npos) << missing.output;
}

}  // namespace
