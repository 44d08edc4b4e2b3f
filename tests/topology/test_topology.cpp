// Tests of topology descriptions (topology/topology_io.hpp): the presets carry the
// published datasheet figures (the rows below), cite a source for every number,
// round-trip through JSON, and bad input is rejected naming field, value and rule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "topology/presets.hpp"
#include "topology/topology_io.hpp"

namespace tandem {
namespace {

using nlohmann::json;

// The datasheet rows this test checks (GPU and node figures as NVIDIA publishes them),
// copied verbatim from the project's reference table on 2026-11-22.
constexpr const char* kHardwareCsv = R"(part,figure,value,unit,note
A100-SXM4-80GB,dense bf16/fp16 tensor,312,TFLOP/s,datasheet
A100-SXM4-80GB,tf32 tensor,156,TFLOP/s,datasheet
A100-SXM4-80GB,fp32,19.5,TFLOP/s,datasheet
A100-SXM4-80GB,HBM2e bandwidth,2039,GB/s,datasheet
A100-SXM4-80GB,memory,80,GB,datasheet
A100-SXM4-80GB,SMs,108,count,datasheet
DGX-A100,GPUs per node,8,count,
DGX-A100,NVLink3 per GPU via NVSwitch,300,GB/s per direction,600 GB/s bidirectional
DGX-A100,compute NICs per node,8,count,HDR InfiniBand 200 Gb/s each (25 GB/s)
H100-SXM5-80GB,dense bf16/fp16 tensor,989,TFLOP/s,datasheet
H100-SXM5-80GB,dense fp8 tensor,1979,TFLOP/s,datasheet
H100-SXM5-80GB,HBM3 bandwidth,3350,GB/s,datasheet
H100-SXM5-80GB,memory,80,GB,datasheet
H100-SXM5-80GB,SMs,132,count,datasheet
DGX-H100,GPUs per node,8,count,
DGX-H100,NVLink4 per GPU via NVSwitch,450,GB/s per direction,900 GB/s bidirectional
DGX-H100,compute NICs per node,8,count,NDR InfiniBand 400 Gb/s each (50 GB/s)
)";

struct CsvRow {
  std::string part, figure, unit, note;
  double value = 0;
};

std::vector<CsvRow> parse_csv(const std::string& text) {
  std::vector<CsvRow> rows;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream cell_stream(line);
    std::string cell;
    while (std::getline(cell_stream, cell, ',')) cells.push_back(cell);
    if (line.back() == ',') cells.emplace_back();
    EXPECT_EQ(cells.size(), 5U) << line;
    if (cells.size() != 5) continue;
    rows.push_back({cells[0], cells[1], cells[3], cells[4], std::stod(cells[2])});
  }
  return rows;
}

// "HDR InfiniBand 200 Gb/s each (25 GB/s)" → 25e9 bytes/s, read from the note's bit rate.
double nic_bytes_per_second(const std::string& note) {
  const auto at = note.find(" Gb/s");
  const auto start = note.rfind(' ', at - 1) + 1;
  return std::stod(note.substr(start, at - start)) * 1e9 / 8;
}

TEST(TopologyPresets, NamesAreTheNineShipped) {
  EXPECT_EQ(
      topology_preset_names(),
      (std::vector<std::string>{"cpu-host", "dgx-a100-80g", "dgx-b200", "dgx-b300", "dgx-h100",
                                "gb200-nvl72", "gb300-nvl72", "jean-zay-a100", "vtrain-a100"}));
}

TEST(TopologyPresets, MatchPublishedHardwareFigures) {
  const Topology a100 = load_topology("dgx-a100-80g");
  const Topology h100 = load_topology("dgx-h100");
  const std::map<std::string, const Topology*> by_part = {{"A100-SXM4-80GB", &a100},
                                                          {"DGX-A100", &a100},
                                                          {"H100-SXM5-80GB", &h100},
                                                          {"DGX-H100", &h100}};
  // figure → what the preset says, in the CSV's unit.
  using Getter = std::function<double(const Topology&, const CsvRow&)>;
  const std::map<std::string, Getter> figures = {
      {"dense bf16/fp16 tensor",
       [](const Topology& t, const CsvRow& row) {
         EXPECT_EQ(t.gpu.peak_fp16.value, t.gpu.peak_bf16.value) << row.part;
         return t.gpu.peak(DType::bf16).value / 1e12;
       }},
      {"tf32 tensor",
       [](const Topology& t, const CsvRow&) { return t.gpu.peak_tf32.value / 1e12; }},
      {"dense fp8 tensor",
       [](const Topology& t, const CsvRow&) { return t.gpu.peak(Precision::fp8).value / 1e12; }},
      {"fp32",
       [](const Topology& t, const CsvRow&) { return t.gpu.peak(DType::fp32).value / 1e12; }},
      {"HBM2e bandwidth",
       [](const Topology& t, const CsvRow&) { return t.gpu.memory_bandwidth.value / 1e9; }},
      {"HBM3 bandwidth",
       [](const Topology& t, const CsvRow&) { return t.gpu.memory_bandwidth.value / 1e9; }},
      // The datasheets' "80 GB" is 80 GiB on the device (nvidia-smi: 81920 MiB).
      {"memory",
       [](const Topology& t, const CsvRow&) {
         return static_cast<double>(t.gpu.memory.value) / double(1LL << 30);
       }},
      {"SMs", [](const Topology& t, const CsvRow&) { return double(t.gpu.sm_count); }},
      {"GPUs per node",
       [](const Topology& t, const CsvRow&) { return double(t.node.gpus_per_node); }},
      {"NVLink3 per GPU via NVSwitch",
       [](const Topology& t, const CsvRow&) { return t.node.gpu_link.bandwidth.value / 1e9; }},
      {"NVLink4 per GPU via NVSwitch",
       [](const Topology& t, const CsvRow&) { return t.node.gpu_link.bandwidth.value / 1e9; }},
      {"compute NICs per node",
       [](const Topology& t, const CsvRow& row) {
         EXPECT_DOUBLE_EQ(t.fabric.nic.bandwidth.value, nic_bytes_per_second(row.note)) << row.part;
         return double(t.fabric.nics_per_node);
       }},
  };
  int checked = 0;
  for (const auto& row : parse_csv(kHardwareCsv)) {
    const auto part = by_part.find(row.part);
    const auto figure = figures.find(row.figure);
    ASSERT_NE(part, by_part.end()) << row.part;
    ASSERT_NE(figure, figures.end()) << row.figure;
    EXPECT_NEAR(figure->second(*part->second, row), row.value, row.value * 1e-12)
        << row.part << " " << row.figure;
    ++checked;
  }
  EXPECT_EQ(checked, 17);
  // A100 has no FP8 tensor cores and no GPU here before Blackwell has FP4: absent, 0.
  EXPECT_EQ(a100.gpu.peak(Precision::fp8).value, 0);
  EXPECT_FALSE(to_json(a100)["gpu"]["peak_tflops"].contains("fp8"));
  EXPECT_EQ(h100.gpu.peak(Precision::fp4).value, 0);
  EXPECT_FALSE(to_json(h100)["gpu"]["peak_tflops"].contains("fp4"));
  EXPECT_EQ(a100.fabric.kind, FabricKind::fat_tree);
  EXPECT_EQ(h100.fabric.kind, FabricKind::rail_optimized);
}

