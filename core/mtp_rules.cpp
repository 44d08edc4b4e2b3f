// Megatron-Core's multi-token prediction rules (Sep 2026): validate_args asserts that MTP
// runs with RoPE or no position embedding (its first MTP check; a later one would also let
// learned_absolute through, but the first fires before it); a layout string names exactly
// mtp_num_layers 'm', after every 't', all in one virtual stage, the last of its pp rank;
// full recomputation (uniform) checkpoints each MTP depth alone (recompute_num_layers 1).
#include "core/mtp_rules.hpp"

#include <algorithm>

#include "core/pipeline_layout.hpp"

namespace tandem::scenario_detail {
namespace {

void check_mtp_layout(const Scenario& s, Violations& out) {
  const auto& p = s.parallelism;
  const ParsedLayout parsed = parse_pipeline_layout(*p.pipeline_model_parallel_layout);
  if (!parsed.error.empty()) return;  // check_pipeline_layout reports it
  const std::string& text = *p.pipeline_model_parallel_layout;
  auto add = [&](std::string rule) {
    out.push_back({"pipeline_model_parallel_layout", text, std::move(rule)});
  };
  const int depths = mtp_depths(s.model);
  const auto stages = static_cast<int>(parsed.stages.size());
  const int pp = p.pipeline_model_parallel_size;
  int mtps = 0, holding = 0, stage = -1;
  bool decoder_after = false;
  for (int v = 0; v < stages; ++v) {
    const std::string& st = parsed.stages[static_cast<std::size_t>(v)];
    const auto here = static_cast<int>(std::count(st.begin(), st.end(), 'm'));
    if (here > 0) {
      ++holding;
      stage = v;
    }
    for (char c : st) {
      if (c == 't' && mtps > 0) decoder_after = true;
      mtps += c == 'm';
    }
  }
  if (mtps != depths) {
    add(cat("names ", mtps, " multi-token-prediction layer", mtps == 1 ? "" : "s",
            " ('m'), but mtp_num_layers = ", depths,
            " (Megatron: the number of mtp layers in the layout must match mtp_num_layers)"));
    return;
  }
  if (mtps == 0) return;
  if (decoder_after)
    add("places an MTP layer ('m') before a transformer layer ('t'): decoder layers must be "
        "placed before MTP layers (Megatron's rule)");
  if (holding > 1)
    add(cat("spreads the ", mtps,
            " MTP layers over several virtual stages: all of them must be in the same one "
            "(Megatron's rule)"));
  if (pp >= 1 && stages % pp == 0 && stage >= 0 && stage / pp != stages / pp - 1)
    add(cat("puts the MTP layers in virtual stage ", stage / pp, " of pp rank ", stage % pp,
            ": they must be in the last virtual stage of their pp rank (", stages / pp - 1,
            "; Megatron's rule)"));
}

}  // namespace

void check_mtp(const Scenario& s, Violations& out) {
  const auto& m = s.model;
  const int depths = mtp_depths(m);
  if (s.parallelism.pipeline_model_parallel_layout) check_mtp_layout(s, out);
  if (depths <= 0) return;
  if (m.position_embedding_type != "rope" && m.position_embedding_type != "none")
    out.push_back({"position_embedding_type", m.position_embedding_type,
                   cat("must be rope or none with mtp_num_layers = ", depths,
                       " (Megatron's validate_args: multi-token prediction is not supported with "
                       "the ",
                       m.position_embedding_type, " position embedding)")});
  const auto& t = s.training;
  if (t.recompute_granularity == "full" && t.recompute_method == "uniform" &&
      t.recompute_num_layers != 1)
    out.push_back({"recompute_num_layers", cat(t.recompute_num_layers),
                   cat("must be 1 with mtp_num_layers = ", depths,
                       " and full uniform recomputation (Megatron recomputes each MTP depth "
                       "alone: \"recompute_num_layers must be 1 for MTP recompute\")")});
}

}  // namespace tandem::scenario_detail
