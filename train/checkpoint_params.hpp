// The global (unsharded) parameters of a run, reassembled from its per-rank checkpoints, so
// runs under different tp / pp / dp layouts can be compared parameter by parameter. Each
// checkpoint carries a parameter table (name, logical shape, tp shard kind, offset into its
// "params" tensor, the rank's tp coordinates); every rank's shard is put back in place with
// model/parameters' shard arithmetic. Copies of one element held by several ranks (dp
// replicas, tp-replicated parameters, the tied output layer) are checked against each other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/parameters.hpp"

namespace tandem {

// {tp_size, tp_rank, params: [{name, full_shape, shard, offset}]} of this rank's parameters.
nlohmann::json parameter_table(const ParameterSet& params);

struct GlobalParameters {
  std::map<std::string, std::vector<float>> values;  // name → logical tensor, row-major
  int ranks = 0;                                     // checkpoint files read
  double replica_max_abs_diff = 0;  // largest disagreement between copies of one element
  std::string replica_worst;        // the parameter where it occurs
};

// Reads every rank's checkpoint of `iteration` in `dir` (the latest when negative). Throws
// ConfigError when a file is missing, lacks its parameter table, or leaves an element unset.
GlobalParameters assemble_parameters(const std::filesystem::path& dir, std::int64_t iteration);

struct ParameterDifference {
  double max_abs = 0;
  std::string worst;                   // the parameter where max_abs occurs
  std::vector<std::string> unmatched;  // names present in only one of the two
};
ParameterDifference compare_parameters(const GlobalParameters& a, const GlobalParameters& b);

}  // namespace tandem
