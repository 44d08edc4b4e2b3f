#include "train/checkpoint_params.hpp"

#include <cmath>

#include "core/error.hpp"
#include "train/checkpoint.hpp"

namespace tandem {

nlohmann::json parameter_table(const ParameterSet& params) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : params.all()) {
    const auto d = p.spec.full_shape.dims();
    list.push_back({{"name", p.spec.name},
                    {"full_shape", std::vector<std::int64_t>(d.begin(), d.end())},
                    {"shard", shard_kind_name(p.spec.shard)},
                    {"offset", p.value_offset}});
  }
  return {{"tp_size", params.tp_size()}, {"tp_rank", params.tp_rank()}, {"params", list}};
}

namespace {

struct Assembly {
  std::vector<float> values;
  std::vector<bool> set;
};

void add_rank(const CheckpointState& st, const std::string& where,
              std::map<std::string, Assembly>& out, GlobalParameters& g) {
  if (st.parameters.is_null())
    throw ConfigError("checkpoint", where, "has no parameter table (written by an older tandem)");
  const CheckpointTensor* values = nullptr;
  for (const auto& t : st.tensors)
    if (t.name == "params") values = &t;
  if (!values) throw ConfigError("checkpoint", where, "holds no params tensor");
  const int tp_size = st.parameters.at("tp_size"), tp_rank = st.parameters.at("tp_rank");
  for (const auto& row : st.parameters.at("params")) {
    ParameterSpec spec;
    spec.name = row.at("name");
    spec.full_shape = Shape(row.at("full_shape").get<std::vector<std::int64_t>>());
    spec.shard = parse_shard_kind(row.at("shard").get<std::string>());
    const auto offset = row.at("offset").get<std::int64_t>();
    const auto positions = shard_positions(spec, tp_size, tp_rank);
    if (offset < 0 || offset + static_cast<std::int64_t>(positions.size()) >
                          static_cast<std::int64_t>(values->values.size()))
      throw ConfigError("checkpoint", where, "parameter " + spec.name + " runs past params");
    Assembly& a = out[spec.name];
    if (a.values.empty()) {
      a.values.assign(static_cast<std::size_t>(spec.full_shape.numel()), 0.0f);
      a.set.assign(a.values.size(), false);
    }
    if (static_cast<std::int64_t>(a.values.size()) != spec.full_shape.numel())
      throw ConfigError("checkpoint", where, "parameter " + spec.name + " changes shape");
    for (std::size_t i = 0; i < positions.size(); ++i) {
      const auto at = static_cast<std::size_t>(positions[i]);
      const float v = values->values[static_cast<std::size_t>(offset) + i];
      const double diff = std::abs(static_cast<double>(a.values[at]) - v);
      if (a.set[at] && !(diff <= g.replica_max_abs_diff)) {
        g.replica_max_abs_diff = std::isnan(diff) ? INFINITY : diff;
        g.replica_worst = spec.name;
      } else if (!a.set[at])
        a.values[at] = v;
      a.set[at] = true;
    }
  }
}

}  // namespace

GlobalParameters assemble_parameters(const std::filesystem::path& dir, std::int64_t iteration) {
  if (iteration < 0) iteration = latest_checkpoint_iteration(dir);
  const CheckpointState first = load_checkpoint(dir, iteration, 0);
  std::map<std::string, Assembly> parts;
  GlobalParameters g;
  g.ranks = first.world_size;
  for (int r = 0; r < first.world_size; ++r) {
    const CheckpointState st = r == 0 ? first : load_checkpoint(dir, iteration, r);
    add_rank(st, checkpoint_file(dir, iteration, r).string(), parts, g);
  }
  for (auto& [name, a] : parts) {
    for (std::size_t i = 0; i < a.set.size(); ++i)
      if (!a.set[i])
        throw ConfigError("checkpoint", dir.string(),
                          "no rank holds element " + std::to_string(i) + " of " + name);
    g.values[name] = std::move(a.values);
  }
  return g;
}

ParameterDifference compare_parameters(const GlobalParameters& a, const GlobalParameters& b) {
  ParameterDifference d;
  for (const auto& [name, va] : a.values) {
    auto it = b.values.find(name);
    if (it == b.values.end() || it->second.size() != va.size()) {
      d.unmatched.push_back(name);
      continue;
    }
    for (std::size_t i = 0; i < va.size(); ++i) {
      const double diff = std::abs(static_cast<double>(va[i]) - it->second[i]);
      if (diff > d.max_abs || std::isnan(diff)) {
        d.max_abs = std::isnan(diff) ? INFINITY : diff;
        d.worst = name;
      }
    }
  }
  for (const auto& [name, vb] : b.values)
    if (!a.values.contains(name)) d.unmatched.push_back(name);
  return d;
}

}  // namespace tandem