TEST(TopologyPresets, EveryNumberOfTheDgxAndNvlPresetsCitesASource) {
  for (const char* name : {"dgx-a100-80g", "dgx-h100", "dgx-b200", "dgx-b300", "gb200-nvl72",
                           "gb300-nvl72", "jean-zay-a100", "vtrain-a100"}) {
    const Topology t = load_topology(name);
    const json j = to_json(t);
    std::map<std::string, const Sources*> sections = {{"gpu", &t.gpu.sources},
                                                      {"node", &t.node.sources},
                                                      {"fabric", &t.fabric.sources},
                                                      {"nccl", &t.nccl.sources}};
    if (j.contains("nvlink_domain")) sections["nvlink_domain"] = &t.nvlink_domain.sources;
    for (const auto& [section, sources] : sections)
      for (const auto& [key, value] : j.at(section).items()) {
        if (key == "name" || key == "source" || key == "interconnect") continue;
        EXPECT_TRUE(sources->contains(key)) << name << ": " << section << "." << key;
      }
  }
}

// NVIDIA's datasheet figures per GPU as published, tensor rates with sparsity (TFLOP/s),
// fp32 without: the presets hold the dense rates, half of each tensor figure.
struct Datasheet {
  const char* preset;
  double fp4_sparse, fp8_sparse, bf16_sparse, tf32_sparse, fp32;
  double hbm_gbs, memory_gb;
  int gpus_per_node, nics_per_node;
  double nic_gbit, nvlink_bidirectional_gbs;
  int nvlink_domain;  // 0: the node
};

TEST(TopologyPresets, BlackwellPresetsHoldHalfTheDatasheetsSparsityFigures) {
  // GB200 NVL72 / HGX B200 datasheet (per GPU); DGX B300 and GB300 NVL72 datasheets (FP4 with
  // sparsity | dense: 144 | 108 PF per 8 GPUs, 1,440 | 1,080 PF per 72); GB200 trays: 4
  // ConnectX-7 400 Gb/s, GB300 trays 4 ConnectX-8 800 Gb/s.
  const std::vector<Datasheet> rows = {
      {"dgx-b200", 18000, 9000, 4500, 2200, 75, 7700, 180, 8, 8, 400, 1800, 0},
      {"dgx-b300", 2 * 108000 / 8.0, 9000, 4500, 2200, 75, 8000, 288, 8, 8, 800, 1800, 0},
      {"gb200-nvl72", 20000, 10000, 5000, 2500, 80, 8000, 186, 4, 4, 400, 1800, 72},
      {"gb300-nvl72", 2 * 1080000 / 72.0, 10000, 5000, 2500, 80, 576000 / 72.0, 279, 4, 4, 800,
       130000 / 72.0, 72},
  };
  for (const auto& d : rows) {
    const Topology t = load_topology(d.preset);
    const GpuSpec& g = t.gpu;
    EXPECT_NEAR(g.peak(Precision::fp4).value, d.fp4_sparse / 2 * 1e12, 1e9) << d.preset;
    EXPECT_NEAR(g.peak(Precision::fp8).value, d.fp8_sparse / 2 * 1e12, 1e9) << d.preset;
    EXPECT_NEAR(g.peak(DType::bf16).value, d.bf16_sparse / 2 * 1e12, 1e9) << d.preset;
    EXPECT_NEAR(g.peak(DType::fp16).value, d.bf16_sparse / 2 * 1e12, 1e9) << d.preset;
    EXPECT_NEAR(g.peak(Precision::tf32).value, d.tf32_sparse / 2 * 1e12, 1e9) << d.preset;
    EXPECT_NEAR(g.peak(DType::fp32).value, d.fp32 * 1e12, 1e9) << d.preset;
    EXPECT_NEAR(g.memory_bandwidth.value, d.hbm_gbs * 1e9, 1e6) << d.preset;
    EXPECT_EQ(g.memory.value, static_cast<std::int64_t>(d.memory_gb) << 30) << d.preset;
    EXPECT_EQ(t.node.gpus_per_node, d.gpus_per_node) << d.preset;
    EXPECT_EQ(t.fabric.nics_per_node, d.nics_per_node) << d.preset;
    EXPECT_NEAR(t.fabric.nic.bandwidth.value, d.nic_gbit / 8 * 1e9, 1e3) << d.preset;
    // 130 TB/s for 72 GPUs rounds 1.8 TB/s per GPU: within 0.5 %.
    EXPECT_NEAR(t.node.gpu_link.bandwidth.value, d.nvlink_bidirectional_gbs / 2 * 1e9, 5e9)
        << d.preset;
    EXPECT_EQ(t.nvlink_domain.gpus, d.nvlink_domain) << d.preset;
    EXPECT_EQ(gpus_per_nvlink_domain(t), d.nvlink_domain ? d.nvlink_domain : d.gpus_per_node);
    // Peaks the datasheets give as "with sparsity" say so, and that the preset halves them.
    EXPECT_NE(g.sources.at("peak_tflops").find("sparsity"), std::string::npos) << d.preset;
  }
}

