// Scenario options shared by subcommands, and `tandem scenario`, which prints the
// resolved scenario (file + overrides, validated) with its derived sizes as JSON.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "tools/cli.hpp"

namespace tandem::cli {

void add_scenario_options(CLI::App& cmd, ScenarioOptions& opts) {
  cmd.add_option("scenario", opts.file,
                 "Scenario JSON file (model, parallelism, training, cluster); default: the "
                 "built-in default scenario");
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
}

Scenario resolve_scenario(ScenarioOptions& opts, bool validate_it) {
  Scenario s = opts.file.empty() ? default_scenario() : load_scenario(opts.file);
  opts.overrides.clear();
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
  apply_overrides(s, opts.overrides);
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
      "Check a scenario and print it resolved (file + flag overrides) as JSON, with "
      "the derived data-parallel size, virtual pipeline size and padded vocabulary");
  auto opts = std::make_shared<ScenarioOptions>();
  add_scenario_options(*cmd, *opts);
  cmd->callback([opts] {
    const Scenario s = resolve_scenario(*opts);
    auto j = to_json(s);
    j["derived"] = {{"data_parallel_size", data_parallel_size(s)},
                    {"virtual_pipeline_model_parallel_size", virtual_pipeline_size(s)},
                    {"padded_vocab_size", padded_vocab_size(s)},
                    {"ffn_hidden_size", ffn_hidden_size(s)},
                    {"pipeline_schedule", effective_pipeline_schedule(s)}};
    std::cout << j.dump(2) << "\n";
  });
}

}  // namespace tandem::cli
