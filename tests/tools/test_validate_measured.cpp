// `tandem validate FILE.csv`: measured runs (vTrain's columns) against the simulator, run
// as a user runs it. Each row's prediction must equal `tandem simulate` of the scenario
// the row stands for (written here by hand: fp16, full recomputation, 1F1B, vTrain's
// model: vocabulary 50257 unpadded, 50257 / tp rows per rank, untied output layer); each
// row's half must be the parity of FNV-1a 64 of its line, computed here by
// an implementation of the published algorithm checked against its published test
// vectors; the per-half median / mean / max are recomputed here from the rows; bad rows
// are rejected before any simulation, naming line, column, value and rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/run_tandem.hpp"
#include "tests/tools/scratch_files.hpp"

namespace {

namespace fs = std::filesystem;
using tandem::testing::run;

using tandem::testing::fresh_dir;
using tandem::testing::read_json;
using tandem::testing::write;

// FNV-1a, 64 bits (Fowler, Noll, Vo; IETF draft-eastlake-fnv): offset basis
// 0xcbf29ce484222325, prime 0x100000001b3.
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

TEST(MeasuredRunsHash, Fnv1aMatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Row {
  int gpus, gb, mb, h, heads, layers, seq, tp, dp, pp;
  double factor;  // measured = predicted / factor
};

// The scenario a vTrain row stands for, written out independently of tandem's reader.
std::string scenario_json(const Row& r, const std::string& topology = "vtrain-a100") {
  std::ostringstream s;
  s << R"({"name": "row", "model": {"num_layers": )" << r.layers << R"(, "hidden_size": )" << r.h
    << R"(, "num_attention_heads": )" << r.heads << R"(, "seq_length": )" << r.seq
    << R"(, "vocab_size": )" << r.tp * (50257 / r.tp)
    << R"(, "make_vocab_size_divisible_by": 1, "untie_embeddings_and_output_weights": true,
              "attention_dropout": 0.1, "hidden_dropout": 0.1},
    "parallelism": {"tensor_model_parallel_size": )"
    << r.tp << R"(, "pipeline_model_parallel_size": )" << r.pp << R"(, "pipeline_schedule": ")"
    << (r.pp > 1 ? "1f1b" : "auto") << R"("},
    "training": {"micro_batch_size": )"
    << r.mb << R"(, "global_batch_size": )" << r.gb
    << R"(, "fp16": true, "recompute_granularity": "full", "recompute_method": "uniform",
                 "recompute_num_layers": 1, "deepspeed": true, "host_layer_timestamps": true,
                 "host_sync_output_layer": true,
                 "async_tensor_model_parallel_allreduce": false},
    "cluster": {"world_size": )"
    << r.gpus << R"(, "gpus_per_node": 8, "topology": ")" << topology << R"("}})";
  return s.str();
}

// vTrain's header, as its files have it.
const std::string kHeader =
    "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence "
    "length,tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n";

// A row of vTrain's columns measured at `ms`.
std::string csv_line(const Row& r, double ms) {
  std::ostringstream l;
  l << r.gpus << "," << r.gb << "," << r.mb << "," << r.h << "," << r.heads << "," << r.layers
    << "," << r.seq << "," << r.tp << "," << r.dp << "," << r.pp << "," << number(ms);
  return l.str();
}

// Each row's scenario through `tandem simulate`: its predicted iteration time in ms.
std::vector<double> simulate_each(const fs::path& dir, const std::vector<Row>& rows) {
  std::vector<double> predicted_ms;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto file = dir / ("row" + std::to_string(i) + ".json");
    write(file, scenario_json(rows[i]));
    const auto out = dir / ("row" + std::to_string(i) + ".report.json");
    const auto r = run("simulate " + file.string() + " --quiet --json " + out.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    predicted_ms.push_back(
        r.exit_code == 0 ? read_json(out)["iteration_seconds"].get<double>() * 1e3 : 0.0);
  }
  return predicted_ms;
}

TEST(ValidateMeasured, RowsMatchSimulateAndSplitByHash) {
  const auto dir = fresh_dir("tandem_validate_measured");
  const std::vector<Row> rows = {{2, 4, 1, 512, 8, 4, 512, 1, 1, 2, 1.02},
                                 {4, 8, 2, 512, 8, 4, 512, 2, 2, 1, 0.9},
                                 {4, 4, 1, 1024, 16, 4, 512, 4, 1, 1, 1.5}};
  const std::vector<double> predicted_ms = simulate_each(dir, rows);
  ASSERT_FALSE(HasFailure());
  std::string csv = kHeader;
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    lines.push_back(csv_line(rows[i], predicted_ms[i] / rows[i].factor));
    csv += lines.back() + "\n";
  }
  write(dir / "runs.csv", csv);
  const auto json = dir / "v.json";
  const auto r =
      run("validate " + (dir / "runs.csv").string() + " --jobs 2 --json " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(json);
  ASSERT_EQ(j["rows"].size(), rows.size());
  std::map<std::string, std::vector<double>> errors;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = j["rows"][i];
    EXPECT_EQ(row["line"], static_cast<int>(i) + 2);
    const std::string half = fnv1a(lines[i]) % 2 == 0 ? "calibration" : "validation";
    EXPECT_EQ(row["half"], half) << lines[i];
    EXPECT_NEAR(row["predicted_ms"].get<double>(), predicted_ms[i], 1e-9 * predicted_ms[i]);
    const double err = (rows[i].factor - 1) * 100;  // (pred − pred/f) / (pred/f)
    EXPECT_NEAR(row["error_percent"].get<double>(), err, 1e-6) << i;
    errors[half].push_back(std::abs(err));
    // The breakdown of the run comes with each row.
    EXPECT_TRUE(row.contains("breakdown")) << row.dump();
  }
  for (const auto& [half, e] : errors) {
    const auto& s = j["halves"][half];
    EXPECT_EQ(s["rows"], static_cast<int>(e.size()));
    EXPECT_NEAR(s["median_abs_error_percent"].get<double>(), median(e), 1e-6);
    EXPECT_NEAR(s["max_abs_error_percent"].get<double>(), *std::max_element(e.begin(), e.end()),
                1e-6);
    // Nearest rank: the ⌈0.95·n⌉-th smallest, counted here by how many errors lie below it.
    const double p95 = s["p95_abs_error_percent"].get<double>();
    const auto below = std::count_if(e.begin(), e.end(), [&](double x) { return x < p95 - 1e-9; });
    const auto at_most =
        std::count_if(e.begin(), e.end(), [&](double x) { return x <= p95 + 1e-9; });
    const auto rank = static_cast<long>(std::ceil(0.95 * static_cast<double>(e.size())));
    EXPECT_LT(below, rank) << half;
    EXPECT_GE(at_most, rank) << half;
    double sum = 0;
    for (double x : e) sum += x;
    EXPECT_NEAR(s["mean_abs_error_percent"].get<double>(), sum / static_cast<double>(e.size()),
                1e-6);
  }
  // One half at a time: --half picks its rows only.
  const auto only = run("validate " + (dir / "runs.csv").string() + " --half calibration --json " +
                        (dir / "c.json").string());
  ASSERT_EQ(only.exit_code, 0) << only.output;
  const auto c = read_json(dir / "c.json");
  EXPECT_EQ(c["rows"].size(), errors["calibration"].size());
  for (const auto& row : c["rows"]) EXPECT_EQ(row["half"], "calibration");
}

TEST(ValidateMeasured, BadRowsAreNamedBeforeAnySimulation) {
  const auto dir = fresh_dir("tandem_validate_measured_bad");
  write(dir / "runs.csv",
        "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence "
        "length,tensor parallelism,data parallelism,pipeline parallelism,iteration time "
        "(ms),precision\n"
        "6,8,1,512,8,4,512,2,2,1,10,fp16\n"
        "2,8,1.5,512,8,4,512,1,2,1,10,fp16\n"
        "2,8,1,512,8,4,512,1,2,1,-3,fp16\n"
        "2,8,1,512,8,4,512,1,2,1,10,fp8\n");
  const auto r = run("validate " + (dir / "runs.csv").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const std::string expected :
       {"line 2, # GPUs = 6: must equal tensor × data × pipeline parallelism (4)",
        "line 3, micro batch = 1.5: must be an integer ≥ 1",
        "line 4, iteration time (ms) = -3: must be a positive number",
        "line 5, precision = fp8: must be fp16, bf16 or fp32"})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
  EXPECT_EQ(r.output.find("simulated"), std::string::npos) << r.output;

  write(dir / "runs.csv", "# GPUs,global batch\n2,8\n");
  const auto h = run("validate " + (dir / "runs.csv").string());
  EXPECT_EQ(h.exit_code, 2) << h.output;
  EXPECT_NE(h.output.find("line 1, header = micro batch: required column missing"),
            std::string::npos)
      << h.output;
}

// A row over more than one node is priced on vTrain's cluster (vtrain-a100: 800 Gb/s of
// InfiniBand a node), as `tandem simulate` prices its scenario there; on a DGX A100's 1600
// Gb/s the same row's data-parallel all-reduce, and so the row, would be faster.
TEST(ValidateMeasured, RowsOverSeveralNodesArePricedOnVtrainsCluster) {
  const auto dir = fresh_dir("tandem_validate_measured_nodes");
  const Row row{16, 16, 1, 2048, 16, 2, 512, 1, 16, 1, 1.0};
  std::map<std::string, double> predicted_ms;
  for (const std::string topology : {"vtrain-a100", "dgx-a100-80g"}) {
    write(dir / (topology + ".json"), scenario_json(row, topology));
    const auto out = dir / (topology + ".report.json");
    const auto r = run("simulate " + (dir / (topology + ".json")).string() + " --quiet --json " +
                       out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    predicted_ms[topology] = read_json(out)["iteration_seconds"].get<double>() * 1e3;
  }
  EXPECT_GT(predicted_ms["vtrain-a100"], 1.01 * predicted_ms["dgx-a100-80g"]);
  write(dir / "runs.csv", kHeader + "16,16,1,2048,16,2,512,1,16,1,100\n");
  const auto r =
      run("validate " + (dir / "runs.csv").string() + " --json " + (dir / "v.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(read_json(dir / "v.json")["rows"][0]["predicted_ms"].get<double>(),
              predicted_ms["vtrain-a100"], 1e-9 * predicted_ms["vtrain-a100"]);
}

// Ranks 1..n of distinct values (the test's rows are chosen with distinct predictions).
std::vector<double> distinct_ranks(const std::vector<double>& x) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    r[i] = 1 + static_cast<double>(
                   std::count_if(x.begin(), x.end(), [&](double y) { return y < x[i]; }));
  return r;
}

// The layouts of one job (model, GPUs, global batch) are ranked by Spearman's rho, here from
// the textbook formula 1 − 6·Σd²/(n(n² − 1)) over rows whose measured times are their
// predictions with two pairs swapped; a job of one row is not ranked; the rows are
// summarised per node count (the 16-GPU row spans two nodes of eight).
TEST(ValidateMeasured, LayoutRankingAndNodeCountsAreSummarised) {
  const auto dir = fresh_dir("tandem_validate_measured_rank");
  const std::vector<Row> rows = {
      {4, 16, 1, 512, 8, 4, 512, 1, 4, 1, 1.0}, {4, 16, 1, 512, 8, 4, 512, 2, 2, 1, 1.0},
      {4, 16, 1, 512, 8, 4, 512, 4, 1, 1, 1.0}, {4, 16, 1, 512, 8, 4, 512, 1, 2, 2, 1.0},
      {4, 16, 2, 512, 8, 4, 512, 2, 1, 2, 1.0}, {16, 16, 1, 512, 8, 4, 512, 1, 16, 1, 1.1}};
  const std::vector<double> predicted = simulate_each(dir, rows);
  ASSERT_FALSE(HasFailure());
  const std::vector<double> job(predicted.begin(), predicted.begin() + 5);
  ASSERT_EQ(std::set<double>(job.begin(), job.end()).size(), 5u) << "predictions must differ";
  const std::vector<double> measured = {job[1], job[0], job[2], job[4], job[3]};
  const auto rp = distinct_ranks(job), rm = distinct_ranks(measured);
  double d2 = 0;
  for (std::size_t i = 0; i < 5; ++i) d2 += (rp[i] - rm[i]) * (rp[i] - rm[i]);
  const double rho = 1 - 6 * d2 / (5 * (25 - 1));
  ASSERT_LT(rho, 1.0);
  std::string csv = kHeader;
  for (std::size_t i = 0; i < rows.size(); ++i)
    csv += csv_line(rows[i], i < 5 ? measured[i] : predicted[i] / rows[i].factor) + "\n";
  write(dir / "runs.csv", csv);
  const auto r = run("validate " + (dir / "runs.csv").string() + " --jobs 2 --json " +
                     (dir / "v.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = read_json(dir / "v.json");
  const auto& jobs = j["layout_ranking"]["jobs"];
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["rows"], 5);
  EXPECT_EQ(jobs[0]["job"], "h512 a8 L4 s512, 4 GPUs, global batch 16");
  EXPECT_NEAR(jobs[0]["spearman"].get<double>(), rho, 1e-12);
  EXPECT_EQ(j["by_nodes"]["1"]["rows"], 5);
  EXPECT_EQ(j["by_nodes"]["2"]["rows"], 1);
  EXPECT_NEAR(j["by_nodes"]["2"]["median_abs_error_percent"].get<double>(), 10, 1e-6);
  EXPECT_NE(r.output.find("2 nodes: 1 row(s), |error| median 10.0 %"), std::string::npos)
      << r.output;
  // Which way the errors lean: the 16-GPU row 10 % slow; on one node, the swapped pairs are
  // as many rows fast as slow, their signed median the middle one's.
  EXPECT_NEAR(j["by_nodes"]["2"]["median_error_percent"].get<double>(), 10, 1e-6);
  EXPECT_EQ(j["by_nodes"]["2"]["rows_below_zero"], 0);
  std::vector<double> signed_errors(5);
  for (std::size_t i = 0; i < 5; ++i) signed_errors[i] = (job[i] / measured[i] - 1) * 100;
  const int fast = static_cast<int>(
      std::count_if(signed_errors.begin(), signed_errors.end(), [](double e) { return e < 0; }));
  std::nth_element(signed_errors.begin(), signed_errors.begin() + 2, signed_errors.end());
  EXPECT_NEAR(j["by_nodes"]["1"]["median_error_percent"].get<double>(), signed_errors[2], 1e-6);
  EXPECT_EQ(j["by_nodes"]["1"]["rows_below_zero"], fast);
  EXPECT_EQ(fast, 2);
  EXPECT_NE(r.output.find("1 job(s) of >= 4 layouts): median "), std::string::npos) << r.output;

  // Two layouts measured alike share the mean of their ranks (1.5 each, here the two smallest
  // or not): rho is then the Pearson correlation of the ranks.
  std::vector<double> tied = job;
  tied[1] = tied[0];
  std::vector<double> rt(5);
  for (std::size_t i = 0; i < 5; ++i) {
    const auto below =
        std::count_if(tied.begin(), tied.end(), [&](double y) { return y < tied[i]; });
    const auto same = std::count(tied.begin(), tied.end(), tied[i]);
    rt[i] = static_cast<double>(below) + (static_cast<double>(same) + 1) / 2;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < 5; ++i) {  // both rank vectors have mean 3
    sxy += (rt[i] - 3) * (rp[i] - 3);
    sxx += (rt[i] - 3) * (rt[i] - 3);
    syy += (rp[i] - 3) * (rp[i] - 3);
  }
  std::string tied_csv = kHeader;
  for (std::size_t i = 0; i < 5; ++i) tied_csv += csv_line(rows[i], tied[i]) + "\n";
  write(dir / "tied.csv", tied_csv);
  const auto t = run("validate " + (dir / "tied.csv").string() + " --jobs 2 --json " +
                     (dir / "t.json").string());
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NEAR(read_json(dir / "t.json")["layout_ranking"]["jobs"][0]["spearman"].get<double>(),
              sxy / std::sqrt(sxx * syy), 1e-12);
}

// vTrain's multi-node file leads with a byte order mark and a "Parameters (billion)" column:
// its rows are the same runs as without them (each predicted as the plain file's row), and a
// size that is not a positive number is refused naming line, column and value.
TEST(ValidateMeasured, ByteOrderMarkAndStatedParametersAreRead) {
  const auto dir = fresh_dir("tandem_validate_measured_multi");
  const std::string& header = kHeader;
  const std::vector<std::string> rows = {"2,8,1,512,8,4,512,1,2,1,10",
                                         "4,8,2,512,8,4,512,2,1,2,12"};
  write(dir / "plain.csv", header + rows[0] + "\n" + rows[1] + "\n");
  write(dir / "multi.csv",
        "\xEF\xBB\xBFParameters (billion)," + header + "0.02," + rows[0] + "\n," + rows[1] + "\n");
  const auto plain =
      run("validate " + (dir / "plain.csv").string() + " --json " + (dir / "plain.json").string());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto multi =
      run("validate " + (dir / "multi.csv").string() + " --json " + (dir / "multi.json").string());
  ASSERT_EQ(multi.exit_code, 0) << multi.output;
  const auto p = read_json(dir / "plain.json"), m = read_json(dir / "multi.json");
  ASSERT_EQ(m["rows"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_EQ(m["rows"][i]["predicted_ms"], p["rows"][i]["predicted_ms"]) << i;

  write(dir / "bad.csv", "\xEF\xBB\xBFParameters (billion)," + header + "-1," + rows[0] + "\n");
  const auto bad = run("validate " + (dir / "bad.csv").string());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("line 2, Parameters (billion) = -1: must be a positive number"),
            std::string::npos)
      << bad.output;
}

// The vTrain single-node set in the repository: every row valid, and the halves are the
// parities of the rows' hashes, counted here from the file itself.
TEST(ValidateMeasured, VtrainSetIsValidAndSplitByHash) {
  const fs::path csv = fs::path(TANDEM_SOURCE_DIR) / "scenarios/measured/vtrain_single_node.csv";
  std::ifstream in(csv);
  ASSERT_TRUE(in) << csv;
  std::string line;
  std::getline(in, line);  // header
  int rows = 0, calibration = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    ++rows;
    calibration += fnv1a(line) % 2 == 0;
  }
  EXPECT_EQ(rows, 1440);  // the vTrain README's count
  const auto r = run("validate " + csv.string() + " --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string expected = "1440 run(s), all valid; 1440 selected (calibration " +
                               std::to_string(calibration) + ", validation " +
                               std::to_string(rows - calibration) + ")";
  EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
}

// Split by hidden size: the calibration half is every row of that size, the validation
// half every other row, counted here from the CSV's hidden-size column; a size no row has,
// or one every row has, is refused before any simulation.
TEST(ValidateMeasured, VtrainSetSplitsByHiddenSize) {
  const fs::path csv = fs::path(TANDEM_SOURCE_DIR) / "scenarios/measured/vtrain_single_node.csv";
  std::ifstream in(csv);
  ASSERT_TRUE(in) << csv;
  std::string line;
  std::getline(in, line);  // header; hidden size is the 4th column
  std::map<int, int> per_size;
  while (std::getline(in, line)) {
    if (line.empty() || line == "\r") continue;
    std::stringstream fields(line);
    std::string f;
    for (int c = 0; c < 4; ++c) std::getline(fields, f, ',');
    ++per_size[std::stoi(f)];
  }
  ASSERT_EQ(per_size.size(), 2U);  // vTrain's 1024 and 2048
  for (const auto& [size, count] : per_size) {
    const auto r =
        run("validate " + csv.string() + " --dry-run --calibration-hidden " + std::to_string(size));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string expected = "(calibration " + std::to_string(count) + ", validation " +
                                 std::to_string(1440 - count) + ")";
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
  }
  const auto none = run("validate " + csv.string() + " --dry-run --calibration-hidden 4096");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("--calibration-hidden = 4096: no row of"), std::string::npos)
      << none.output;
}

// A split by hidden size says that the preset's host costs saw rows of both sizes (they were
// fitted on the hash half of this table), so its validation half is not held out from them.
TEST(ValidateMeasured, HiddenSplitSaysWhatThePresetWasFittedOn) {
  const auto dir = fresh_dir("tandem_validate_measured_hidden");
  // The set is the file's stem: the preset's fitted_on names vtrain_single_node.
  write(dir / "vtrain_single_node.csv", kHeader +
                                            "2,16,8,1024,16,24,1024,1,1,2,372.160408\n"
                                            "4,16,4,2048,16,24,1024,1,2,2,410.490577\n");
  const auto r = run("validate " + (dir / "vtrain_single_node.csv").string() +
                     " --calibration-hidden 1024 --jobs 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fitted on vtrain_single_node ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation half is not held out from vtrain-a100's fitted "
                          "parameters; scripts/fit_host_model.py --calibration-hidden 1024"),
            std::string::npos)
      << r.output;
  // Split by hash, the note has nothing to say.
  const auto h = run("validate " + (dir / "vtrain_single_node.csv").string() + " --jobs 2");
  EXPECT_EQ(h.exit_code, 0) << h.output;
  EXPECT_EQ(h.output.find("not held out"), std::string::npos) << h.output;
}

}  // namespace