// What Hopper measured reaches Blackwell only with a stated reason: each such number equals
// dgx-h100's and its source says it was carried over, and from where.
// A node's spread of step times (sim/stragglers.hpp) is fitted once, on dgx-a100-80g (a
// pair of Korthikanti et al. 2022's runs differing only in data parallelism), and every
// other GPU preset carries that value over, saying so; the CPU host has none.
TEST(TopologyPresets, TheNodeTimeSpreadIsFittedOnceAndCarriedWithAReason) {
  const Topology a100 = load_topology("dgx-a100-80g");
  EXPECT_EQ(a100.fitted_on.at("node.node_time_spread").set, "korthikanti2022");
  EXPECT_EQ(a100.node.sources.at("node_time_spread").find("fitted on one pair of rows"), 0U);
  for (const char* name : {"dgx-h100", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72"}) {
    const Topology t = load_topology(name);
    EXPECT_EQ(t.node.node_time_spread, a100.node.node_time_spread) << name;
    EXPECT_EQ(
        t.node.sources.at("node_time_spread").find("estimate, carried over from dgx-a100-80g"), 0U)
        << name;
    EXPECT_FALSE(t.fitted_on.count("node.node_time_spread")) << name;
  }
  for (const char* name : {"jean-zay-a100", "vtrain-a100"})  // based on dgx-a100-80g
    EXPECT_EQ(load_topology(name).node.node_time_spread, a100.node.node_time_spread) << name;
  EXPECT_EQ(load_topology("cpu-host").node.node_time_spread, 0.0);
}

TEST(TopologyPresets, BlackwellCarriesHopperMeasurementsOverOnlyWithAReason) {
  const Topology h100 = load_topology("dgx-h100");
  for (const char* name : {"dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72"}) {
    const Topology t = load_topology(name);
    EXPECT_EQ(t.gpu.gemm_tile_fixed_k, h100.gpu.gemm_tile_fixed_k) << name;
    EXPECT_EQ(t.gpu.kernel_launch, h100.gpu.kernel_launch) << name;
    EXPECT_EQ(t.gpu.host_kernel_issue, h100.gpu.host_kernel_issue) << name;
    for (const char* key : {"gemm_tile_fixed_k", "kernel_launch_us", "host_kernel_issue_us"}) {
      const std::string& why = t.gpu.sources.at(key);
      EXPECT_EQ(why.find("estimate, carried over from dgx-h100"), 0U) << name << " " << key;
      EXPECT_NE(why.find("): "), std::string::npos) << name << " " << key << ": no reason";
    }
    // The L2 figure is fitted on OpenXLA's measured B200 GEMMs (not carried from the one H100
    // GEMM dgx-h100's was fitted on) and carried from dgx-b200 to the others.
    const Topology b200 = load_topology("dgx-b200");
    EXPECT_EQ(t.gpu.l2_bandwidth.value, b200.gpu.l2_bandwidth.value) << name;
    EXPECT_NE(t.gpu.l2_bandwidth.value, h100.gpu.l2_bandwidth.value) << name;
    // The sustained clock is fitted on one training row of each system with one, all from one
    // source whose software is the kernel figures' (the 25.11 NeMo table's Llama 3 8B on 8 GPUs
    // of B200, GB200 and GB300); DGX B300, with no row, carries the B200's. (The B200's fit
    // landed on the H100's 0.76 once: which row it was fitted on is what says it is its own.)
    const bool fitted = name != std::string("dgx-b300");
    if (!fitted) {
      EXPECT_EQ(t.gpu.sustained_clock_fraction, b200.gpu.sustained_clock_fraction) << name;
    }
    if (fitted) {
      EXPECT_EQ(t.gpu.sources.at("sustained_clock_fraction").find("fitted on one row"), 0U) << name;
      ASSERT_EQ(t.fitted_on.size(), name == std::string("dgx-b200") ? 2U : 1U) << name;
      if (name == std::string("dgx-b200")) {
        EXPECT_EQ(t.fitted_on.at("gpu.l2_bandwidth_gbs").set, "b200-xla-matmul-table");
      }
      EXPECT_EQ(t.fitted_on.at("gpu.sustained_clock_fraction").set, "nemo2511-fp8") << name;
      EXPECT_NE(t.fitted_on.at("gpu.sustained_clock_fraction").rows.find("llama3-8b-8gpu"),
                std::string::npos)
          << name;
    } else {
      EXPECT_TRUE(t.fitted_on.empty()) << name;
      EXPECT_EQ(
          t.gpu.sources.at("sustained_clock_fraction").find("estimate, carried over from dgx-b200"),
          0U)
          << name;
    }
    if (name != std::string("dgx-b200")) {
      EXPECT_EQ(t.gpu.sources.at("l2_bandwidth_gbs").find("estimate, carried over from dgx-b200"),
                0U)
          << name;
    }
    // cuDNN's attention is measured on each die (tests/sim/test_attention_reference_cudnn_frontend
    // holds the figures): the B200's and GB300's, the GB200's by ratio; the B300 carries the
    // GB300's.
    for (const char* key :
         {"fused_attention_forward_fraction", "fused_attention_backward_fraction"}) {
      const std::string& why = t.gpu.sources.at(key);
      if (name == std::string("dgx-b300")) {
        EXPECT_EQ(why.find("carried over from gb300-nvl72"), 0U) << key;
      } else {
        EXPECT_EQ(why.find("published kernel benchmark"), 0U) << name << " " << key;
      }
      EXPECT_NE(why.find("cudnn-frontend"), std::string::npos) << name << " " << key;
    }
    // The HBM fraction is measured on GB200 and GB300 by ratio to the H200 (cuDNN's published
    // norm benchmarks; tests/sim/test_norm_reference_cudnn_frontend holds the figures), below
    // the H100's, and carried to the DGX parts of the same dies.
    EXPECT_LT(t.gpu.memory_peak_fraction, h100.gpu.memory_peak_fraction) << name;
    const std::string& hbm = t.gpu.sources.at("memory_peak_fraction");
    if (name == std::string("dgx-b200") || name == std::string("dgx-b300")) {
      EXPECT_EQ(
          hbm.find(name == std::string("dgx-b200") ? "estimate, carried over from gb200-nvl72"
                                                   : "estimate, carried over from gb300-nvl72"),
          0U)
          << name;
    } else {
      EXPECT_EQ(hbm.find("measured, by ratio"), 0U) << name;
    }
    EXPECT_NE(hbm.find("cudnn-frontend"), std::string::npos) << name;
    // The nvls figure was measured on GB200 NVL72 and is carried to the others as an estimate.
    EXPECT_EQ(t.nccl.sources.at("nvls_bus_gbs")
                  .find(name == std::string("gb200-nvl72") ? "measured"
                                                           : "estimate, carried over from GB200"),
              0U)
        << name;
  }
}

// The GEMM fractions are the H100's fitted one times each GPU's maximum achievable matmul
// efficiency over the H100's, from one published table (ML Engineering's MAMF table: bf16 and
// FP8 TFLOP/s at each GPU's best shape, over its datasheet peak); GB300 has no row there and
// takes GB200's.
TEST(TopologyPresets, BlackwellGemmFractionsAreTheMeasuredRatiosToTheH100s) {
  const double h100_bf16 = 794.5 / 989;
  struct Mamf {
    const char* preset;
    double bf16, fp8;  // achieved / datasheet peak
  };
  const Mamf rows[] = {{"dgx-b200", 1745.0 / 2250, 3432.5 / 4500},
                       {"dgx-b300", 1769.0 / 2250, 3353.3 / 4500},
                       {"gb200-nvl72", 1822.0 / 2500, 3615.6 / 5000},
                       {"gb300-nvl72", 1822.0 / 2500, 3615.6 / 5000}};
  const double h100 = load_topology("dgx-h100").gpu.gemm_peak_fraction;
  for (const Mamf& r : rows) {
    const GpuSpec gpu = load_topology(r.preset).gpu;
    const double bf16 = std::round(h100 * r.bf16 / h100_bf16 * 100) / 100;
    EXPECT_DOUBLE_EQ(gpu.gemm_peak_fraction, bf16) << r.preset;
    EXPECT_DOUBLE_EQ(gpu.gemm_fp8_peak_fraction, std::round(bf16 * r.fp8 / r.bf16 * 100) / 100)
        << r.preset;
    EXPECT_LT(gpu.gemm_peak_fraction, h100) << r.preset;
    const std::string& why = gpu.sources.at("gemm_peak_fraction");
    EXPECT_NE(why.find("maximum achievable matmul FLOPS"), std::string::npos) << r.preset;
  }
}

TEST(TopologyPresets, CpuHostMarksItsNumbersAsEstimates) {
  const Topology t = load_topology("cpu-host");
  for (const char* key :
       {"peak_tflops", "hbm_bandwidth_gbs", "kernel_launch_us", "gemm_peak_fraction"})
    EXPECT_NE(t.gpu.sources.at(key).find("estimate"), std::string::npos) << key;
  // The shared-memory link was measured (scripts/closed_loop.sh's transport).
  for (const char* key : {"gpu_link_gbs", "gpu_link_latency_us"})
    EXPECT_NE(t.node.sources.at(key).find("measured"), std::string::npos) << key;
  EXPECT_EQ(t.fabric.nics_per_node, 0);
  EXPECT_EQ(t.node.interconnect, "shared-memory");
  // 2.6 GHz · 2 FMA pipes · 8 fp32 lanes · 2 flops.
  EXPECT_DOUBLE_EQ(t.gpu.peak(DType::fp32).value, 2.6e9 * 2 * 8 * 2);
}

TEST(TopologyPresets, EmbeddedTextEqualsTheFilesInTheRepository) {
  const auto dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "topology" / "presets";
  ASSERT_EQ(embedded_presets().size(), 9U);
  for (const auto& p : embedded_presets()) {
    std::ifstream in(dir / (std::string(p.name) + ".json"));
    ASSERT_TRUE(in) << p.name;
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_EQ(text, p.json) << p.name;
    // A file loads to the same topology as its preset.
    EXPECT_EQ(load_topology((dir / (std::string(p.name) + ".json")).string()),
              load_topology(p.name));
  }
}

TEST(TopologyJson, NcclSectionIsOptionalAndValidated) {
  auto j = to_json(load_topology("dgx-a100-80g"));
  ASSERT_TRUE(j.contains("nccl"));
  j.erase("nccl");
  EXPECT_FALSE(parse_topology(j).nccl.enabled);  // ideal rings, as before the section
  auto bad = to_json(load_topology("dgx-a100-80g"));
  bad["nccl"]["ring_base_latency_us"] = json::array({6.6, 14.0});
  bad["nccl"]["channels"] = 0;
  bad["nccl"]["nic_bus"] = 24;
  try {
    parse_topology(bad, "test.json");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::map<std::string, std::string> rules;
    for (const auto& v : e.violations()) rules[v.field] = v.rule;
    EXPECT_EQ(rules.at("nccl.ring_base_latency_us"), "must be an array of three numbers ≥ 0");
    EXPECT_EQ(rules.at("nccl.channels"), "must be ≥ 1");
    EXPECT_EQ(rules.at("nccl.nic_bus"), "unknown key; did you mean \"nic_bus_gbs\"?");
  }
}

TEST(TopologyJson, RoundTripsThroughJson) {
  for (const auto& name : topology_preset_names()) {
    const Topology t = load_topology(name);
    const Topology again = parse_topology(to_json(t));
    EXPECT_EQ(to_json(again), to_json(t)) << name;
    EXPECT_EQ(again.gpu.sources, t.gpu.sources);
    EXPECT_DOUBLE_EQ(again.gpu.kernel_launch.value, t.gpu.kernel_launch.value);
    EXPECT_DOUBLE_EQ(again.fabric.nic.latency.value, t.fabric.nic.latency.value);
    EXPECT_EQ(again.gpu.memory, t.gpu.memory);
  }
}

TEST(TopologyJson, UnitsAreConvertedToSi) {
  const Topology t = load_topology("dgx-a100-80g");
  EXPECT_DOUBLE_EQ(t.gpu.peak_bf16.value, 312e12);
  EXPECT_DOUBLE_EQ(t.gpu.memory_bandwidth.value, 2039e9);
  EXPECT_EQ(t.gpu.memory.value, 80LL * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(t.gpu.kernel_launch.value, 4e-6);
  EXPECT_DOUBLE_EQ(t.node.gpu_link.bandwidth.value, 300e9);
  EXPECT_DOUBLE_EQ(t.fabric.nic.bandwidth.value, 25e9);
  EXPECT_EQ(t.gpu.gemm_tile_m, 256);
  EXPECT_EQ(t.gpu.gemm_tile_n, 128);
  // Calibrated on Korthikanti Table 4 (0.75: what the model's GEMMs reach in a layer with
  // Megatron's attention dropout priced); within reach of cuBLAS either way.
  EXPECT_GE(t.gpu.gemm_peak_fraction, 0.65);
  EXPECT_LE(t.gpu.gemm_peak_fraction, 0.85);
}

TEST(TopologyJson, PeakPerDtype) {
  const Topology t = load_topology("dgx-h100");
  EXPECT_DOUBLE_EQ(t.gpu.peak(DType::bf16).value, 989e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak(DType::fp16).value, 989e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak(DType::fp32).value, 67e12);  // CUDA cores, not TF32
  EXPECT_DOUBLE_EQ(t.gpu.peak(DType::int32).value, 67e12);
  EXPECT_DOUBLE_EQ(t.gpu.peak(Precision::tf32).value, 494.5e12);
}

TEST(TopologyJson, NicOfGpu) {
  Topology t = load_topology("dgx-a100-80g");
  for (int g = 0; g < 8; ++g) EXPECT_EQ(nic_of_gpu(t, g), g);
  t.fabric.nics_per_node = 4;
  for (int g = 0; g < 8; ++g) EXPECT_EQ(nic_of_gpu(t, g), g / 2);
  EXPECT_THROW(nic_of_gpu(t, 8), std::out_of_range);
  EXPECT_THROW(nic_of_gpu(load_topology("cpu-host"), 0), std::out_of_range);
}

// Every violation of a ConfigError as "field|value|rule" lines, for searching.
std::map<std::string, Violation> by_field(const ConfigError& e) {
  std::map<std::string, Violation> out;
  for (const auto& v : e.violations()) out[v.field] = v;
  return out;
}

// parse_topology of `j`, which must be rejected: its violations by field and their number
// (none, and a test failure, when it parses).
struct Rejection {
  std::map<std::string, Violation> by_field;
  std::size_t count = 0;
};
Rejection rejected(const json& j) {
  try {
    parse_topology(j, "test.json");
  } catch (const ConfigError& e) {
    return {by_field(e), e.violations().size()};
  }
  ADD_FAILURE() << "no ConfigError";
  return {};
}

// A value an optional field refuses: as written, as the message shows it, and the rule.
struct Refused {
  json bad;
  std::string value, rule;
};

// Each of `cases`, written into `j` at section.key, is refused alone, the message naming the
// field, the value and the rule.
void expect_each_refused(json j, const std::string& section, const std::string& key,
                         const std::vector<Refused>& cases) {
  const std::string field = section + "." + key;
  for (const auto& c : cases) {
    SCOPED_TRACE(field + " = " + c.bad.dump());
    j[section][key] = c.bad;
    const auto [v, count] = rejected(j);
    ASSERT_TRUE(v.count(field));
    EXPECT_EQ(v.at(field).value, c.value);
    EXPECT_EQ(v.at(field).rule, c.rule);
    EXPECT_EQ(count, 1U);
  }
}

TEST(TopologyValidation, EveryBrokenRuleNamesFieldValueAndRule) {
  json j = to_json(load_topology("dgx-a100-80g"));
  j["gpu"]["peak_tflops"]["bf16"] = -1;
  j["gpu"]["sm_count"] = 0;
  j["gpu"]["gemm_peak_fraction"] = 1.5;
  j["gpu"]["gemm_tile"] = {256};
  j["gpu"].erase("hbm_bandwidth_gbs");
  j["node"]["gpu_link_gbz"] = 300;
  j["fabric"]["kind"] = "torus";
  j["fabric"]["nics_per_node"] = "eight";
  j["fabric"]["source"]["nic_gb"] = "typo";
  j["gpus"] = json::object();
  try {
    parse_topology(j, "test.json");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const auto v = by_field(e);
    EXPECT_EQ(e.source(), "test.json");
    EXPECT_EQ(v.at("gpu.peak_tflops.bf16").value, "-1");
    EXPECT_EQ(v.at("gpu.peak_tflops.bf16").rule, "must be > 0");
    EXPECT_EQ(v.at("gpu.sm_count").rule, "must be ≥ 1");
    EXPECT_EQ(v.at("gpu.gemm_peak_fraction").value, "1.5");
    EXPECT_EQ(v.at("gpu.gemm_peak_fraction").rule, "must lie in (0, 1]");
    EXPECT_NE(v.at("gpu.gemm_tile").rule.find("[rows, columns]"), std::string::npos);
    EXPECT_EQ(v.at("gpu.hbm_bandwidth_gbs").rule, "is required");
    EXPECT_EQ(v.at("node.gpu_link_gbz").rule, "unknown key; did you mean \"gpu_link_gbs\"?");
    EXPECT_EQ(v.at("fabric.kind").value, "torus");
    EXPECT_EQ(v.at("fabric.kind").rule, "must be one of fat-tree | rail-optimized");
    EXPECT_EQ(v.at("fabric.nics_per_node").rule, "must be an integer");
    EXPECT_EQ(v.at("fabric.source.nic_gb").rule, "unknown key; did you mean \"nic_gbs\"?");
    EXPECT_EQ(v.at("gpus").rule, "unknown key; did you mean \"gpu\"?");
    EXPECT_EQ(e.violations().size(), 10U);
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos);
  }
}

// The issuing host's figures: optional, but a present one must be a number ≥ 0, and the
// collective-wait switch a JSON boolean.
TEST(TopologyValidation, HostFiguresAreNonNegativeAndTheCollectiveWaitABoolean) {
  json j = to_json(load_topology("dgx-a100-80g"));
  j["gpu"]["host_optimizer_tensor_us"] = -1;
  j["gpu"]["host_unfused_softmax_us"] = "slow";
  j["gpu"]["host_waits_for_collectives"] = "yes";
  const auto [v, count] = rejected(j);
  EXPECT_EQ(v.at("gpu.host_optimizer_tensor_us").value, "-1");
  EXPECT_EQ(v.at("gpu.host_optimizer_tensor_us").rule, "must be ≥ 0");
  EXPECT_EQ(v.at("gpu.host_unfused_softmax_us").rule, "must be a number, not a JSON string");
  EXPECT_EQ(v.at("gpu.host_waits_for_collectives").value, "yes");
  EXPECT_EQ(v.at("gpu.host_waits_for_collectives").rule,
            "must be true or false, not a JSON string");
  EXPECT_EQ(count, 3U);
}

// gemm_fp8_peak_fraction (cost-model rule 2d) is a fraction of the FP8 peak, optional, and
// round-trips through JSON where a preset has it.
TEST(TopologyValidation, Fp8GemmFractionIsAFractionAndRoundTrips) {
  const Topology h100 = load_topology("dgx-h100");
  EXPECT_DOUBLE_EQ(h100.gpu.gemm_fp8_peak_fraction, 0.75);
  EXPECT_DOUBLE_EQ(load_topology("dgx-a100-80g").gpu.gemm_fp8_peak_fraction, 0.0);  // absent
  json j = to_json(h100);
  EXPECT_DOUBLE_EQ(j["gpu"]["gemm_fp8_peak_fraction"].get<double>(), 0.75);
  expect_each_refused(j, "gpu", "gemm_fp8_peak_fraction",
                      {{json(1.5), "1.5", "must lie in (0, 1]"},
                       {json(0), "0", "must lie in (0, 1]"},
                       {json("0.66"), "0.66", "must be a number, not a JSON string"}});
}

// The flash-attn package's fused-attention fractions (attention_backend flash): fractions,
// optional (0, the A100 fallback, when absent), and round-trip through JSON.
TEST(TopologyValidation, FlashAttnFractionsAreFractionsAndRoundTrip) {
  const Topology h100 = load_topology("dgx-h100");
  EXPECT_DOUBLE_EQ(h100.gpu.flash_attn_forward_fraction, 0.37);
  EXPECT_DOUBLE_EQ(h100.gpu.flash_attn_backward_fraction, 0.35);
  EXPECT_DOUBLE_EQ(load_topology("dgx-a100-80g").gpu.flash_attn_forward_fraction, 0.0);
  json j = to_json(h100);
  EXPECT_DOUBLE_EQ(j["gpu"]["flash_attn_backward_fraction"].get<double>(), 0.35);
  for (const char* key : {"flash_attn_forward_fraction", "flash_attn_backward_fraction"})
    expect_each_refused(j, "gpu", key, {{json(1.2), "1.2", "must lie in (0, 1]"}});
}

// node_time_spread (sim/stragglers.hpp): a standard deviation over a mean, optional (0 when
// absent), in [0, 0.5), and round-trips through JSON where a preset has it.
TEST(TopologyValidation, NodeTimeSpreadIsASpreadAndRoundTrips) {
  const Topology a100 = load_topology("dgx-a100-80g");
  EXPECT_GT(a100.node.node_time_spread, 0.0);
  EXPECT_DOUBLE_EQ(load_topology("cpu-host").node.node_time_spread, 0.0);  // absent
  json j = to_json(a100);
  EXPECT_DOUBLE_EQ(j["node"]["node_time_spread"].get<double>(), a100.node.node_time_spread);
  EXPECT_EQ(parse_topology(j), a100);
  expect_each_refused(j, "node", "node_time_spread",
                      {{json(0.5), "0.5", "must lie in [0, 0.5)"},
                       {json(-0.01), "-0.01", "must lie in [0, 0.5)"},
                       {json("2%"), "2%", "must be a number, not a JSON string"}});
}

// gemm_tile_fixed_k (cost-model rule 2f): steps of K, optional (0 when absent), never
// negative, and round-trips through JSON where a preset has it.
TEST(TopologyValidation, GemmTileFixedKIsNonNegativeAndRoundTrips) {
  const Topology h100 = load_topology("dgx-h100");
  EXPECT_DOUBLE_EQ(h100.gpu.gemm_tile_fixed_k, 256.0);
  EXPECT_DOUBLE_EQ(load_topology("dgx-a100-80g").gpu.gemm_tile_fixed_k, 0.0);  // absent
  json j = to_json(h100);
  EXPECT_DOUBLE_EQ(j["gpu"]["gemm_tile_fixed_k"].get<double>(), 256.0);
  expect_each_refused(j, "gpu", "gemm_tile_fixed_k",
                      {{json(-1), "-1", "must be ≥ 0"},
                       {json("256"), "256", "must be a number, not a JSON string"}});
}

TEST(TopologyValidation, SustainedClockFractionIsAFractionAndRoundTrips) {
  const Topology h100 = load_topology("dgx-h100");
  EXPECT_DOUBLE_EQ(h100.gpu.sustained_clock_fraction, 0.76);
  EXPECT_DOUBLE_EQ(h100.gpu.clock_factor(), 0.76);
  // Absent where the compute figures come from training runs (A100: Korthikanti's Table 4).
  EXPECT_DOUBLE_EQ(load_topology("dgx-a100-80g").gpu.clock_factor(), 1.0);
  EXPECT_EQ(load_topology("dgx-h100").fitted_on.count("gpu.sustained_clock_fraction"), 1U);
  json j = to_json(h100);
  EXPECT_DOUBLE_EQ(j["gpu"]["sustained_clock_fraction"].get<double>(), 0.76);
  expect_each_refused(j, "gpu", "sustained_clock_fraction",
                      {{json(1.2), "1.2", "must lie in (0, 1]"},
                       {json(-0.5), "-0.5", "must lie in (0, 1]"},
                       {json("0.8"), "0.8", "must be a number, not a JSON string"}});
}

TEST(TopologyValidation, MeasuredNcclTablesAndTheUnalignedGemmFractionAreChecked) {
  json j = to_json(load_topology("dgx-a100-80g"));
  j["gpu"]["gemm_unaligned_peak_fraction"] = 1.5;
  json& m = j["nccl"]["measured_all_reduce_busbw_gbs"];
  m["1"] = json::array({json::array({1024, 1.0})});
  m["2"] = json::array({json::array({2048, 2.0}), json::array({1024, 1.0})});
  m["3"] = json::array({json::array({1024})});
  m["16"] = json::array({json::array({1024, 1.0})});
  const auto [v, count] = rejected(j);
  EXPECT_EQ(v.at("gpu.gemm_unaligned_peak_fraction").value, "1.5");
  EXPECT_EQ(v.at("gpu.gemm_unaligned_peak_fraction").rule, "must lie in (0, 1]");
  EXPECT_EQ(v.at("nccl.measured_all_reduce_busbw_gbs.1").rule,
            "must be a group size, an integer ≥ 2");
  EXPECT_EQ(v.at("nccl.measured_all_reduce_busbw_gbs.2").rule,
            "must list sizes in rising order, each once");
  EXPECT_EQ(v.at("nccl.measured_all_reduce_busbw_gbs.3").rule,
            "must be a non-empty array of [bytes > 0, busbw GB/s > 0]");
  EXPECT_EQ(v.at("nccl.measured_all_reduce_busbw_gbs.16").rule,
            "must be at most node.gpus_per_node (8): the table is for groups inside one node");
  EXPECT_EQ(count, 5U);
}

// The topology without an optional nccl key (and its source): what a preset that leaves it
// out holds.
json without_nccl_key(json j, const std::string& key) {
  j["nccl"].erase(key);
  j["nccl"]["source"].erase(key);
  return j;
}

TEST(TopologyValidation, TheP2pRateIsARateAndAbsentMeansTheLinks) {
  json j = to_json(load_topology("dgx-h100"));
  EXPECT_DOUBLE_EQ(parse_topology(j, "h100").nccl.p2p_nvlink.value, 292e9);
  j["nccl"]["p2p_nvlink_gbs"] = -1;
  const auto [v, count] = rejected(j);
  EXPECT_EQ(v.at("nccl.p2p_nvlink_gbs").value, "-1");
  EXPECT_EQ(v.at("nccl.p2p_nvlink_gbs").rule, "must be ≥ 0");
  EXPECT_EQ(count, 1U);
  EXPECT_EQ(
      parse_topology(without_nccl_key(j, "p2p_nvlink_gbs"), "no p2p rate").nccl.p2p_nvlink.value,
      0);
}

TEST(TopologyValidation, RingGroupFractionsNameARingCollectiveAGroupAndAFraction) {
  json j = to_json(load_topology("dgx-h100"));
  EXPECT_DOUBLE_EQ(parse_topology(j, "h100").nccl.ring_group_fraction.at("reduce_scatter").at(2),
                   0.624);
  json& f = j["nccl"]["ring_group_fraction"];
  f["all_reduce"] = {{"2", 0.5}};
  f["all_gather"]["1"] = 0.5;
  f["reduce_scatter"]["4"] = 1.5;
  const auto [v, count] = rejected(j);
  EXPECT_EQ(v.at("nccl.ring_group_fraction.all_reduce").rule,
            "must be all_gather or reduce_scatter");
  EXPECT_EQ(v.at("nccl.ring_group_fraction.all_gather.1").rule,
            "must be a group size, an integer ≥ 2");
  EXPECT_EQ(v.at("nccl.ring_group_fraction.reduce_scatter.4").value, "1.5");
  EXPECT_EQ(v.at("nccl.ring_group_fraction.reduce_scatter.4").rule, "must lie in (0, 1]");
  EXPECT_EQ(count, 3U);
}

TEST(TopologyValidation, TheNvlsGroupSizeIsAGroupAndDefaultsToOneNodeOfEight) {
  json j = to_json(load_topology("dgx-h100"));
  EXPECT_EQ(j.at("nccl").at("nvls_bus_ranks"), 8);
  j["nccl"]["nvls_bus_ranks"] = 1;
  const auto [v, count] = rejected(j);
  EXPECT_EQ(v.at("nccl.nvls_bus_ranks").value, "1");
  EXPECT_EQ(v.at("nccl.nvls_bus_ranks").rule, "must be a group size, an integer ≥ 2");
  EXPECT_EQ(count, 1U);
  EXPECT_EQ(parse_topology(without_nccl_key(j, "nvls_bus_ranks"), "no nvls_bus_ranks")
                .nccl.nvls_bus_ranks,
            8);
  // Without NVLS (A100) the group size is not written.
  EXPECT_FALSE(to_json(load_topology("dgx-a100-80g")).at("nccl").contains("nvls_bus_ranks"));
}

// Which preset numbers were fitted, and on which set of runs: each key names a number the
// preset holds, each entry a set and its rows; the DGX presets say so for their fitted ones.
TEST(TopologyValidation, FittedParametersNameANumberASetAndRows) {
  const Topology a100 = load_topology("dgx-a100-80g");
  EXPECT_EQ(a100.fitted_on.at("gpu.gemm_peak_fraction").set, "korthikanti2022");
  EXPECT_EQ(a100.fitted_on.at("gpu.host_kernel_issue_us").set, "vtrain_single_node");
  EXPECT_FALSE(a100.fitted_on.contains("gpu.hbm_bandwidth_gbs"));  // a datasheet figure
  json j = to_json(a100);
  EXPECT_EQ(parse_topology(j).fitted_on, a100.fitted_on);  // round trip
  j["fitted_on"]["gpu.gemm_peak_fractoin"] = {{"set", "x"}, {"rows", "all"}};
  j["fitted_on"]["gpu.source"] = {{"set", "x"}, {"rows", "all"}};
  j["fitted_on"]["host_kernel_issue_us"] = {{"set", "x"}, {"rows", "all"}};
  j["fitted_on"]["gpu.sm_count"] = {{"set", "x"}};
  j["fitted_on"]["gpu.memory_gib"] = {{"set", "x"}, {"rows", "all"}, {"when", "2026"}};
  const auto [v, count] = rejected(j);
  EXPECT_EQ(v.at("fitted_on.gpu.gemm_peak_fractoin").rule,
            "must name a number of this preset as section.key, e.g. gpu.gemm_peak_fraction");
  EXPECT_TRUE(v.contains("fitted_on.gpu.source"));
  EXPECT_TRUE(v.contains("fitted_on.host_kernel_issue_us"));
  EXPECT_EQ(v.at("fitted_on.gpu.sm_count.rows").rule, "is required");
  EXPECT_EQ(v.at("fitted_on.gpu.memory_gib.when").rule.find("unknown key"), 0U);
  j["fitted_on"]["gpu.sm_count"] = {{"set", ""}, {"rows", "all"}};
  EXPECT_EQ(rejected(j).by_field.at("fitted_on.gpu.sm_count").rule,
            "set and rows must not be empty");
  EXPECT_EQ(count, 5U);
}

// The NVLink domain: optional (absent, the presets of one-node domains read and write as
// before), and when present a whole number of nodes, more than one, on NVLink switches.
TEST(TopologyNvlinkDomain, OptionalAndRoundTripped) {
  for (const char* name : {"cpu-host", "dgx-a100-80g", "dgx-h100", "dgx-b200", "dgx-b300"}) {
    const Topology t = load_topology(name);
    EXPECT_EQ(t.nvlink_domain.gpus, 0) << name;
    EXPECT_EQ(gpus_per_nvlink_domain(t), t.node.gpus_per_node) << name;
    EXPECT_FALSE(to_json(t).contains("nvlink_domain")) << name;
  }
  const Topology nvl = load_topology("gb200-nvl72");
  const json j = to_json(nvl);
  EXPECT_EQ(j.at("nvlink_domain").at("gpus"), 72);
  EXPECT_EQ(parse_topology(j).nvlink_domain, nvl.nvlink_domain);
  EXPECT_EQ(gpus_per_nvlink_domain(nvl), 72);
  EXPECT_EQ(nvl.node.gpus_per_node, 4);  // a tray is the node
}

TEST(TopologyNvlinkDomain, BrokenRulesNameFieldValueAndRule) {
  json j = to_json(load_topology("gb200-nvl72"));
  j["nvlink_domain"]["gpus"] = 70;
  EXPECT_EQ(rejected(j).by_field.at("nvlink_domain.gpus").rule,
            "must be a multiple of node.gpus_per_node (4): a domain holds whole nodes");
  j["nvlink_domain"]["gpus"] = 4;
  auto one = rejected(j).by_field.at("nvlink_domain.gpus");
  EXPECT_EQ(one.value, "4");
  EXPECT_EQ(one.rule,
            "must be larger than node.gpus_per_node (4): a domain of one node is the node; leave "
            "nvlink_domain out");
  j["nvlink_domain"]["gpus"] = 0;
  EXPECT_EQ(rejected(j).by_field.at("nvlink_domain.gpus").rule, "must be ≥ 1");
  j["nvlink_domain"]["gpus"] = 72;
  j["node"]["interconnect"] = "nvlink";
  EXPECT_EQ(rejected(j).by_field.at("nvlink_domain.gpus").rule,
            "needs node.interconnect \"nvswitch\" (it is \"nvlink\"): only NVLink switches join "
            "the GPUs of several nodes");
  j["node"]["interconnect"] = "nvswitch";
  j["nvlink_domain"]["gpu"] = 72;
  j["nvlink_domain"]["source"]["gpu"] = "typo";
  const auto typo = rejected(j);
  EXPECT_EQ(typo.by_field.at("nvlink_domain.gpu").rule, "unknown key; did you mean \"gpus\"?");
  EXPECT_EQ(typo.by_field.at("nvlink_domain.source.gpu").rule,
            "unknown key; did you mean \"gpus\"?");
  EXPECT_EQ(typo.count, 2U);
  j = to_json(load_topology("gb200-nvl72"));
  j["nvlink_domain"] = 72;
  EXPECT_EQ(rejected(j).by_field.at("nvlink_domain").rule,
            "must be a JSON object, not a JSON number");
  // Beyond what NVLink switches join: the physical bound (topology_check.hpp).
  j = to_json(load_topology("gb200-nvl72"));
  j["nvlink_domain"]["gpus"] = 1152;
  const auto big = rejected(j).by_field.at("nvlink_domain.gpus");
  EXPECT_EQ(big.value, "1152");
  EXPECT_NE(big.rule.find("at most 576 GPUs in one domain"), std::string::npos) << big.rule;
}

TEST(TopologyNvlinkDomain, FittedOnAndMeasuredTablesKnowTheDomain) {
  json j = to_json(load_topology("gb200-nvl72"));
  j["fitted_on"]["nvlink_domain.gpus"] = {{"set", "x"}, {"rows", "all"}};
  EXPECT_EQ(parse_topology(j).fitted_on.at("nvlink_domain.gpus").set, "x");
  j["fitted_on"]["nvlink_domain.gpu"] = {{"set", "x"}, {"rows", "all"}};
  EXPECT_TRUE(rejected(j).by_field.contains("fitted_on.nvlink_domain.gpu"));
  // NCCL sees the domain as one node: a measured table may hold up to 72 GPUs, not 73.
  j = to_json(load_topology("gb200-nvl72"));
  j["nccl"]["measured_all_reduce_busbw_gbs"]["72"] = json::array({json::array({1024, 1.0})});
  EXPECT_NO_THROW(parse_topology(j));
  j["nccl"]["measured_all_reduce_busbw_gbs"]["73"] = json::array({json::array({1024, 1.0})});
  EXPECT_EQ(rejected(j).by_field.at("nccl.measured_all_reduce_busbw_gbs.73").rule,
            "must be at most nvlink_domain.gpus (72): the table is for groups inside one NVLink "
            "domain");
}

TEST(TopologyValidation, NicsNeedBandwidth) {
  json j = to_json(load_topology("dgx-a100-80g"));
  j["fabric"]["nic_gbs"] = 0;
  try {
    parse_topology(j);
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.violations().size(), 1U);
    EXPECT_EQ(e.violations()[0].field, "fabric.nic_gbs");
    EXPECT_EQ(e.violations()[0].rule, "must be > 0 when nics_per_node > 0");
  }
}

