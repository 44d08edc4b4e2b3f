// NCCL collectives of the cuda binding, nccl-tests style: `mpirun -np <GPUs> bench_nccl
// [--min-bytes 1024] [--max-bytes 67108864] [--iters 20]`, one rank per GPU. For each
// collective and message size it prints nccl-tests' columns: size (bytes), count
// (elements), type, redop, root, time (µs per operation, rank 0's view), algbw = size /
// time and busbw = algbw × the collective's factor (2(n−1)/n all-reduce, (n−1)/n
// all-gather, reduce-scatter and all-to-all, 1 broadcast), all GB/s, and #wrong: elements
// that differ from the closed-form result of the seeded inputs after one operation.
// Without a GPU (or with more ranks than GPUs) it says SKIPPED and exits 0.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_info.hpp"
#include "exec/cuda/nccl_communicator.hpp"
#include "exec/mpi/mpi_runtime.hpp"

namespace tandem {
namespace {

struct Options {
  std::int64_t min_bytes = 1024;
  std::int64_t max_bytes = 64 << 20;
  int iters = 20;
  int warmup = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--min-bytes")
      o.min_bytes = std::atoll(argv[++i]);
    else if (a == "--max-bytes")
      o.max_bytes = std::atoll(argv[++i]);
    else if (a == "--iters")
      o.iters = std::atoi(argv[++i]);
  }
  return o;  // other flags (a benchmark smoke run's --benchmark_*) are ignored
}

// Input element i of rank r: small integers, exact in fp32 after any sum.
float seeded(int r, std::int64_t i) {
  return static_cast<float>((r + 1) * (i % 5 + 1));
}

// One collective as nccl-tests runs it, for a total of `count` fp32 elements (the larger of
// its two buffers; a multiple of the rank count).
struct Collective {
  const char* name;
  const char* redop;
  int root;                      // -1: none
  double bus_factor;             // busbw / algbw
  std::int64_t in_div, out_div;  // in = count / in_div elements, out = count / out_div
  bool in_place;                 // the result lands in the input buffer
  // Expected output element i on rank r of n, block = count / n.
  std::function<float(int r, int n, std::int64_t block, std::int64_t i)> expected;
  std::function<std::unique_ptr<Work>(NcclCommunicator&, Stream&, Tensor&, Tensor&)> run;
};

std::vector<Collective> collectives(int n) {
  const double f = static_cast<double>(n - 1) / n;
  const auto sum_of = [](int ranks, std::int64_t i) {
    return static_cast<float>((i % 5 + 1) * ranks * (ranks + 1) / 2);
  };
  return {
      {"all_reduce", "sum", -1, 2 * f, 1, 1, true,
       [sum_of](int, int ranks, std::int64_t, std::int64_t i) { return sum_of(ranks, i); },
       [](NcclCommunicator& c, Stream& s, Tensor& in, Tensor&) {
         return c.all_reduce(s, in, ReduceOp::sum);
       }},
      {"all_gather", "none", -1, f, n, 1, false,
       [](int, int, std::int64_t block, std::int64_t i) {
         return seeded(static_cast<int>(i / block), i % block);
       },
       [](NcclCommunicator& c, Stream& s, Tensor& in, Tensor& out) {
         return c.all_gather(s, in, out);
       }},
      {"reduce_scatter", "sum", -1, f, 1, n, false,
       [sum_of](int r, int ranks, std::int64_t block, std::int64_t i) {
         return sum_of(ranks, r * block + i);
       },
       [](NcclCommunicator& c, Stream& s, Tensor& in, Tensor& out) {
         return c.reduce_scatter(s, in, out, ReduceOp::sum);
       }},
      {"broadcast", "none", 0, 1.0, 1, 1, true,
       [](int, int, std::int64_t, std::int64_t i) { return seeded(0, i); },
       [](NcclCommunicator& c, Stream& s, Tensor& in, Tensor&) { return c.broadcast(s, in, 0); }},
      {"all_to_all", "none", -1, f, 1, 1, false,
       [](int r, int, std::int64_t block, std::int64_t i) {
         return seeded(static_cast<int>(i / block), r * block + i % block);
       },
       [](NcclCommunicator& c, Stream& s, Tensor& in, Tensor& out) {
         return c.all_to_all(s, in, out);
       }},
  };
}

void fill_seeded(CudaDevice& d, Tensor& t, int rank) {
  d.upload(d.default_stream(), t, Device::ProduceFloats([&](std::span<float> out) {
             for (std::size_t i = 0; i < out.size(); ++i)
               out[i] = seeded(rank, static_cast<std::int64_t>(i));
           }));
}

// Elements of the result that differ from the closed form, summed over ranks.
std::int64_t count_wrong(const Collective& c, CudaDevice& d, NcclCommunicator& comm,
                         MpiCommunicator& world, std::int64_t count) {
  Tensor in = d.allocate({count / c.in_div}, DType::fp32);
  Tensor out = d.allocate({count / c.out_div}, DType::fp32);
  fill_seeded(d, in, comm.rank());
  c.run(comm, d.default_stream(), in, out)->wait();
  Tensor& result = c.in_place ? in : out;
  std::vector<float> host(static_cast<std::size_t>(result.numel()));
  d.download(d.default_stream(), result, host);
  const std::int64_t block = count / comm.size();
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < host.size(); ++i)
    if (host[i] != c.expected(comm.rank(), comm.size(), block, static_cast<std::int64_t>(i)))
      ++wrong;
  // Sum over ranks through MPI, on the host.
  Tensor total{Shape{1}, DType::int64, nullptr, 0};
  struct Host final : Storage {
    std::int64_t v = 0;
    void* data() override { return &v; }
    Bytes bytes() const override { return Bytes(8); }
  };
  auto storage = std::make_shared<Host>();
  storage->v = wrong;
  total.storage = storage;
  world.all_reduce(d.default_stream(), total, ReduceOp::sum)->wait();
  return storage->v;
}

