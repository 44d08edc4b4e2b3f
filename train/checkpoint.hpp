// Per-rank checkpoints: everything a rank needs to continue exactly where it stopped —
// parameters, Adam moments, optimizer step count, iteration, consumed samples, FP8 delayed
// scaling's amax histories and scales ("fp8.layers.{i}.amax_history" / ".scale" /
// ".amax", Transformer Engine's extra state) — plus the
// scenario it was written under, so a resume with an incompatible model or layout is
// refused before any work. Layout, Megatron-like:
//   {dir}/iter_{N:07d}/rank_{R:05d}.ckpt  and  {dir}/latest_checkpointed_iteration.txt
// A file is written to a temporary name and renamed; its payload carries a CRC-32.
//   file = "TANDEMCK" | u32 version | u64 header bytes | header JSON | payload
//   header = {iteration, consumed_samples, optimizer_steps, rank, world_size, scenario,
//             parameters (checkpoint_params.hpp), tensors: [{name, elements, offset}],
//             payload_bytes, crc32}
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem {

struct CheckpointTensor {
  std::string name;
  std::vector<float> values;
};

struct CheckpointState {
  std::int64_t iteration = 0;
  std::int64_t consumed_samples = 0;
  std::int64_t optimizer_steps = 0;
  int rank = 0;
  int world_size = 1;
  nlohmann::json scenario;  // to_json(Scenario) of the run that wrote it
  // Where each parameter's tp shard sits in "params" (parameter_table); null if absent.
  nlohmann::json parameters;
  std::vector<CheckpointTensor> tensors;
};

std::filesystem::path checkpoint_file(const std::filesystem::path& dir, std::int64_t iteration,
                                      int rank);
// Writes this rank's file atomically. Rank 0 then records `iteration` as the latest (call
// after every rank has written: the caller barriers first).
void save_checkpoint(const std::filesystem::path& dir, const CheckpointState& state);
void mark_latest_checkpoint(const std::filesystem::path& dir, std::int64_t iteration);
// The latest iteration recorded in `dir`; throws ConfigError naming the path if none.
std::int64_t latest_checkpoint_iteration(const std::filesystem::path& dir);
// Reads and verifies (magic, version, sizes, CRC-32) this rank's file; throws ConfigError
// naming the file and what is wrong.
CheckpointState load_checkpoint(const std::filesystem::path& dir, std::int64_t iteration, int rank);

}  // namespace tandem