TEST(TopologyValidation, NotAnObject) {
  try {
    parse_topology(json::array());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.violations().size(), 1U);
    EXPECT_EQ(e.violations()[0].field, "topology");
  }
}

TEST(TopologyLoad, UnknownPresetSuggestsTheClosest) {
  try {
    load_topology("dgx-a100");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.violations().size(), 1U);
    EXPECT_EQ(e.violations()[0].field, "topology");
    EXPECT_EQ(e.violations()[0].value, "dgx-a100");
    EXPECT_NE(e.violations()[0].rule.find("did you mean \"dgx-a100-80g\"?"), std::string::npos);
    EXPECT_NE(e.violations()[0].rule.find("cpu-host | dgx-a100-80g | dgx-b200 | dgx-b300 | "
                                          "dgx-h100 | gb200-nvl72 | gb300-nvl72 | jean-zay-a100 | "
                                          "vtrain-a100"),
              std::string::npos);
  }
}

// What a preset naming dgx-a100-80g as its base must read as: that preset with the
// derived one's name and description, and the numbers it changes with their sources.
json dgx_a100_80g_with(const json& derived,
                       const std::vector<std::pair<std::string, std::string>>& changed) {
  json expected = to_json(load_topology("dgx-a100-80g"));
  expected["name"] = derived.at("name");
  expected["description"] = derived.at("description");
  for (const auto& [section, key] : changed) {
    expected[section][key] = derived.at(section).at(key);
    expected[section]["source"][key] = derived.at(section).at("source").at(key);
  }
  return expected;
}

