// Communicator and Work: the communication half of the step program's contract.
// One communicator per process group (tp, pp, dp, …), made by split() from the world;
// every collective is asynchronous, issued on a stream, and returns a Work to wait on,
// as NCCL and torch.distributed do. Buffers are typed tensors with element counts;
// bytes are derived, never passed. Bound to MPI (cpu), NCCL (cuda) and SimGrid (sim).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/device.hpp"
#include "core/tensor.hpp"

namespace tandem {

enum class ReduceOp { sum, max, min };

// When an operation was issued by the host, started, and finished where it ran (a
// communication thread, a GPU stream, simulated time), on the host's monotonic clock.
struct WorkTiming {
  std::chrono::steady_clock::time_point issued;
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point finished;
};

// A handle on an issued collective or p2p batch: start → test/wait, as SimGrid's activities.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // the host blocks until done (and the issuing stream may go on)
  virtual bool test() = 0;  // true once done
  // Where the operation really ran, once done; empty when the binding cannot tell.
  virtual std::optional<WorkTiming> timing() const { return std::nullopt; }
};

// One send or receive inside a batched p2p (batch_isend_irecv / ncclGroupStart-End).
struct P2POp {
  enum class Kind { send, recv };
  Kind kind;
  Tensor tensor;
  int peer;  // rank within this communicator
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // the group kind, "tp", "dp-cp", …

  // Ranks with the same color form a new communicator, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key, std::string name) = 0;

  virtual std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) = 0;
  // output holds size() × input.numel() elements, rank-major.
  virtual std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) = 0;
  // input holds size() × output.numel() elements; rank r receives the reduced r-th block.
  virtual std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                               ReduceOp op) = 0;
  virtual std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) = 0;
  virtual std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) = 0;
  // All-to-all with a split size per peer (MPI_Alltoallv; the token dispatch of a mixture
  // of experts). send_counts[p] elements of `input` go to peer p and recv_counts[p]
  // elements of `output` come from it, each side contiguous in rank order; both spans hold
  // size() counts, summing to input.numel() and output.numel(). Zero counts are fine; what
  // p sends here must equal recv_counts[p] (exchange the counts first, as Megatron does).
  virtual std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                             std::span<const std::int64_t> send_counts,
                                             Tensor& output,
                                             std::span<const std::int64_t> recv_counts) = 0;
  virtual std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) = 0;
  // Issued on s after its work; blocks the host until it holds every member's `mine` (the same
  // length on each), rank-major in `all` (size() × mine.size()). Host integers: the split sizes of
  // a mixture of experts' dispatch, which Megatron all-gathers and copies to the CPU.
  virtual void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                                 std::span<std::int64_t> all) = 0;
  virtual void barrier() = 0;
};

}  // namespace tandem
