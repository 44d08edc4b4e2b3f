// The layouts `tandem search` tries: for each searched field a list of values, the
// cartesian product of which, applied to a base scenario with the model, global batch and
// world size kept, is every candidate; the scenario validator prunes those Megatron would
// refuse. Defaults cover what Megatron accepts on one node of tensor parallelism; --vary
// widens a field, --fix narrows it to one value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace tandem::sim::search {

// Searched fields, in enumeration order (Megatron's names; "recompute_granularity" takes
// none | selective | full). A value "auto" of num_layers_per_virtual_pipeline_stage means
// every divisor of the layers per stage that interleaves (plus "none"). "precision" is
// tandem's: one of precision_values(), each a Megatron flag set (bf16 alone, or bf16 with
// --fp8-format and --fp8-recipe).
const std::vector<std::string>& search_fields();

// The precision field's values → the FP8 recipe they set ("" for bf16 without FP8): bf16,
// fp8 (= fp8-delayed, Megatron's default recipe), fp8-delayed, fp8-tensorwise,
// fp8-blockwise (hybrid format) and mxfp8 (E4M3 in 32-element blocks, Blackwell).
const std::map<std::string, std::string>& precision_values();
// A scenario's precision in those words (fp16 / fp32 for runs without bf16).
std::string precision_of(const Scenario& s);

struct SearchSpace {
  std::map<std::string, std::vector<std::string>> values;  // field → values as flag text
};

// Every field's default values for `base` on `world_size` ranks: tp the divisors of the
// world up to the GPUs per node, pp the divisors of the world up to num_layers, cp 1 (2, 4
// and 8 too from 8192 tokens on), interleaving "auto", micro batch 1, 2, 4, 8, recompute
// none / selective / full, sequence parallelism, distributed optimizer and both overlaps
// on and off, rank order tp-cp-ep-dp-pp and tp-cp-ep-pp-dp, pipeline_schedule auto and
// zb-h1 (valid at pp ≥ 2 without interleaving), and the base's precision.
SearchSpace default_space(const Scenario& base, int world_size);

// "FIELD=V1,V2,…": replaces the field's values (a Megatron name, its flag spelling or the
// short names tp, pp, cp, vp, schedule, mbs, recompute, sp, distopt, overlap_grad,
// overlap_param, precision).
// A bare FIELD takes every value the field has: false and true for the switches, none /
// selective / full, both rank orders, auto and zb-h1, vp "auto", and for precision bf16 and
// every FP8 recipe (the validator prunes those the GPU cannot run). The sizes (tp, pp, cp,
// mbs) have no such list and need theirs.
// Throws ConfigError naming the field for an unknown field or an empty list.
void vary(SearchSpace& space, const std::string& assignment);
// Every value of a field, as a bare --vary FIELD takes them (empty for the sizes).
std::vector<std::string> every_value(const std::string& field);
void fix(SearchSpace& space, const std::string& assignment);  // "FIELD=VALUE"

// `base`'s value of a searched field as flag text ("none" for no interleaving, "base" for a
// precision the precision field has no word for), so that setting it changes nothing.
std::string value_of(const Scenario& base, const std::string& field);

// Searches only `fields` (Megatron names or the short names of vary()): every other field
// takes `base`'s value, the listed ones keep the values the space holds. What `tandem search
// --only` and `tandem validate`'s searched knobs do: the layout as published, and the knobs
// its authors tuned but did not state. Throws ConfigError naming an unknown field.
void only(SearchSpace& space, const Scenario& base, const std::vector<std::string>& fields);

struct Candidate {
  int id = 0;             // index in enumeration order (stable across runs and ranks)
  Scenario scenario;      // validated
  std::string label;      // "tp8 pp16 vp3 mbs1 full sp distopt ogr opg tp-cp-ep-dp-pp"
  bool baseline = false;  // the base scenario itself
};

struct Enumeration {
  std::int64_t enumerated = 0;  // the product of the value lists, baseline included
  std::vector<Candidate> valid;
  // rule → candidates the validator refused (first violation's field and rule, numbers
  // stripped) or that duplicate another ("sequence_parallel: no effect at tp 1").
  std::map<std::string, std::int64_t> pruned;
};

// Enumerates the space around `base` (world size set to `world_size`); the base scenario
// itself is always candidate 0 when valid (baseline = true), as `tandem search` reports
// where it ranks. `check`, when given, is one more rule a candidate must pass (a ConfigError
// prunes it under its rule): the rules that need the cluster, as FP8 recipes the GPU lacks.
Enumeration enumerate(const Scenario& base, int world_size, const SearchSpace& space,
                      const std::function<void(const Scenario&)>& check = {});

std::string candidate_label(const Scenario& s);

// What of the rank order a simulation can see, for a scenario on nodes of `gpus_per_node`
// GPUs: two scenarios equal up to rank order simulate alike when their keys are equal.
// Ranks are numbered by the order (first dimension fastest) and fill node after node, so
// the dimensions up to the first whose running product of sizes is a multiple of
// gpus_per_node lay out each node (with an identical such prefix, every node holds the same
// pattern of ranks), and the later ones only say which node is which. The fabrics tandem
// builds treat every node alike (one tree or one spine over all of them, NIC i of each node
// on rail i), so renumbering nodes changes no route and no contention: the key is that
// prefix, then the later dimensions sorted. Dimensions of size 1 place nothing and are
// left out. With expert parallelism the key is the whole order.
std::string placement_key(const Scenario& s, int gpus_per_node);

}  // namespace tandem::sim::search
