// `tandem schedule`: every pipeline stage's op order for a schedule kind, its idealised
// timeline (bubble fraction against the closed form), as text, JSON, a Chrome trace
// and an SVG.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/trace_svg.hpp"
#include "schedules/timeline.hpp"
#include "schedules/timeline_trace.hpp"
#include "tools/cli.hpp"

namespace tandem::cli {
namespace {

struct ScheduleOptions {
  ScenarioOptions scenario;
  std::optional<int> pp, vpp, microbatches, group_size;
  std::optional<std::string> kind;
  bool json = false;
  bool with_p2p = false;
  std::string trace_path, svg_path;
  double forward_ms = 1.0, backward_ms = 2.0, p2p_ms = 0.0;
};

ScheduleSpec spec_from(const ScheduleOptions& o, const Scenario& s) {
  ScheduleSpec spec;
  spec.pp = o.pp.value_or(s.parallelism.pipeline_model_parallel_size);
  spec.vpp = o.vpp.value_or(o.pp ? 1 : virtual_pipeline_size(s));
  spec.num_microbatches = o.microbatches.value_or(
      s.training.global_batch_size / (s.training.micro_batch_size * data_parallel_size(s)));
  spec.microbatch_group_size =
      o.group_size.value_or(s.parallelism.microbatch_group_size_per_vp_stage.value_or(0));
  std::string kind;
  if (o.kind)
    kind = *o.kind;
  else if (!o.pp && !o.vpp)
    kind = effective_pipeline_schedule(s);
  else
    kind = spec.vpp > 1 ? "interleaved" : spec.pp == 1 ? "none" : "1f1b";
  const auto k = parse_schedule_kind(kind);
  if (!k) throw ConfigError("--kind", kind, "must be one of none, gpipe, 1f1b, interleaved, zb-h1");
  spec.kind = *k;
  // The scenario's --delay-wgrad-compute (any scenario flag reaches the command).
  spec.delay_wgrad_compute = s.parallelism.delay_wgrad_compute && spec.kind != ScheduleKind::zb_h1;
  spec.combined_1f1b = s.parallelism.overlap_moe_expert_parallel_comm &&
                       (spec.kind == ScheduleKind::none || spec.kind == ScheduleKind::interleaved);
  // Megatron turns overlap_p2p_comm off where the schedule is not interleaved.
  spec.overlap_p2p_comm = s.parallelism.overlap_p2p_comm && spec.kind == ScheduleKind::interleaved;
  return spec;
}

// The papers' bubble share: (p − 1) / (v·m + p − 1); for ZB-H1 (Qi et al. 2024, §3.1,
// m ≥ p) an idle time of (p − 1)(T_F + T_B − T_W) beside m(T_F + T_B + T_W) of work.
double closed_form_bubble(const ScheduleSpec& s, const IdealCosts& c) {
  const double p = s.pp, m = s.num_microbatches, v = s.vpp;
  if (s.kind != ScheduleKind::zb_h1) return (p - 1) / (v * m + p - 1);
  const double f = c.forward.value, w = c.backward.value * c.weight_fraction,
               b = c.backward.value - w;
  const double idle = (p - 1) * (f + b - w);
  return idle / (m * (f + b + w) + idle);
}

nlohmann::json op_json(const ScheduleOp& op) {
  if (op.is_compute())
    return {{"type", describe(op, false).substr(0, 1)},
            {"microbatch", op.microbatch},
            {"chunk", op.chunk}};
  if (op.type == OpType::p2p_wait) return {{"type", "wait"}, {"call", p2p_call_name(op.call)}};
  auto transfers = nlohmann::json::array();
  for (const auto& t : op.transfers)
    transfers.push_back({{"direction", p2p_direction_name(t.direction)},
                         {"microbatch", t.microbatch},
                         {"chunk", t.chunk},
                         {"peer", t.peer}});
  return {
      {"type", p2p_call_name(op.call)}, {"transfers", transfers}, {"overlapped", op.overlapped}};
}

nlohmann::json schedule_json(const Timeline& tl) {
  const auto& spec = tl.schedule.spec;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& ops : tl.schedule.ranks) {
    auto list = nlohmann::json::array();
    for (const auto& op : ops) list.push_back(op_json(op));
    ranks.push_back(list);
  }
  return {{"kind", schedule_kind_name(spec.kind)},
          {"pp", spec.pp},
          {"vpp", spec.vpp},
          {"microbatches", spec.num_microbatches},
          {"ranks", ranks},
          {"idealised",
           {{"forward_ms", tl.costs.forward.value * 1e3 * spec.vpp},
            {"backward_ms", tl.costs.backward.value * 1e3 * spec.vpp},
            {"p2p_ms", tl.costs.p2p.value * 1e3},
            {"iteration_ms", tl.makespan.value * 1e3},
            {"bubble_fraction", tl.bubble_fraction()},
            {"closed_form_bubble_fraction", closed_form_bubble(spec, tl.costs)}}}};
}

void print_schedule(const Timeline& tl, bool with_p2p) {
  const auto& spec = tl.schedule.spec;
  std::printf(
      "%s schedule, pp %d, vpp %d, %d microbatches (idealised: forward %g ms, "
      "backward %g ms per microbatch per stage, p2p %g ms per transfer)\n",
      std::string(schedule_kind_name(spec.kind)).c_str(), spec.pp, spec.vpp, spec.num_microbatches,
      tl.costs.forward.value * 1e3 * spec.vpp, tl.costs.backward.value * 1e3 * spec.vpp,
      tl.costs.p2p.value * 1e3);
  for (std::size_t r = 0; r < tl.schedule.ranks.size(); ++r) {
    std::string line;
    for (const auto& op : tl.schedule.ranks[r])
      if (with_p2p || op.is_compute()) line += " " + describe(op, spec.vpp > 1);
    std::printf("rank %zu:%s\n", r, line.c_str());
  }
  std::printf("idealised iteration %.3f ms, bubble fraction %.2f%% (closed form %s = %.2f%%)\n",
              tl.makespan.value * 1e3, 100 * tl.bubble_fraction(),
              spec.kind == ScheduleKind::zb_h1 ? "(p-1)(F+B-W) / (m(F+B+W) + (p-1)(F+B-W))"
                                               : "(p-1)/(v*m+p-1)",
              100 * closed_form_bubble(spec, tl.costs));
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto opts = std::make_shared<ScheduleOptions>();
  auto* cmd =
      app.add_subcommand("schedule",
                         "Print each pipeline stage's op order (Megatron-Core's schedules) and its "
                         "idealised timeline; write it as a Chrome trace or an SVG");
  cmd->add_option("--pp", opts->pp, "Pipeline-parallel size")->check(positive());
  cmd->add_option("--vpp", opts->vpp, "Virtual pipeline chunks per stage (interleaving)")
      ->check(positive());
  cmd->add_option("--microbatches", opts->microbatches, "Microbatches per iteration")
      ->check(positive());
  cmd->add_option("--kind", opts->kind,
                  "none | gpipe | 1f1b | interleaved | zb-h1 (default: from pp and vpp)");
  cmd->add_option("--group-size", opts->group_size,
                  "Interleaving: microbatches per virtual-stage group (Megatron's "
                  "microbatch_group_size_per_vp_stage; default pp)");
  cmd->add_flag(
      "--json", opts->json,
      "Print JSON: {\"ranks\": [[{\"type\": \"F\", \"microbatch\": 0, \"chunk\": 0}, …], …]}");
  cmd->add_flag("--with-p2p", opts->with_p2p, "Text output lists the p2p calls too");
  cmd->add_option("--trace", opts->trace_path, "Write the idealised timeline as Chrome trace JSON");
  cmd->add_option("--svg", opts->svg_path, "Draw the idealised timeline as SVG");
  cmd->add_option("--forward-time", opts->forward_ms, "Forward of one microbatch on one stage, ms")
      ->check(non_negative());
  cmd->add_option("--backward-time", opts->backward_ms,
                  "Backward of one microbatch on one stage, ms")
      ->check(non_negative());
  cmd->add_option("--p2p-time", opts->p2p_ms, "One activation or gradient transfer, ms")
      ->check(non_negative());
  add_scenario_options(*cmd, opts->scenario);
  cmd->callback([opts] {
    const Scenario s = resolve_scenario(opts->scenario, !opts->scenario.file.empty());
    const ScheduleSpec spec = spec_from(*opts, s);
    // Costs are given per stage; each of the vpp chunks holds 1/vpp of the stage's layers.
    const IdealCosts costs{Seconds(opts->forward_ms * 1e-3 / spec.vpp),
                           Seconds(opts->backward_ms * 1e-3 / spec.vpp),
                           Seconds(opts->p2p_ms * 1e-3)};
    const Timeline tl = make_timeline(make_schedule(spec), costs);
    if (opts->json)
      std::cout << schedule_json(tl).dump() << "\n";
    else
      print_schedule(tl, opts->with_p2p);
    if (!opts->trace_path.empty() || !opts->svg_path.empty()) {
      const auto trace = timeline_to_trace(tl).to_json();
      if (!opts->trace_path.empty()) write_file(opts->trace_path, trace.dump() + "\n");
      if (!opts->svg_path.empty()) {
        char title[160];
        std::snprintf(title, sizeof title, "%s, pp %d, vpp %d, m %d — bubble %.1f%%",
                      std::string(schedule_kind_name(spec.kind)).c_str(), spec.pp, spec.vpp,
                      spec.num_microbatches, 100 * tl.bubble_fraction());
        write_file(opts->svg_path, render_trace_svg(trace, {.title = title}));
      }
    }
  });
}

}  // namespace tandem::cli
