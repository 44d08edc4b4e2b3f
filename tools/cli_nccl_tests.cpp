// tandem nccl-tests: the nccl-tests table (size, time, algbw, busbw) of one collective on a
// topology preset, simulated through the same SimCommunicator training uses
// (sim/nccl_tests.hpp), to hold the communication model against published tables.
//
//   tandem nccl-tests --topology dgx-a100-80g --collective all_reduce --gpus 16 --bytes 1K:8G
#include <cctype>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "sim/nccl_tests.hpp"
#include "tools/cli.hpp"
#include "topology/topology_io.hpp"

namespace tandem::cli {
namespace {

// "8", "1K", "256M", "8G" (powers of 1024, as nccl-tests' -b/-e).
std::int64_t parse_size(const std::string& text, const std::string& whole) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = used > 0 ? text.substr(used) : "";
  const std::int64_t scale = unit.empty()                 ? 1
                             : unit == "K" || unit == "k" ? 1LL << 10
                             : unit == "M" || unit == "m" ? 1LL << 20
                             : unit == "G" || unit == "g" ? 1LL << 30
                                                          : 0;
  if (used == 0 || scale == 0 || value <= 0 || value > (1LL << 40) / scale)
    throw ConfigError("bytes", whole, "must be MIN:MAX with sizes like 8, 1K, 256M, 8G (≤ 1T)");
  return value * scale;
}

sim::Collective parse_collective(const std::string& name) {
  if (const auto c = sim::collective_named(name)) return *c;
  throw ConfigError("collective", name,
                    "must be one of all_reduce | all_gather | reduce_scatter | broadcast | "
                    "all_to_all");
}

}  // namespace

void add_nccl_tests_command(CLI::App& app) {
  struct Options {
    std::string topology = "dgx-a100-80g";
    std::string collective = "all_reduce";
    int gpus = 8;
    std::string bytes = "1K:8G";
    int factor = 2;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "nccl-tests", "Print the nccl-tests table of a collective as the simulator prices it");
  cmd->add_option("--topology", opts->topology, "Preset name or topology JSON file")
      ->capture_default_str();
  cmd->add_option("--collective", opts->collective,
                  "all_reduce | all_gather | reduce_scatter | broadcast | all_to_all")
      ->capture_default_str();
  cmd->add_option("--gpus,--group-size", opts->gpus, "GPUs in the group (placed node by node)")
      ->capture_default_str();
  cmd->add_option("--bytes", opts->bytes, "MIN:MAX sizes (nccl-tests -b/-e), e.g. 1K:8G")
      ->capture_default_str();
  cmd->add_option("--factor", opts->factor, "Size step factor (nccl-tests -f)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print the rows as JSON");
  cmd->callback([opts] {
    const auto colon = opts->bytes.find(':');
    if (colon == std::string::npos)
      throw ConfigError("bytes", opts->bytes, "must be MIN:MAX, e.g. 1K:8G");
    sim::NcclTestOptions o;
    o.collective = parse_collective(opts->collective);
    o.gpus = opts->gpus;
    o.min_bytes = parse_size(opts->bytes.substr(0, colon), opts->bytes);
    o.max_bytes = parse_size(opts->bytes.substr(colon + 1), opts->bytes);
    o.factor = opts->factor;
    const Topology t = load_topology(opts->topology);
    const auto rows = sim::run_nccl_tests(t, o);
    if (!opts->json) {
      std::cout << sim::format_nccl_tests(t, o, rows);
      return;
    }
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows)
      out.push_back({{"bytes", r.bytes},
                     {"count", r.count},
                     {"time_us", r.seconds * 1e6},
                     {"algbw_gbs", r.algbw / 1e9},
                     {"busbw_gbs", r.busbw / 1e9},
                     {"algorithm", r.choice}});
    std::cout << nlohmann::json{{"topology", t.name},
                                {"collective", opts->collective},
                                {"gpus", o.gpus},
                                {"rows", out}}
                     .dump(2)
              << "\n";
  });
}

}  // namespace tandem::cli