// Microseconds per operation: `iters` operations back to back, the last one waited for.
double time_us(const Collective& c, CudaDevice& d, NcclCommunicator& comm, std::int64_t count,
               const Options& o) {
  Tensor in = d.allocate({count / c.in_div}, DType::fp32);
  Tensor out = d.allocate({count / c.out_div}, DType::fp32);
  fill_seeded(d, in, comm.rank());
  for (int i = 0; i < o.warmup; ++i) c.run(comm, d.default_stream(), in, out)->wait();
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<Work>> works;
  for (int i = 0; i < o.iters; ++i) works.push_back(c.run(comm, d.default_stream(), in, out));
  for (auto& w : works) w->wait();
  const std::chrono::duration<double, std::micro> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / o.iters;
}

int run(MpiRuntime& mpi, const Options& o) {
  MpiCommunicator& world = mpi.world();
  const auto a = cuda_availability();
  if (a.devices == 0 || world.size() > a.devices) {
    if (world.rank() == 0)
      std::printf("bench_nccl: SKIPPED: needs a CUDA GPU per rank (%d ranks, %d GPUs%s%s)\n",
                  world.size(), a.devices, a.reason.empty() ? "" : ": ", a.reason.c_str());
    return 0;
  }
  CudaDevice device(world.rank() % a.devices);
  auto comm = NcclCommunicator::create(world, device, "world");
  const int n = comm->size();
  if (world.rank() == 0) std::printf("# bench_nccl: %d ranks, %s\n", n, cuda_versions().c_str());
  for (const Collective& c : collectives(n)) {
    if (world.rank() == 0) {
      std::printf("#\n# %s\n", c.name);
      std::printf("# %12s %12s %8s %8s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
                  "root", "time", "algbw", "busbw", "#wrong");
      std::printf("# %12s %12s %8s %8s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "",
                  "(us)", "(GB/s)", "(GB/s)", "");
    }
    for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      const std::int64_t count = std::max<std::int64_t>(n, bytes / 4 / n * n);
      const std::int64_t wrong = count_wrong(c, device, *comm, world, count);
      const double us = time_us(c, device, *comm, count, o);
      const double size = static_cast<double>(count) * 4;
      const double algbw = size / (us * 1e-6) / 1e9;
      if (world.rank() == 0)
        std::printf("  %12.0f %12lld %8s %8s %6d %10.2f %8.2f %8.2f %7lld\n", size,
                    static_cast<long long>(count), "float", c.redop, c.root, us, algbw,
                    algbw * c.bus_factor, static_cast<long long>(wrong));
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  const tandem::Options o = tandem::parse(argc, argv);
  return tandem::run_mpi_main(argc, argv,
                              [&](tandem::MpiRuntime& mpi) { return tandem::run(mpi, o); });
}
