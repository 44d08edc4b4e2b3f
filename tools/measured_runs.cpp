// Reading measured runs, drawing their halves and summarising errors per half (see
// measured_runs.hpp).
#include "tools/measured_runs.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

// vTrain's header, in its order; the optional columns may follow in any order.
const std::vector<std::string> kRequired = {"# GPUs",
                                            "global batch",
                                            "micro batch",
                                            "hidden size",
                                            "attention heads",
                                            "# layers",
                                            "sequence length",
                                            "tensor parallelism",
                                            "data parallelism",
                                            "pipeline parallelism",
                                            "iteration time (ms)"};
// "Parameters (billion)" leads vTrain's multi-node file (data/ground_truth_multi.csv): the
// model's size as the file states it, checked as a number and not used (the layers, hidden
// size and vocabulary say what is simulated).
const std::vector<std::string> kOptional = {"precision", "recompute", "schedule", "topology",
                                            "Parameters (billion)"};

std::string where(int line, const std::string& column) {
  return "line " + std::to_string(line) + ", " + column;
}

std::optional<double> parse_number(const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<std::string> raw_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

}  // namespace

std::string_view half_name(Half h) {
  return h == Half::calibration ? "calibration" : "validation";
}

std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a offset basis
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;  // FNV prime
  }
  return hash;
}

Half half_of(std::string_view csv_line) {
  return fnv1a64(csv_line) % 2 == 0 ? Half::calibration : Half::validation;
}

std::string hidden_split_rule(int calibration_hidden) {
  return "calibration: hidden size " + std::to_string(calibration_hidden) +
         "; validation: every other hidden size";
}

MeasuredTable read_measured_runs(const std::filesystem::path& csv, const std::string& topology,
                                 std::optional<int> calibration_hidden) {
  MeasuredTable table;
  table.csv = csv;
  const std::string source = csv.string();
  std::ifstream in(csv);
  if (!in) throw ConfigError("measured runs", source, "cannot be opened");
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  // A UTF-8 byte order mark (spreadsheets write one; vTrain's multi-node file has one) is
  // not part of the first column's name.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  const auto lines_text = raw_lines(text);
  std::vector<int> lines;
  const auto records = parse_csv(text, &lines);
  if (records.empty()) throw ConfigError("measured runs", source, "is empty");
  std::map<std::string, std::size_t> column;
  std::vector<Violation> problems;
  for (std::size_t i = 0; i < records[0].size(); ++i) {
    const std::string& name = records[0][i];
    if (std::find(kRequired.begin(), kRequired.end(), name) == kRequired.end() &&
        std::find(kOptional.begin(), kOptional.end(), name) == kOptional.end())
      problems.push_back({where(1, "header"), name,
                          "unknown column; the columns are vTrain's (# GPUs, …, iteration time "
                          "(ms)) and optionally precision, recompute, schedule, topology, "
                          "Parameters (billion)"});
    column[name] = i;
  }
  for (const auto& name : kRequired)
    if (!column.count(name))
      problems.push_back({where(1, "header"), name, "required column missing"});
  if (!problems.empty()) throw ConfigError(std::move(problems), source);

  for (std::size_t r = 1; r < records.size(); ++r) {
    const auto& f = records[r];
    const int line = lines[r];
    if (f.size() != records[0].size()) {
      problems.push_back({where(line, "row"), std::to_string(f.size()) + " fields",
                          "the header has " + std::to_string(records[0].size())});
      continue;
    }
    auto text_of = [&](const std::string& name, const std::string& fallback) {
      const auto it = column.find(name);
      return it == column.end() || f[it->second].empty() ? fallback : f[it->second];
    };
    bool ok = true;
    auto integer = [&](const std::string& name) {
      const auto v = parse_number(f[column.at(name)]);
      if (!v || *v < 1 || *v != std::floor(*v) || *v > 1e9) {
        problems.push_back({where(line, name), f[column.at(name)], "must be an integer ≥ 1"});
        ok = false;
        return 1;
      }
      return static_cast<int>(*v);
    };
    MeasuredRun run;
    run.line = line;
    run.text = static_cast<std::size_t>(line - 1) < lines_text.size()
                   ? lines_text[static_cast<std::size_t>(line - 1)]
                   : "";
    run.half = half_of(run.text);
    const int gpus = integer("# GPUs"), gb = integer("global batch"), mb = integer("micro batch");
    const int hidden = integer("hidden size"), heads = integer("attention heads");
    const int layers = integer("# layers"), seq = integer("sequence length");
    const int tp = integer("tensor parallelism"), dp = integer("data parallelism");
    const int pp = integer("pipeline parallelism");
    const auto ms = parse_number(f[column.at("iteration time (ms)")]);
    if (!ms || *ms <= 0) {
      problems.push_back({where(line, "iteration time (ms)"), f[column.at("iteration time (ms)")],
                          "must be a positive number"});
      ok = false;
    }
    const std::string precision = text_of("precision", "fp16");
    const std::string recompute = text_of("recompute", "full");
    const std::string schedule = text_of("schedule", "1f1b");
    const std::string topo = topology.empty() ? text_of("topology", "vtrain-a100") : topology;
    if (const auto it = column.find("Parameters (billion)");
        it != column.end() && !f[it->second].empty()) {
      const auto b = parse_number(f[it->second]);
      if (!b || *b <= 0) {
        problems.push_back({where(line, "Parameters (billion)"), f[it->second],
                            "must be a positive number (or empty)"});
        ok = false;
      }
    }
    if (precision != "fp16" && precision != "bf16" && precision != "fp32") {
      problems.push_back({where(line, "precision"), precision, "must be fp16, bf16 or fp32"});
      ok = false;
    }
    if (!ok) continue;
    if (gpus != tp * dp * pp) {
      problems.push_back({where(line, "# GPUs"), std::to_string(gpus),
                          "must equal tensor × data × pipeline parallelism (" +
                              std::to_string(tp * dp * pp) + ")"});
      continue;
    }
    Scenario s = default_scenario();
    s.name = "line-" + std::to_string(line);
    s.description = "measured run, " + source + " line " + std::to_string(line);
    s.source = source;
    s.model.num_layers = layers;
    s.model.hidden_size = hidden;
    s.model.num_attention_heads = heads;
    s.model.seq_length = seq;
    // vTrain's model: GPT-2's 50257 tokens unpadded, 50257 / tp (rounded down) per rank,
    // and an output layer with its own weight (vTrain src/predictor.py model_params).
    s.model.vocab_size = tp * (50257 / tp);
    s.model.make_vocab_size_divisible_by = 1;
    s.model.untie_embeddings_and_output_weights = true;
    s.parallelism.tensor_model_parallel_size = tp;
    s.parallelism.pipeline_model_parallel_size = pp;
    s.parallelism.pipeline_schedule = pp == 1 && schedule == "1f1b" ? "auto" : schedule;
    s.parallelism.sequence_parallel = false;
    s.parallelism.use_distributed_optimizer = false;
    s.parallelism.overlap_grad_reduce = false;
    s.parallelism.overlap_param_gather = false;
    s.training.micro_batch_size = mb;
    s.training.global_batch_size = gb;
    s.training.rampup_batch_size.clear();
    s.training.fp16 = precision == "fp16";
    s.training.bf16 = precision == "bf16";
    s.training.deepspeed = true;  // vTrain measured Megatron-DeepSpeed
    // gradient_accumulation_fusion stays on (no add kernels) although Megatron-DeepSpeed adds
    // each microbatch's weight gradient apart: the rows repeat one profiled step of vTrain's
    // (src/trainer.py: FusedAdam's zero_grad sets the gradients to None after each), whose
    // backward keeps the fresh gradient and adds nothing.
    s.training.gradient_accumulation_fusion = true;
    // vTrain profiles its layers on one GPU without communication and adds each
    // tensor-parallel all-reduce after the layer's kernels on the same stream (src/predictor.py
    // _add_tp_communication: two per layer and pass), so no all-reduce overlaps compute in the
    // rows: as Megatron-DeepSpeed runs with --no-async-tensor-model-parallel-allreduce.
    s.training.async_tensor_model_parallel_allreduce = false;
    // vTrain profiles each layer between CUPTI timestamps (src/trainer.py: a flush at every
    // layer's forward and backward start and end). cuptiActivityFlushAll(0) flushes the
    // host's activity buffers and does not synchronize the device: a host cost per layer
    // pass (the preset's host_layer_timestamp_us), with the host still running ahead of the
    // GPU across layers. The rows' non-layer part (the output layer's, composed from a
    // profile of its own) shows no such run-ahead: the output layer's GPU time at tp 1 does
    // not hide behind the layers' issue, so the host waits for the GPU around it.
    s.training.host_layer_timestamps = true;
    s.training.host_sync_output_layer = true;
    // vTrain's GPT (src/model/gpt_model.py) keeps Megatron's dropouts of 0.1: on the
    // attention probabilities, after the embedding and on each layer's outputs (its
    // output_dropout_prob, in a jit-fused bias-dropout-add).
    s.model.attention_dropout = 0.1;
    s.model.hidden_dropout = 0.1;
    s.training.recompute_granularity = recompute;
    s.training.recompute_method = "uniform";
    s.training.recompute_num_layers = 1;
    s.cluster.world_size = gpus;
    s.cluster.topology = topo;
    try {
      const Topology t = load_topology(topo);
      s.cluster.gpus_per_node = t.node.gpus_per_node;
      validate(s);
    } catch (const ConfigError& e) {
      problems.push_back({where(line, "row"), run.text, e.what()});
      continue;
    }
    run.scenario = std::move(s);
    run.iteration_ms = *ms;
    char label[160];
    std::snprintf(label, sizeof label, "%d GPUs tp%d dp%d pp%d h%d L%d mb%d gb%d", gpus, tp, dp, pp,
                  hidden, layers, mb, gb);
    run.label = label;
    table.rows.push_back(std::move(run));
  }
  if (!problems.empty()) throw ConfigError(std::move(problems), source);
  if (calibration_hidden) {
    int calibration = 0;
    for (auto& run : table.rows) {
      run.half = run.scenario.model.hidden_size == *calibration_hidden ? Half::calibration
                                                                       : Half::validation;
      calibration += run.half == Half::calibration ? 1 : 0;
    }
    if (calibration == 0 || calibration == static_cast<int>(table.rows.size()))
      throw ConfigError(
          "--calibration-hidden", std::to_string(*calibration_hidden),
          calibration == 0
              ? "no row of " + source + " has this hidden size"
              : "every row of " + source + " has this hidden size: nothing is left to judge on");
  }
  return table;
}

std::vector<const MeasuredRun*> select_runs(const MeasuredTable& table, const std::string& half,
                                            int limit) {
  if (half != "both" && half != "calibration" && half != "validation")
    throw ConfigError("half", half, "must be both, calibration or validation");
  if (limit < 0) throw ConfigError("limit", std::to_string(limit), "must be ≥ 0");
  std::vector<const MeasuredRun*> runs;
  std::map<Half, int> taken;
  for (const auto& row : table.rows) {
    if (half != "both" && half_name(row.half) != half) continue;
    if (limit > 0 && taken[row.half] >= limit) continue;
    ++taken[row.half];
    runs.push_back(&row);
  }
  return runs;
}

HalfSummary summarize(const std::vector<double>& errors) {
  HalfSummary h;
  static_cast<MetricSummary&>(h) = summarise(errors);
  double sum = 0;
  for (double e : errors) sum += std::abs(e);
  if (!errors.empty()) h.mean_abs_error_percent = sum / static_cast<double>(errors.size());
  return h;
}

std::optional<double> spearman_rank_correlation(const std::vector<double>& a,
                                                const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return std::nullopt;
  const auto ranks = [](const std::vector<double>& x) {
    std::vector<std::size_t> order(x.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t i, std::size_t j) { return x[i] < x[j]; });
    std::vector<double> r(x.size());
    for (std::size_t i = 0; i < order.size();) {
      std::size_t j = i;
      while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
      const double mean_rank = (static_cast<double>(i + j) / 2) + 1;  // ties share their mean
      for (std::size_t k = i; k <= j; ++k) r[order[k]] = mean_rank;
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double mean = (static_cast<double>(a.size()) + 1) / 2;  // of 1..n, ties averaged or not
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (saa == 0 || sbb == 0) return std::nullopt;
  return sab / std::sqrt(saa * sbb);
}

namespace {

std::string job_of(const Scenario& s) {
  char job[160];
  std::snprintf(job, sizeof job, "h%d a%d L%d s%d, %d GPUs, global batch %d", s.model.hidden_size,
                s.model.num_attention_heads, s.model.num_layers, s.model.seq_length,
                s.cluster.world_size, s.training.global_batch_size);
  return job;
}

int nodes_of(const Scenario& s) {
  const int per_node = std::max(1, s.cluster.gpus_per_node);
  return (s.cluster.world_size + per_node - 1) / per_node;
}

}  // namespace

MeasuredValidation compare_measured(const std::vector<const MeasuredRun*>& runs,
                                    const std::map<std::size_t, nlohmann::json>& reports,
                                    MeasuredTarget target) {
  MeasuredValidation v;
  v.target = target;
  std::map<std::string, std::vector<double>> errors;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    MeasuredResult r;
    r.run = runs[i];
    const auto it = reports.find(i);
    if (it != reports.end() && it->second.contains("iteration_seconds")) {
      r.predicted_ms = it->second.at("iteration_seconds").get<double>() * 1e3;
      r.error_percent = (*r.predicted_ms - r.run->iteration_ms) / r.run->iteration_ms * 100;
      errors[std::string(half_name(r.run->half))].push_back(*r.error_percent);
    }
    v.rows.push_back(r);
  }
  for (const auto& [half, e] : errors) v.halves[half] = summarize(e);
  std::map<int, std::vector<double>> by_nodes;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> jobs;
  for (const auto& r : v.rows) {
    if (!r.predicted_ms) continue;
    by_nodes[nodes_of(r.run->scenario)].push_back(*r.error_percent);
    auto& [measured, predicted] = jobs[job_of(r.run->scenario)];
    measured.push_back(r.run->iteration_ms);
    predicted.push_back(*r.predicted_ms);
  }
  for (const auto& [nodes, e] : by_nodes) v.by_nodes[nodes] = summarize(e);
  for (const auto& [job, times] : jobs) {
    if (static_cast<int>(times.first.size()) < kMinLayoutsRanked) continue;
    if (const auto rho = spearman_rank_correlation(times.first, times.second))
      v.layout_groups.push_back({job, static_cast<int>(times.first.size()), *rho});
  }
  // The target is the validation half's; a run of the calibration half alone is held to it
  // too (ctest checks both halves).
  bool any_validation = false;
  for (const MeasuredRun* run : runs) any_validation |= run->half == Half::validation;
  v.target_half = any_validation ? "validation" : "calibration";
  bool failed = false;
  for (const auto& r : v.rows) failed |= !r.predicted_ms && half_name(r.run->half) == v.target_half;
  const auto it = v.halves.find(v.target_half);
  v.target_met = !failed && it != v.halves.end() && it->second.rows > 0 &&
                 it->second.median_abs_error_percent <= v.target.median_abs_error_percent &&
                 it->second.max_abs_error_percent <= v.target.max_abs_error_percent;
  return v;
}

std::string format_measured(const MeasuredValidation& v) {
  std::ostringstream out;
  char line[320];
  std::snprintf(line, sizeof line, "%-6s %-11s %-44s %12s %12s %8s\n", "line", "half", "run",
                "measured ms", "predicted ms", "error %");
  out << line;
  for (const auto& r : v.rows) {
    if (r.predicted_ms)
      std::snprintf(line, sizeof line, "%-6d %-11s %-44s %12.2f %12.2f %+8.1f\n", r.run->line,
                    std::string(half_name(r.run->half)).c_str(), r.run->label.c_str(),
                    r.run->iteration_ms, *r.predicted_ms, *r.error_percent);
    else
      std::snprintf(line, sizeof line, "%-6d %-11s %-44s %12.2f %12s %8s\n", r.run->line,
                    std::string(half_name(r.run->half)).c_str(), r.run->label.c_str(),
                    r.run->iteration_ms, "FAILED", "");
    out << line;
  }
  for (const auto& [half, s] : v.halves) {
    std::snprintf(line, sizeof line,
                  "%s half: %d row(s), |error| median %.1f %%, mean %.1f %%, p95 %.1f %%, "
                  "max %.1f %%; signed median %.1f %%, %d fast\n",
                  half.c_str(), s.rows, s.median_abs_error_percent, s.mean_abs_error_percent,
                  s.p95_abs_error_percent, s.max_abs_error_percent, s.median_error_percent,
                  s.below_zero);
    out << line;
  }
  if (v.by_nodes.size() > 1)
    for (const auto& [nodes, s] : v.by_nodes) {
      std::snprintf(line, sizeof line,
                    "%d node%s: %d row(s), |error| median %.1f %%, p95 %.1f %%, max %.1f %%; "
                    "signed median %.1f %%, %d fast\n",
                    nodes, nodes == 1 ? "" : "s", s.rows, s.median_abs_error_percent,
                    s.p95_abs_error_percent, s.max_abs_error_percent, s.median_error_percent,
                    s.below_zero);
      out << line;
    }
  if (!v.layout_groups.empty()) {
    std::vector<double> rhos;
    for (const auto& g : v.layout_groups) rhos.push_back(g.spearman);
    std::snprintf(line, sizeof line,
                  "layout ranking (Spearman's rho of measured and predicted time over the "
                  "layouts of one model, GPU count and global batch; %zu job(s) of >= %d "
                  "layouts): median %.2f, min %.2f\n",
                  rhos.size(), kMinLayoutsRanked, median(rhos),
                  *std::min_element(rhos.begin(), rhos.end()));
    out << line;
  }
  std::snprintf(line, sizeof line,
                "target on the %s half (median |error| <= %.0f %%, max <= %.0f %%): %s\n",
                v.target_half.c_str(), v.target.median_abs_error_percent,
                v.target.max_abs_error_percent, v.target_met ? "met" : "MISSED");
  out << line;
  return out.str();
}

nlohmann::json to_json(const MeasuredValidation& v) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : v.rows) {
    nlohmann::json j = {{"line", r.run->line},
                        {"half", std::string(half_name(r.run->half))},
                        {"run", r.run->label},
                        {"measured_ms", r.run->iteration_ms}};
    j["predicted_ms"] = r.predicted_ms ? nlohmann::json(*r.predicted_ms) : nlohmann::json(nullptr);
    j["error_percent"] =
        r.error_percent ? nlohmann::json(*r.error_percent) : nlohmann::json(nullptr);
    rows.push_back(j);
  }
  // The halves carry the mean |error| too, the node counts do not.
  nlohmann::json halves = nlohmann::json::object();
  for (const auto& [half, s] : v.halves) {
    halves[half] = summary_json(s);
    halves[half]["mean_abs_error_percent"] = s.mean_abs_error_percent;
  }
  nlohmann::json nodes = nlohmann::json::object();
  for (const auto& [n, s] : v.by_nodes) nodes[std::to_string(n)] = summary_json(s);
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : v.layout_groups)
    groups.push_back({{"job", g.job}, {"rows", g.rows}, {"spearman", g.spearman}});
  return {{"rows", rows},
          {"halves", halves},
          {"by_nodes", nodes},
          {"layout_ranking", {{"min_layouts", kMinLayoutsRanked}, {"jobs", groups}}},
          {"target",
           {{"half", v.target_half},
            {"median_abs_error_percent", v.target.median_abs_error_percent},
            {"max_abs_error_percent", v.target.max_abs_error_percent}}},
          {"target_met", v.target_met}};
}

}  // namespace tandem::cli
