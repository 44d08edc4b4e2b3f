// `tandem layout`: the process groups of a TP/PP/DP/CP/EP layout, as Megatron-Core's
// rank generator makes them, and where each rank is placed.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "schedules/layout.hpp"
#include "tools/cli.hpp"
#include "topology/placement.hpp"

namespace tandem::cli {
namespace {

struct LayoutOptions {
  ScenarioOptions scenario;
  std::optional<int> tp, pp, cp, ep;  // short spellings; --world-size, --order and
                                      // --gpus-per-node are the scenario's own flags
  bool json = false;
  int max_groups = 16;
};

std::string format_group(const std::vector<int>& g) {
  std::string s = "[";
  for (std::size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "]";
}

nlohmann::json layout_json(const Layout& layout, int gpus_per_node) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [kind, gs] : layout.groups) groups[std::string(group_kind_name(kind))] = gs;
  nlohmann::json placement = nlohmann::json::array();
  for (const auto& p : place_ranks(layout.sizes.world(), gpus_per_node))
    placement.push_back({{"rank", p.rank}, {"node", p.node}, {"gpu", p.local_rank}});
  const auto& sz = layout.sizes;
  return {{"world_size", sz.world()},
          {"order", layout.order},
          {"sizes", {{"tp", sz.tp}, {"cp", sz.cp}, {"ep", sz.ep}, {"dp", sz.dp}, {"pp", sz.pp}}},
          {"gpus_per_node", gpus_per_node},
          {"groups", groups},
          {"placement", placement}};
}

void print_layout(const Layout& layout, int gpus_per_node, int max_groups) {
  const auto& sz = layout.sizes;
  std::cout << "world " << sz.world() << " = tp " << sz.tp << " × cp " << sz.cp << " × dp " << sz.dp
            << " × pp " << sz.pp << " (ep " << sz.ep << " over dp·cp), order " << layout.order
            << ", " << gpus_per_node << " ranks per node\n\n";
  for (const auto& [kind, gs] : layout.groups) {
    std::ostringstream line;
    line << std::left << std::setw(20) << group_kind_name(kind);
    const int shown = std::min<int>(max_groups, static_cast<int>(gs.size()));
    for (int i = 0; i < shown; ++i) line << format_group(gs[i]) << " ";
    if (shown < static_cast<int>(gs.size()))
      line << "… (" << gs.size() << " groups of " << gs[0].size() << ")";
    std::cout << line.str() << "\n";
  }
  if (sz.world() > 64) return;
  std::cout << "\nrank  node  gpu    tp  cp  ep  dp  pp\n";
  for (const auto& p : place_ranks(sz.world(), gpus_per_node)) {
    const auto ctx = make_parallel_context(layout, p.rank);
    std::cout << std::setw(4) << p.rank << std::setw(6) << p.node << std::setw(5) << p.local_rank
              << "   " << std::setw(3) << ctx.coords.tp << std::setw(4) << ctx.coords.cp
              << std::setw(4) << ctx.coords.ep << std::setw(4) << ctx.coords.dp << std::setw(4)
              << ctx.coords.pp << "\n";
  }
}

}  // namespace

void add_layout_command(CLI::App& app) {
  auto opts = std::make_shared<LayoutOptions>();
  auto* cmd = app.add_subcommand(
      "layout",
      "Print the process groups (tp, pp, dp, cp, dp-cp, tp-cp, tp-pp, tp-dp-cp, tp-dp, "
      "embedding, …) of a layout, as Megatron-Core's rank generator builds them");
  // --world-size, --order and --gpus-per-node are the scenario flags registered below.
  cmd->add_option("--tp", opts->tp, "Tensor-parallel size");
  cmd->add_option("--pp", opts->pp, "Pipeline-parallel size");
  cmd->add_option("--cp", opts->cp, "Context-parallel size");
  cmd->add_option("--ep", opts->ep, "Expert-parallel size (divides the data-parallel size)");
  cmd->add_flag("--json", opts->json,
                "Print JSON: {\"world_size\", \"groups\": {\"tp\": [[0,1],…], …}}");
  cmd->add_option("--max-groups", opts->max_groups, "Groups printed per kind in text output")
      ->check(positive());
  add_scenario_options(*cmd, opts->scenario);
  cmd->callback([opts] {
    const Scenario s = resolve_scenario(opts->scenario, !opts->scenario.file.empty());
    LayoutSpec spec{s.cluster.world_size,
                    s.parallelism.tensor_model_parallel_size,
                    s.parallelism.pipeline_model_parallel_size,
                    s.parallelism.context_parallel_size,
                    s.parallelism.expert_model_parallel_size,
                    s.parallelism.order};
    if (opts->tp) spec.tp = *opts->tp;
    if (opts->pp) spec.pp = *opts->pp;
    if (opts->cp) spec.cp = *opts->cp;
    if (opts->ep) spec.ep = *opts->ep;
    const int gpn = s.cluster.gpus_per_node;
    const Layout layout = make_layout(spec);
    place_ranks(spec.world_size, gpn);  // validates gpus_per_node
    if (opts->json)
      std::cout << layout_json(layout, gpn).dump() << "\n";
    else
      print_layout(layout, gpn, opts->max_groups);
  });
}

}  // namespace tandem::cli
