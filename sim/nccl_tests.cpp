// run_nccl_tests: a SimGrid engine, the topology's platform, one actor per rank with a
// SimCommunicator over all ranks, each size issued by every rank at the same time.
#include "sim/nccl_tests.hpp"

#include <xbt/log.h>

#include <cstdio>
#include <memory>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

#include "core/error.hpp"
#include "sim/nccl_model.hpp"
#include "sim/platform.hpp"
#include "sim/sim_communicator.hpp"
#include "sim/sim_device.hpp"
#include "sim/simgrid_config.hpp"

namespace tandem::sim {
namespace {

void check(const NcclTestOptions& o) {
  if (o.gpus < 2)
    throw ConfigError("gpus", std::to_string(o.gpus), "a collective needs at least 2 GPUs");
  if (o.min_bytes < 4LL * o.gpus)
    throw ConfigError("bytes", std::to_string(o.min_bytes),
                      "the smallest size must hold one fp32 element per GPU (>= " +
                          std::to_string(4LL * o.gpus) + ")");
  if (o.max_bytes < o.min_bytes)
    throw ConfigError(
        "bytes", std::to_string(o.max_bytes),
        "the largest size must be >= the smallest (" + std::to_string(o.min_bytes) + ")");
  if (o.factor < 2) throw ConfigError("factor", std::to_string(o.factor), "must be >= 2");
}

// fp32 elements of a size, a multiple of the ranks where the collective splits it.
std::int64_t elements_of(std::int64_t bytes, int n) {
  const std::int64_t e = bytes / 4;
  return e - e % n;
}

}  // namespace

std::vector<NcclTestRow> run_nccl_tests(const Topology& topology, const NcclTestOptions& o) {
  check(o);
  std::vector<std::int64_t> sizes;
  for (std::int64_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
    sizes.push_back(b);
    if (b > o.max_bytes / o.factor) break;
  }
  int argc = 1;
  char name[] = "tandem-nccl-tests";
  char* argv[] = {name, nullptr};
  xbt_log_control_set("xbt_cfg.thresh:warning");  // no banner per configuration change
  simgrid::s4u::Engine engine(&argc, argv);
  configure_network_model(engine);
  const Platform p = build_platform(topology, o.gpus);
  std::vector<RankCoordinates> coords(static_cast<std::size_t>(o.gpus));
  for (int r = 0; r < o.gpus; ++r) coords[static_cast<std::size_t>(r)].dp = r;
  ParallelSizes parallel;
  parallel.dp = o.gpus;
  SimWorld world(p.hosts, coords, parallel, SimMode::full);
  std::vector<int> members(static_cast<std::size_t>(o.gpus));
  for (int r = 0; r < o.gpus; ++r) members[static_cast<std::size_t>(r)] = r;

  std::vector<NcclTestRow> rows(sizes.size());
  std::vector<std::unique_ptr<SimCommunicator>> comms;
  std::vector<std::unique_ptr<SimDevice>> devices;
  for (int r = 0; r < o.gpus; ++r) {
    comms.push_back(std::make_unique<SimCommunicator>(world, members, r, "nccl-tests", "all"));
    devices.push_back(std::make_unique<SimDevice>([](const OpDesc&) { return 0.0; }));
    SimCommunicator* comm = comms.back().get();
    SimDevice* device = devices.back().get();
    simgrid::s4u::Actor::create(
        "rank-" + std::to_string(r), p.hosts[static_cast<std::size_t>(r)],
        [comm, device, &rows, &sizes, &o, &topology, r] {
          const int n = o.gpus;
          auto& stream = device->default_stream();
          for (std::size_t i = 0; i < sizes.size(); ++i) {
            const std::int64_t e = elements_of(sizes[i], n);
            const double start = sim_now();
            std::unique_ptr<Work> work;
            switch (o.collective) {
              case Collective::all_reduce: {
                Tensor buffer = device->allocate(Shape{e}, DType::fp32);
                work = comm->all_reduce(stream, buffer, ReduceOp::sum);
                work->wait();
                break;
              }
              case Collective::broadcast: {
                Tensor buffer = device->allocate(Shape{e}, DType::fp32);
                work = comm->broadcast(stream, buffer, 0);
                work->wait();
                break;
              }
              case Collective::all_gather: {
                Tensor in = device->allocate(Shape{e / n}, DType::fp32);
                Tensor out = device->allocate(Shape{e}, DType::fp32);
                work = comm->all_gather(stream, in, out);
                work->wait();
                break;
              }
              case Collective::reduce_scatter: {
                Tensor in = device->allocate(Shape{e}, DType::fp32);
                Tensor out = device->allocate(Shape{e / n}, DType::fp32);
                work = comm->reduce_scatter(stream, in, out, ReduceOp::sum);
                work->wait();
                break;
              }
              case Collective::all_to_all: {
                Tensor in = device->allocate(Shape{e}, DType::fp32);
                Tensor out = device->allocate(Shape{e}, DType::fp32);
                work = comm->all_to_all(stream, in, out);
                work->wait();
                break;
              }
            }
            if (r != 0) continue;
            NcclTestRow& row = rows[i];
            row.bytes = 4 * e;
            row.count = e;
            row.seconds = sim_now() - start;
            row.algbw = row.seconds > 0 ? static_cast<double>(row.bytes) / row.seconds : 0;
            row.busbw = row.algbw * bus_bandwidth_factor(o.collective, n);
            if (topology.nccl.enabled)
              row.choice = nccl_choice_label(nccl_choose(
                  topology.nccl, o.collective, static_cast<double>(row.bytes), comm->nccl_shape()));
          }
        });
  }
  engine.run();
  return rows;
}

std::string format_nccl_tests(const Topology& topology, const NcclTestOptions& o,
                              const std::vector<NcclTestRow>& rows) {
  auto count = [&](int per, const char* what) {
    const int n = (o.gpus + per - 1) / per;
    return std::to_string(n) + " " + what + (n > 1 ? "s" : "");
  };
  // "(18 nodes in 1 NVLink domain of gb200-nvl72)" where nodes share NVLink.
  const std::string where = count(topology.node.gpus_per_node, "node") +
                            (topology.nvlink_domain.gpus > 0
                                 ? " in " + count(topology.nvlink_domain.gpus, "NVLink domain")
                                 : std::string());
  std::string out = "# tandem nccl-tests: " + std::string(collective_name(o.collective)) + " on " +
                    std::to_string(o.gpus) + " GPUs (" + where + " of " + topology.name + ")\n";
  char line[256];
  std::snprintf(line, sizeof line, "#%13s %14s %6s %10s %8s %8s  %s\n", "size", "count", "type",
                "time", "algbw", "busbw", "algorithm");
  out += line;
  std::snprintf(line, sizeof line, "#%13s %14s %6s %10s %8s %8s\n", "(B)", "(elements)", "", "(us)",
                "(GB/s)", "(GB/s)");
  out += line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%14lld %14lld %6s %10.2f %8.2f %8.2f  %s\n",
                  static_cast<long long>(r.bytes), static_cast<long long>(r.count), "float",
                  r.seconds * 1e6, r.algbw / 1e9, r.busbw / 1e9,
                  r.choice.empty() ? "ideal ring" : r.choice.c_str());
    out += line;
  }
  return out;
}

}  // namespace tandem::sim
