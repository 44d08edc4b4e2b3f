// Scenario options shared by subcommands, and `tandem scenario`, which prints the
// resolved scenario (file + overrides, validated) with its derived sizes as JSON.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "core/pipeline_layout.hpp"
#include "model/flops.hpp"
#include "tools/cli.hpp"

namespace tandem::cli {

void add_scenario_options(CLI::App& cmd, ScenarioOptions& opts) {
  const bool flagged = opts.without_file == ScenarioOptions::WithoutFile::megatron_when_flagged;
  cmd.add_option("scenario", opts.positionals,
                 std::string("Scenario JSON file (model, parallelism, training, cluster); "
                             "default: the built-in default scenario") +
                     (flagged ? ", or Megatron-LM's defaults (one rank, tp 1, pp 1, …) once a "
                                "Megatron argument is given"
                              : "") +
                     ". After --: a Megatron-LM pretrain_gpt.py argument list, verbatim");
  // The first positional is the scenario file unless it is already a Megatron flag.
  cmd.parse_complete_callback([&opts] {
    opts.file = !opts.positionals.empty() && !opts.positionals.front().starts_with("-")
                    ? opts.positionals.front()
                    : "";
  });
  cmd.add_option("--megatron-script", opts.megatron_script,
                 "A Megatron-LM launch script (bash: arrays, variables, then torchrun ... "
                 "pretrain_gpt.py ARGS): its pretrain_gpt.py arguments, and the world size "
                 "torchrun's --nproc_per_node x --nnodes start");
  const auto& fields = scenario_fields();
  opts.values.resize(fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    auto* o = cmd.add_option(f.flag, opts.values[i], f.help + " [" + f.type + "]");
    o->group("Scenario overrides (Megatron argument names)");
    if (f.type == "bool") o->expected(0, 1)->default_str("");
    if (f.type == "int list")
      o->expected(1, 3)->delimiter(',');
    else
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
    opts.flags.emplace_back(f.name, o);
  }
  // Megatron's switches whose flag is not a field's (store_false --no-…, and shorthands such
  // as --recompute-activations): a Megatron user types them as pretrain_gpt.py takes them.
  for (const auto& a : megatron_arguments()) {
    const std::string flag(a.flag);
    if (a.nargs != "0" || cmd.get_option_no_throw(flag) != nullptr) continue;
    const auto m = modelled_argument(a);
    if (!m || m->sample_based) continue;
    auto* o =
        cmd.add_flag(flag)->description("Megatron's switch: " + m->field + " = " + m->switch_value);
    o->group("Megatron switches (as pretrain_gpt.py takes them)");
    opts.switches.push_back({m->field, m->switch_value, o});
  }
}

namespace {

bool given(const std::vector<std::pair<std::string, std::string>>& kv, std::string_view field) {
  return std::any_of(kv.begin(), kv.end(), [&](const auto& p) { return p.first == field; });
}

// Megatron's pretrain_gpt.py arguments (script, then after --) as overrides, with the
// world the script's torchrun starts; prints the "not modelled: ..." line once.
std::vector<std::pair<std::string, std::string>> megatron_overrides(ScenarioOptions& opts,
                                                                    bool& megatron) {
  std::vector<std::string> args;
  std::optional<LaunchScript> script;
  if (!opts.megatron_script.empty()) {
    script = read_launch_script(opts.megatron_script);
    args = script->args;
  }
  const auto rest = opts.positionals.begin() + (opts.file.empty() ? 0 : 1);
  args.insert(args.end(), rest, opts.positionals.end());
  megatron = script.has_value() || !args.empty();
  opts.megatron = {};
  if (!megatron) return {};
  opts.megatron = parse_megatron_args(args);
  std::vector<std::pair<std::string, std::string>> kv;
  if (script && script->nproc_per_node) {
    kv.emplace_back("world_size",
                    std::to_string(*script->nproc_per_node * script->nnodes.value_or(1)));
    kv.emplace_back("gpus_per_node", std::to_string(*script->nproc_per_node));
  }
  kv.insert(kv.end(), opts.megatron.overrides.begin(), opts.megatron.overrides.end());
  MegatronCommandLine reported = opts.megatron;
  std::erase_if(reported.not_modelled, [&](const auto& a) {
    return std::find(opts.handled_flags.begin(), opts.handled_flags.end(), a.first) !=
           opts.handled_flags.end();
  });
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (const auto line = not_modelled_line(reported);
      !line.empty() && (!rank || std::string(rank) == "0"))
    std::cerr << "tandem: " << line << "\n";
  return kv;
}

// Whether a flag that sets a field of Megatron's arguments was given (--world-size,
// --topology, --gpus-per-node are tandem's: they alone keep the built-in default).
bool megatron_flag_given(const ScenarioOptions& opts) {
  static const std::set<std::string> megatron_fields = [] {
    std::set<std::string> fields;
    for (const auto& a : megatron_arguments())
      if (const auto m = modelled_argument(a)) fields.insert(m->field);
    return fields;
  }();
  return std::any_of(opts.flags.begin(), opts.flags.end(),
                     [](const auto& flag) {
                       return flag.second->count() > 0 && megatron_fields.count(flag.first) > 0;
                     }) ||
         std::any_of(opts.switches.begin(), opts.switches.end(),
                     [](const auto& sw) { return sw.option->count() > 0; });
}

}  // namespace

Scenario resolve_scenario(ScenarioOptions& opts, bool validate_it) {
  bool megatron = false;
  auto kv = megatron_overrides(opts, megatron);
  using WithoutFile = ScenarioOptions::WithoutFile;
  const bool megatron_base =
      megatron || opts.without_file == WithoutFile::megatron_defaults ||
      (opts.without_file == WithoutFile::megatron_when_flagged && megatron_flag_given(opts));
  const bool from_megatron = opts.file.empty() && megatron_base;
  if (opts.file.empty() && megatron) check_megatron_required(opts.megatron);
  Scenario s = !opts.file.empty() ? load_scenario(opts.file)
               : from_megatron    ? megatron_default_scenario()
                                  : default_scenario();
  if (from_megatron) s.cluster.world_size = opts.default_world_size;
  opts.overrides.clear();
  // Megatron's switches go with its other arguments: a field's own flag, tandem's, wins.
  for (const auto& sw : opts.switches)
    if (sw.option->count() > 0) kv.emplace_back(sw.field, sw.value);
  const auto& fields = scenario_fields();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    auto* o = opts.flags[i].second;
    if (o->count() == 0) continue;
    std::string value;
    if (fields[i].type == "int list")
      for (const auto& r : o->results()) value += (value.empty() ? "" : ",") + r;
    else if (!o->results().empty())
      value = o->results().back();
    if (fields[i].type == "bool" && value.empty()) value = "true";  // Megatron's store_true
    opts.overrides.emplace_back(fields[i].name, value);
  }
  kv.insert(kv.end(), opts.overrides.begin(), opts.overrides.end());  // tandem's flags win
  apply_overrides(s, kv);
  // Megatron's default global batch: one microbatch per data-parallel rank.
  if (from_megatron && !given(kv, "global_batch_size") && data_parallel_size(s) > 0)
    s.training.global_batch_size = s.training.micro_batch_size * data_parallel_size(s);
  apply_sample_based(opts.megatron, kv, s);
  opts.overrides = std::move(kv);
  if (validate_it) validate(s);
  return s;
}

