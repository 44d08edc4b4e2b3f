#include "sim/search/search_space.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <sstream>

#include "core/error.hpp"
#include "core/pipeline_layout.hpp"
#include "train/trainer.hpp"

namespace tandem::sim::search {
namespace {

const std::map<std::string, std::string>& short_names() {
  static const std::map<std::string, std::string> names{
      {"tp", "tensor_model_parallel_size"},
      {"pp", "pipeline_model_parallel_size"},
      {"cp", "context_parallel_size"},
      {"vp", "num_layers_per_virtual_pipeline_stage"},
      {"mbs", "micro_batch_size"},
      {"recompute", "recompute_granularity"},
      {"sp", "sequence_parallel"},
      {"distopt", "use_distributed_optimizer"},
      {"overlap_grad", "overlap_grad_reduce"},
      {"overlap_param", "overlap_param_gather"},
      {"embed_split", "account_for_embedding_in_pipeline_split"},
      {"loss_split", "account_for_loss_in_pipeline_split"},
      {"schedule", "pipeline_schedule"},
      {"moe_overlap", "overlap_moe_expert_parallel_comm"},
  };
  return names;
}

std::string field_of(const std::string& word, const std::string& flag = "--vary/--fix") {
  std::string w = word;
  while (!w.empty() && w.front() == '-') w.erase(w.begin());
  std::replace(w.begin(), w.end(), '-', '_');
  if (auto it = short_names().find(w); it != short_names().end()) return it->second;
  const auto& fields = search_fields();
  if (std::find(fields.begin(), fields.end(), w) != fields.end()) return w;
  std::vector<std::string> known = fields;
  for (const auto& [s, _] : short_names()) known.push_back(s);
  const std::string near = closest_match(w, known);
  throw ConfigError(
      flag, word,
      "is not a searched field (" +
          (near.empty() ? std::string("see tandem search --help") : "did you mean " + near + "?") +
          ")");
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string v; std::getline(in, v, ',');)
    if (!v.empty()) out.push_back(v);
  return out;
}

std::pair<std::string, std::vector<std::string>> parse_assignment(const std::string& a) {
  const auto eq = a.find('=');
  if (eq == std::string::npos)
    throw ConfigError("--vary/--fix", a, "must be FIELD=VALUE or FIELD=V1,V2,…");
  auto values = split_list(a.substr(eq + 1));
  if (values.empty()) throw ConfigError("--vary/--fix", a, "gives no value");
  return {field_of(a.substr(0, eq)), values};
}

std::vector<int> divisors_up_to(int n, int limit) {
  std::vector<int> d;
  for (int i = 1; i <= std::min(n, limit); ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

int to_int(const std::string& field, const std::string& v) {
  try {
    std::size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(field, v, "must be an integer");
}

bool to_bool(const std::string& field, const std::string& v) {
  if (v == "true" || v == "1" || v == "on") return true;
  if (v == "false" || v == "0" || v == "off") return false;
  throw ConfigError(field, v, "must be true or false");
}

// The rule with each number written N, so that one rule broken by many sizes counts once
// and still reads whole ("… but there are N (virtual pipeline); use …"). A number starts
// where a digit follows a non-alphanumeric character ("MXFP8" and "bf16" are words).
std::string rule_class(const Violation& v) {
  std::string rule;
  for (std::size_t i = 0; i < v.rule.size();) {
    const char c = v.rule[i];
    const bool starts_number = std::isdigit(static_cast<unsigned char>(c)) &&
                               (i == 0 || !std::isalnum(static_cast<unsigned char>(v.rule[i - 1])));
    if (!starts_number) {
      rule += c;
      ++i;
      continue;
    }
    rule += 'N';
    while (i < v.rule.size() &&
           (std::isdigit(static_cast<unsigned char>(v.rule[i])) || v.rule[i] == '.'))
      ++i;
  }
  while (!rule.empty() && (rule.back() == ' ' || rule.back() == ',')) rule.pop_back();
  return v.field + ": " + rule;
}

// Sets the training precision from a search value (see precision_values()): bf16 turns FP8
// off; an FP8 value sets bf16 (Megatron's FP8 runs alongside it) and the recipe, keeping the
// base's other FP8 settings (amax history, margin, bf16 first/last layers, FP8 parameters
// under the per-tensor recipes) or Megatron's defaults when the base runs without FP8.
void set_precision(Scenario& s, const std::string& value) {
  const auto& known = precision_values();
  const auto it = known.find(value);
  if (it == known.end()) {
    std::string list;
    for (const auto& [name, _] : known) list += (list.empty() ? "" : ", ") + name;
    throw ConfigError("precision", value, "must be one of " + list);
  }
  auto& t = s.training;
  t.bf16 = true;
  t.fp16 = false;
  if (it->second.empty()) {
    t.fp8.format.clear();
    return;
  }
  const bool was_fp8 = t.fp8.enabled();
  if (!was_fp8) t.fp8 = Fp8Config{};
  // MXFP8 blocks take E4M3 everywhere in Megatron-Bridge's recipes; the per-tensor and
  // block recipes keep the base's format, else hybrid (E4M3 forward, E5M2 gradients).
  t.fp8.format = it->second == "mxfp8" ? "e4m3" : (was_fp8 ? t.fp8.format : "hybrid");
  t.fp8.recipe = it->second;
  // FP8 parameters (the base's fp8_param_gather) are per-tensor scaled: the block recipes
  // gather their weights in bf16.
  if (t.fp8.recipe != "delayed" && t.fp8.recipe != "tensorwise") t.fp8.param_gather = false;
}

// Sets `field` of `s` to `value` (flag text).
void set_field(Scenario& s, const std::string& field, const std::string& value) {
  auto& p = s.parallelism;
  if (field == "tensor_model_parallel_size")
    p.tensor_model_parallel_size = to_int(field, value);
  else if (field == "pipeline_model_parallel_size")
    p.pipeline_model_parallel_size = to_int(field, value);
  else if (field == "context_parallel_size")
    p.context_parallel_size = to_int(field, value);
  else if (field == "num_layers_per_virtual_pipeline_stage")
    p.num_layers_per_virtual_pipeline_stage =
        value == "none" ? std::nullopt : std::optional<int>(to_int(field, value));
  else if (field == "micro_batch_size")
    s.training.micro_batch_size = to_int(field, value);
  else if (field == "recompute_granularity") {
    if (value != "none" && value != "selective" && value != "full")
      throw ConfigError(field, value, "must be none, selective or full");
    s.training.recompute_granularity = value;
  } else if (field == "sequence_parallel")
    p.sequence_parallel = to_bool(field, value);
  else if (field == "use_distributed_optimizer") {
    p.use_distributed_optimizer = to_bool(field, value);
    // How that optimizer reduces gradients is its own setting: without it they are all-reduced.
    if (!p.use_distributed_optimizer) p.distributed_optimizer_grad_reduce = "reduce_scatter";
  } else if (field == "overlap_grad_reduce")
    p.overlap_grad_reduce = to_bool(field, value);
  else if (field == "overlap_param_gather")
    p.overlap_param_gather = to_bool(field, value);
  else if (field == "order")
    p.order = value;
  else if (field == "account_for_embedding_in_pipeline_split")
    p.account_for_embedding_in_pipeline_split = to_bool(field, value);
  else if (field == "account_for_loss_in_pipeline_split")
    p.account_for_loss_in_pipeline_split = to_bool(field, value);
  else if (field == "precision") {
    if (value != "base") set_precision(s, value);
  } else if (field == "pipeline_schedule")
    p.pipeline_schedule = value;  // the validator names a value it does not know
  else if (field == "overlap_moe_expert_parallel_comm")
    p.overlap_moe_expert_parallel_comm = to_bool(field, value);
}

// Layers a pp rank splits into chunks: num_layers / pp, with the embedding and the loss
// counted as layers when accounted for (Megatron's arguments.py); 0 when pp does not divide.
int layers_per_stage(const Scenario& s) {
  const auto& p = s.parallelism;
  const int layers = s.model.num_layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                     (p.account_for_loss_in_pipeline_split ? 1 : 0);
  const int pp = p.pipeline_model_parallel_size;
  return pp >= 1 && layers % pp == 0 ? layers / pp : 0;
}

}  // namespace

const std::vector<std::string>& search_fields() {
  static const std::vector<std::string> fields{
      "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
      // before the interleaving, whose "auto"
      // values depend on them
      "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
      "num_layers_per_virtual_pipeline_stage", "pipeline_schedule", "micro_batch_size",
      "recompute_granularity", "sequence_parallel", "use_distributed_optimizer",
      "overlap_grad_reduce", "overlap_param_gather", "order", "precision",
      "overlap_moe_expert_parallel_comm"};
  return fields;
}

const std::map<std::string, std::string>& precision_values() {
  static const std::map<std::string, std::string> values{{"bf16", ""},
                                                         {"fp8", "delayed"},
                                                         {"fp8-delayed", "delayed"},
                                                         {"fp8-tensorwise", "tensorwise"},
                                                         {"fp8-blockwise", "blockwise"},
                                                         {"mxfp8", "mxfp8"}};
  return values;
}

std::string precision_of(const Scenario& s) {
  const auto& t = s.training;
  if (!t.fp8.enabled()) return t.bf16 ? "bf16" : (t.fp16 ? "fp16" : "fp32");
  return t.fp8.recipe == "mxfp8" ? "mxfp8" : "fp8-" + t.fp8.recipe;
}

std::vector<std::string> every_value(const std::string& field) {
  const std::vector<std::string> flag{"false", "true"};
  if (field == "sequence_parallel" || field == "use_distributed_optimizer" ||
      field == "overlap_grad_reduce" || field == "overlap_param_gather" ||
      field == "account_for_embedding_in_pipeline_split" ||
      field == "account_for_loss_in_pipeline_split" || field == "overlap_moe_expert_parallel_comm")
    return flag;
  if (field == "recompute_granularity") return {"none", "selective", "full"};
  if (field == "order") return {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"};
  if (field == "pipeline_schedule") return {"auto", "zb-h1"};
  if (field == "num_layers_per_virtual_pipeline_stage") return {"auto"};
  if (field == "precision") {
    std::vector<std::string> values;  // one word per recipe: "fp8" is "fp8-delayed"
    for (const auto& [word, _] : precision_values())
      if (word != "fp8") values.push_back(word);
    return values;
  }
  return {};  // the sizes: the default space already spans what divides the world
}

SearchSpace default_space(const Scenario& base, int world_size) {
  auto texts = [](const std::vector<int>& v) {
    std::vector<std::string> t;
    for (int x : v) t.push_back(std::to_string(x));
    return t;
  };
  SearchSpace sp;
  auto& v = sp.values;
  v["tensor_model_parallel_size"] =
      texts(divisors_up_to(world_size, std::max(1, base.cluster.gpus_per_node)));
  v["pipeline_model_parallel_size"] = texts(divisors_up_to(world_size, base.model.num_layers));
  v["context_parallel_size"] = base.model.seq_length >= 8192
                                   ? std::vector<std::string>{"1", "2", "4", "8"}
                                   : std::vector<std::string>{"1"};
  v["num_layers_per_virtual_pipeline_stage"] = {"auto"};
  // Megatron's choice for the layout, and the zero-bubble schedule where it applies (pp ≥ 2,
  // one chunk per stage; the validator prunes it elsewhere).
  v["pipeline_schedule"] = every_value("pipeline_schedule");
  v["micro_batch_size"] = {"1", "2", "4", "8"};
  for (const char* field :
       {"recompute_granularity", "sequence_parallel", "use_distributed_optimizer",
        "overlap_grad_reduce", "overlap_param_gather", "order"})
    v[field] = every_value(field);
  // Where the embedding and loss sit: the base's choice unless --vary widens it (each
  // doubles the space).
  auto flag = [](bool b) { return std::vector<std::string>{b ? "true" : "false"}; };
  v["account_for_embedding_in_pipeline_split"] =
      flag(base.parallelism.account_for_embedding_in_pipeline_split);
  v["account_for_loss_in_pipeline_split"] =
      flag(base.parallelism.account_for_loss_in_pipeline_split);
  // The base's precision unless --vary precision=bf16,fp8,… compares them (fp16 and fp32
  // bases keep theirs: "base" leaves the training precision as it is).
  const std::string own = precision_of(base);
  v["precision"] = {precision_values().count(own) ? own : "base"};
  // Megatron-Core's combined 1F1B for a mixture of experts (the validator prunes the
  // layouts its rules refuse: ep 1, pp > 1 without interleaving, full recomputation).
  v["overlap_moe_expert_parallel_comm"] =
      base.model.num_experts ? every_value("overlap_moe_expert_parallel_comm")
                             : flag(base.parallelism.overlap_moe_expert_parallel_comm);
  return sp;
}

namespace {
// The values checked before any work where a bad one would otherwise surface only once a
// candidate is built.
void check_values(const std::string& field, const std::vector<std::string>& values) {
  if (field != "precision") return;
  for (const auto& v : values) {
    Scenario probe;
    if (v != "base") set_precision(probe, v);
  }
}
}  // namespace

void vary(SearchSpace& space, const std::string& assignment) {
  if (assignment.find('=') == std::string::npos) {
    const std::string field = field_of(assignment);
    auto values = every_value(field);
    if (values.empty())
      throw ConfigError("--vary", assignment,
                        "needs its values (FIELD=V1,V2,…): a size has no fixed list, and the "
                        "default search already tries every one that divides the world");
    space.values[field] = std::move(values);
    return;
  }
  auto [field, values] = parse_assignment(assignment);
  check_values(field, values);
  space.values[field] = values;
}

void fix(SearchSpace& space, const std::string& assignment) {
  auto [field, values] = parse_assignment(assignment);
  check_values(field, values);
  if (values.size() != 1)
    throw ConfigError("--fix", assignment, "fixes one value (use --vary for a list)");
  space.values[field] = values;
}

std::string value_of(const Scenario& base, const std::string& field) {
  const auto& p = base.parallelism;
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  if (field == "tensor_model_parallel_size") return std::to_string(p.tensor_model_parallel_size);
  if (field == "pipeline_model_parallel_size")
    return std::to_string(p.pipeline_model_parallel_size);
  if (field == "context_parallel_size") return std::to_string(p.context_parallel_size);
  if (field == "num_layers_per_virtual_pipeline_stage")
    return p.num_layers_per_virtual_pipeline_stage
               ? std::to_string(*p.num_layers_per_virtual_pipeline_stage)
               : "none";
  if (field == "micro_batch_size") return std::to_string(base.training.micro_batch_size);
  if (field == "recompute_granularity") return base.training.recompute_granularity;
  if (field == "sequence_parallel") return flag(p.sequence_parallel);
  if (field == "use_distributed_optimizer") return flag(p.use_distributed_optimizer);
  if (field == "overlap_grad_reduce") return flag(p.overlap_grad_reduce);
  if (field == "overlap_param_gather") return flag(p.overlap_param_gather);
  if (field == "order") return p.order;
  if (field == "account_for_embedding_in_pipeline_split")
    return flag(p.account_for_embedding_in_pipeline_split);
  if (field == "account_for_loss_in_pipeline_split")
    return flag(p.account_for_loss_in_pipeline_split);
  if (field == "pipeline_schedule") return p.pipeline_schedule;
  if (field == "overlap_moe_expert_parallel_comm") return flag(p.overlap_moe_expert_parallel_comm);
  if (field == "precision") {
    const std::string own = precision_of(base);
    return precision_values().count(own) ? own : "base";
  }
  throw ConfigError("--only", field, "is not a searched field");
}

void only(SearchSpace& space, const Scenario& base, const std::vector<std::string>& fields) {
  std::vector<std::string> kept;
  for (const auto& f : fields) kept.push_back(field_of(f, "--only"));
  for (const auto& field : search_fields())
    if (std::find(kept.begin(), kept.end(), field) == kept.end())
      space.values[field] = {value_of(base, field)};
}

namespace {

// candidate_label with `order` in the place of the rank order.
std::string label_with_order(const Scenario& s, const std::string& order) {
  const auto& p = s.parallelism;
  std::string l = "tp" + std::to_string(p.tensor_model_parallel_size) + " pp" +
                  std::to_string(p.pipeline_model_parallel_size);
  if (p.context_parallel_size > 1) l += " cp" + std::to_string(p.context_parallel_size);
  if (virtual_pipeline_size(s) > 1) {
    // Layers per virtual stage as Megatron's flag counts them; for an uneven partition the
    // deepest chunk's.
    int per_vstage = 0;
    if (p.num_layers_per_virtual_pipeline_stage)
      per_vstage = *p.num_layers_per_virtual_pipeline_stage;
    else
      for (const auto& c : pipeline_partition(s)) per_vstage = std::max(per_vstage, c.num_layers);
    l += " vp" + std::to_string(per_vstage);
  }
  if (p.decoder_first_pipeline_num_layers)
    l += " first" + std::to_string(*p.decoder_first_pipeline_num_layers);
  if (p.decoder_last_pipeline_num_layers)
    l += " last" + std::to_string(*p.decoder_last_pipeline_num_layers);
  if (p.account_for_embedding_in_pipeline_split) l += " embed-split";
  if (p.account_for_loss_in_pipeline_split) l += " loss-split";
  if (p.pipeline_model_parallel_layout) l += " layout " + *p.pipeline_model_parallel_layout;
  if (p.pipeline_schedule == "zb-h1") l += " zb-h1";
  if (p.delay_wgrad_compute) l += " delay-wgrad";
  if (p.overlap_moe_expert_parallel_comm) l += " moe-overlap";
  l +=
      " mbs" + std::to_string(s.training.micro_batch_size) + " " + s.training.recompute_granularity;
  if (p.sequence_parallel) l += " sp";
  if (p.use_distributed_optimizer) l += " distopt";
  if (p.overlap_grad_reduce) l += " ogr";
  if (p.overlap_param_gather) l += " opg";
  l += " " + order;
  if (s.training.fp8.enabled()) l += " " + precision_of(s);
  return l;
}

}  // namespace

std::string candidate_label(const Scenario& s) {
  return label_with_order(s, s.parallelism.order);
}

std::string placement_key(const Scenario& s, int gpus_per_node) {
  const auto& p = s.parallelism;
  if (p.expert_model_parallel_size > 1) return p.order;
  const std::map<std::string, int> size{{"tp", p.tensor_model_parallel_size},
                                        {"cp", p.context_parallel_size},
                                        {"ep", p.expert_model_parallel_size},
                                        {"dp", data_parallel_size(s)},
                                        {"pp", p.pipeline_model_parallel_size}};
  std::vector<std::string> dims;  // the order's dimensions of size > 1
  std::stringstream in(p.order);
  for (std::string d; std::getline(in, d, '-');)
    if (auto it = size.find(d); it == size.end() || it->second > 1) dims.push_back(d);
  std::string key;
  std::int64_t product = 1;
  std::size_t i = 0;
  while (i < dims.size()) {
    const auto it = size.find(dims[i]);
    product *= it == size.end() ? 1 : it->second;
    key += (i > 0 ? "-" : "") + dims[i];
    ++i;
    if (gpus_per_node > 0 && product % gpus_per_node == 0) break;
  }
  if (i == dims.size()) return key;
  std::sort(dims.begin() + static_cast<std::ptrdiff_t>(i), dims.end());
  key += " | nodes by";
  for (; i < dims.size(); ++i) key += " " + dims[i];
  return key;
}

Enumeration enumerate(const Scenario& base_in, int world_size, const SearchSpace& space,
                      const std::function<void(const Scenario&)>& check) {
  Scenario base = base_in;
  base.cluster.world_size = world_size;
  Enumeration e;
  const std::vector<std::string>& fields = search_fields();
  for (const auto& f : fields)
    if (!space.values.count(f) || space.values.at(f).empty())
      throw ConfigError(f, "", "the search space gives it no value");

  std::map<std::string, int> seen;  // label and precision → candidate
  auto add = [&](Scenario s, bool baseline) {
    ++e.enumerated;
    try {
      validate(s);
      check_step_supports(s);
      if (check) check(s);
    } catch (const ConfigError& err) {
      ++e.pruned["invalid: " + rule_class(err.violations().front())];
      return;
    }
    if (!baseline && s.parallelism.sequence_parallel &&
        s.parallelism.tensor_model_parallel_size == 1) {
      ++e.pruned["duplicate: sequence_parallel has no effect at tensor_model_parallel_size 1"];
      return;
    }
    if (!baseline && s.parallelism.pipeline_model_parallel_size == 1 &&
        (s.parallelism.account_for_embedding_in_pipeline_split ||
         s.parallelism.account_for_loss_in_pipeline_split)) {
      // One stage holds the embedding, every layer and the loss whatever is counted.
      ++e.pruned
            ["duplicate: account_for_*_in_pipeline_split has no effect at "
             "pipeline_model_parallel_size 1"];
      return;
    }
    const std::string label = candidate_label(s);
    // The label names FP8 only; fp16 and bf16 layouts differ too. Two rank orders that
    // list the dimensions of size > 1 in the same sequence place every rank alike (at pp 1,
    // tp-cp-ep-dp-pp and tp-cp-ep-pp-dp), so the key holds that sequence, not the order.
    const std::string key =
        label_with_order(s, "placed " + placement_key(s, 0)) + " " + precision_of(s);
    if (const auto it = seen.find(key); it != seen.end()) {
      const bool same_order =
          e.valid[static_cast<std::size_t>(it->second)].scenario.parallelism.order ==
          s.parallelism.order;
      ++e.pruned[baseline ? "duplicate: the baseline"
                 : same_order
                     ? "duplicate: the baseline's layout"
                     : "duplicate: order places the ranks as an order already tried (the same "
                       "sequence of dimensions of size > 1)"];
      return;
    }
    const int id = static_cast<int>(e.valid.size());
    s.name = baseline ? base_in.name : base_in.name + "-search-" + std::to_string(id);
    seen[key] = id;
    e.valid.push_back({id, std::move(s), label, baseline});
  };
  add(base, true);

  Scenario proto = base;
  proto.parallelism.pipeline_schedule = "auto";
  proto.parallelism.virtual_pipeline_model_parallel_size.reset();
  // Uneven stages and a layout string fit the base's pp only; the candidates split evenly,
  // with the embedding and loss placed by the searched account_for fields.
  proto.parallelism.decoder_first_pipeline_num_layers.reset();
  proto.parallelism.decoder_last_pipeline_num_layers.reset();
  proto.parallelism.pipeline_model_parallel_layout.reset();
  proto.training.recompute_method = "uniform";
  proto.training.recompute_num_layers = 1;
  std::function<void(std::size_t, Scenario&)> walk = [&](std::size_t level, Scenario& s) {
    if (level == fields.size()) {
      add(s, false);
      return;
    }
    const std::string& field = fields[level];
    for (const auto& value : space.values.at(field)) {
      if (field == "num_layers_per_virtual_pipeline_stage" && value == "auto") {
        const int pp = s.parallelism.pipeline_model_parallel_size;
        const int per_stage = layers_per_stage(s);
        std::vector<std::string> vals{"none"};
        if (pp > 1 && per_stage > 0)
          for (int d : divisors_up_to(per_stage, per_stage - 1)) vals.push_back(std::to_string(d));
        for (const auto& v : vals) {
          Scenario t = s;
          set_field(t, field, v);
          walk(level + 1, t);
        }
        continue;
      }
      Scenario t = s;
      set_field(t, field, value);
      walk(level + 1, t);
    }
  };
  walk(0, proto);
  return e;
}

}  // namespace tandem::sim::search