// vtrain-a100 names dgx-a100-80g as its base: it is that preset with its own name,
// description and four NICs a node (and that number's source), nothing else.
TEST(TopologyBase, APresetWithABaseIsTheBaseWithItsChanges) {
  const json derived = to_json(load_topology("vtrain-a100"));
  EXPECT_EQ(derived, dgx_a100_80g_with(derived, {{"fabric", "nics_per_node"}}));
  EXPECT_EQ(derived.at("name"), "vtrain-a100");
  EXPECT_EQ(derived.at("fabric").at("nics_per_node"), 4);
  EXPECT_NE(derived.at("fabric").at("source").at("nics_per_node").get<std::string>().find("800"),
            std::string::npos);
  EXPECT_EQ(nic_of_gpu(load_topology("vtrain-a100"), 7), 3);
}

// jean-zay-a100 (BLOOM's cluster) is dgx-a100-80g with four Omni-Path 100 Gb/s links a node:
// the NIC count, its line rate and NCCL's bus bandwidth over one NIC change, each with its
// source, and nothing else.
TEST(TopologyBase, JeanZayIsADgxA100WithFourOmniPathLinks) {
  const json derived = to_json(load_topology("jean-zay-a100"));
  EXPECT_EQ(derived, dgx_a100_80g_with(derived, {{"fabric", "nics_per_node"},
                                                 {"fabric", "nic_gbs"},
                                                 {"nccl", "nic_bus_gbs"}}));
  EXPECT_EQ(derived.at("fabric").at("nics_per_node"), 4);
  EXPECT_DOUBLE_EQ(derived.at("fabric").at("nic_gbs").get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(derived.at("nccl").at("nic_bus_gbs").get<double>(), 12.0);
  EXPECT_NE(derived.at("fabric").at("source").at("nic_gbs").get<std::string>().find("Omni-Path"),
            std::string::npos);
}

TEST(TopologyBase, ChangesNeedASourceAndStaleFitsAreDropped) {
  const auto dir = std::filesystem::temp_directory_path() / "tandem_test_topology_base";
  std::filesystem::create_directories(dir);
  auto load = [&](const json& j) {
    const auto path = dir / "t.json";
    std::ofstream(path) << j.dump(2);
    return load_topology(path.string());
  };
  // A changed GEMM fraction with its source: the base's fit of it no longer applies.
  const json faster = {
      {"name", "faster"},
      {"base", "dgx-a100-80g"},
      {"gpu",
       {{"gemm_peak_fraction", 0.8}, {"source", {{"gemm_peak_fraction", "a measurement"}}}}}};
  const Topology t = load(faster);
  EXPECT_DOUBLE_EQ(t.gpu.gemm_peak_fraction, 0.8);
  EXPECT_EQ(t.gpu.sources.at("gemm_peak_fraction"), "a measurement");
  EXPECT_FALSE(t.fitted_on.contains("gpu.gemm_peak_fraction"));
  EXPECT_TRUE(load_topology("dgx-a100-80g").fitted_on.contains("gpu.gemm_peak_fraction"));
  EXPECT_TRUE(t.fitted_on.contains("gpu.host_kernel_issue_us"));
  // The same value as the base's needs no new source.
  json same = faster;
  same["gpu"] = {{"gemm_peak_fraction", load_topology("dgx-a100-80g").gpu.gemm_peak_fraction}};
  EXPECT_NO_THROW(load(same));

  auto violation = [&](const json& j, const std::string& field) -> Violation {
    try {
      load(j);
    } catch (const ConfigError& e) {
      for (const auto& v : e.violations())
        if (v.field == field) return v;
      ADD_FAILURE() << field << " not among the violations of " << j.dump();
      return {};
    }
    ADD_FAILURE() << "no ConfigError for " << j.dump();
    return {};
  };
  json unsourced = faster;
  unsourced["gpu"].erase("source");
  const Violation v = violation(unsourced, "gpu.source.gemm_peak_fraction");
  EXPECT_EQ(v.rule,
            "is required: gpu.gemm_peak_fraction = 0.8 changes dgx-a100-80g's value, whose source "
            "no longer holds");

  json unknown = faster;
  unknown["base"] = "dgx-a100";
  EXPECT_NE(violation(unknown, "base").rule.find("neither a preset"), std::string::npos);
  json unnamed = faster;
  unnamed.erase("name");
  EXPECT_EQ(violation(unnamed, "name").rule, "is required with base: the topology is not its base");
  // A file that is its own base.
  const json loop = {{"name", "loop"}, {"base", (dir / "t.json").string()}};
  EXPECT_NE(violation(loop, "base").rule.find("more than 8"), std::string::npos);
  // A relative base is read beside the file that names it, wherever tandem runs.
  std::filesystem::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "base.json") << faster.dump(2);
  std::ofstream(dir / "sub" / "derived.json")
      << json{{"name", "derived"}, {"base", "base.json"}}.dump(2);
  EXPECT_DOUBLE_EQ(load_topology((dir / "sub" / "derived.json").string()).gpu.gemm_peak_fraction,
                   0.8);
  std::filesystem::remove_all(dir);
}