void write_file(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  if (p.has_parent_path() && !std::filesystem::exists(p.parent_path()))
    throw ConfigError("output path", path,
                      "its folder " + p.parent_path().string() + " does not exist");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << text;
    if (!out) throw std::runtime_error("writing " + path + " failed");
  }
  std::filesystem::rename(tmp, p);
}

void add_scenario_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "scenario",
      "Check a scenario and print it resolved (file + flag overrides, or a Megatron-LM "
      "command line) as JSON, with the derived data-parallel size, virtual pipeline size, "
      "padded vocabulary, parameters (total and per rank) and FLOPs per iteration "
      "(Megatron's num_floating_point_operations)");
  auto opts = std::make_shared<ScenarioOptions>();
  opts->without_file = ScenarioOptions::WithoutFile::megatron_when_flagged;
  add_scenario_options(*cmd, *opts);
  auto list = std::make_shared<bool>(false);
  cmd->add_flag("--megatron-arguments", *list,
                "List every argument of Megatron-LM's pretrain_gpt.py: the scenario field it "
                "sets, or 'not modelled'");
  cmd->callback([opts, list] {
    if (*list) {
      int modelled = 0;
      for (const auto& a : megatron_arguments()) {
        const auto m = modelled_argument(a);
        modelled += m.has_value();
        std::cout << a.flag << (a.nargs == "0" ? "" : " VALUE") << (a.nargs == "+" ? "…" : "")
                  << "\t" << (m ? m->field : "not modelled")
                  << (m && m->sample_based ? " (in iterations of the global batch)" : "") << "\n";
      }
      std::cout << megatron_arguments().size() << " arguments: " << modelled << " modelled, "
                << megatron_arguments().size() - static_cast<std::size_t>(modelled)
                << " not modelled\n";
      return;
    }
    const Scenario s = resolve_scenario(*opts);
    auto j = to_json(s);
    j["derived"] = {{"data_parallel_size", data_parallel_size(s)},
                    {"virtual_pipeline_model_parallel_size", virtual_pipeline_size(s)},
                    {"padded_vocab_size", padded_vocab_size(s)},
                    {"ffn_hidden_size", ffn_hidden_size(s)},
                    {"pipeline_schedule", effective_pipeline_schedule(s)},
                    {"num_query_groups", num_query_groups(s)}};
    // The pipeline partition (core/pipeline_layout.hpp): each stage's transformer layers.
    std::vector<int> stage_layers;
    for (int r = 0; r < s.parallelism.pipeline_model_parallel_size; ++r)
      stage_layers.push_back(stage_num_layers(s, r));
    j["derived"]["layers_per_pipeline_stage"] = stage_layers;
    // Megatron's parameter count and num_floating_point_operations (model/flops.hpp).
    const DenseShape shape = dense_shape(s);
    const auto params = parameter_count(shape);
    j["derived"]["parameters"] = params.total;
    if (mtp_depths(s.model) > 0) {
      // Beside the main model's, as DeepSeek counts V3's 671B and its 14B MTP module.
      j["derived"]["mtp_parameters"] = params.mtp;
      if (s.model.num_experts) j["derived"]["mtp_active_parameters"] = params.active_mtp;
    }
    if (s.model.num_experts) {
      j["derived"]["active_parameters"] = params.active;
      j["derived"]["num_moe_layers"] = num_moe_layers(s);
      j["derived"]["moe_ffn_hidden_size"] = moe_ffn_hidden_size(s);
    }
    std::vector<bool> moe_layer;
    for (int i = 0; i < s.model.num_layers; ++i) moe_layer.push_back(is_moe_layer(s, i));
    j["derived"]["parameters_per_rank"] = parameters_per_rank(
        shape, s.parallelism.tensor_model_parallel_size, s.parallelism.pipeline_model_parallel_size,
        s.parallelism.expert_model_parallel_size, moe_layer, pipeline_partition(s));
    j["derived"]["flops_per_iteration"] =
        num_floating_point_operations(shape, s.training.global_batch_size);
    std::cout << j.dump(2) << "\n";
  });
}

}  // namespace tandem::cli