TEST(TopologyLoad, FilesByPath) {
  const auto dir = std::filesystem::temp_directory_path() / "tandem_test_topology";
  std::filesystem::create_directories(dir);
  // A file that is not a preset: a 4-GPU node with 2 NICs.
  json j = to_json(load_topology("dgx-h100"));
  j["name"] = "small";
  j["node"]["gpus_per_node"] = 4;
  j["fabric"]["nics_per_node"] = 2;
  const auto path = dir / "small.json";
  std::ofstream(path) << j.dump(2);
  const Topology t = load_topology(path.string());
  EXPECT_EQ(t.name, "small");
  EXPECT_EQ(t.node.gpus_per_node, 4);
  EXPECT_EQ(nic_of_gpu(t, 3), 1);

  try {
    load_topology((dir / "missing.json").string());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations()[0].field, (dir / "missing.json").string());
    EXPECT_EQ(e.violations()[0].rule, "no such file");
  }
  const auto bad = dir / "bad.json";
  std::ofstream(bad) << "{\n  \"name\": \"x\",\n  oops\n}\n";
  try {
    load_topology(bad.string());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.violations()[0].field, bad.string());
    EXPECT_EQ(e.violations()[0].value, "line 3");
    EXPECT_NE(e.violations()[0].rule.find("is not valid JSON"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem
