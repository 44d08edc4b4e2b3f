// MpiCommunicator: tandem's Communicator over an MPI communicator, for the cpu binding.
// Buffers are host tensors (fp32, int32, int64; bf16 and fp16 for data movement only).
// Arguments are checked on the host at issue time — dtypes, element counts, peers, roots —
// and a mismatch throws std::invalid_argument naming the collective, the group and the
// numbers. The operation then runs on the communicator's thread (comm_thread.hpp), so it
// progresses while the host computes; the returned Work (an MpiWork) completes it.
//
// Streams: the cpu binding runs ops synchronously at issue time, so everything issued on
// the stream before the collective is already done; the stream argument orders nothing
// more, and whoever reads the result waits on the Work. Operations on one communicator run
// in issue order (as on a NCCL communicator's stream): a batch_p2p that sends to a peer
// whose matching receive is issued later on the same communicator, behind a send of its
// own, waits for it — pair sends with receives in one batch, as Megatron's
// send_forward_recv_backward does.
#pragma once

#include <mpi.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/communicator.hpp"
#include "exec/mpi/comm_thread.hpp"

namespace tandem {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed when this communicator and its thread are done) and
  // makes MPI calls on it return errors (MPI_ERRORS_RETURN), which become MpiError.
  MpiCommunicator(MPI_Comm comm, std::string name);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return name_; }

  // MPI_Comm_split on the communicator's thread, after everything issued before it. A
  // negative color puts this rank in no new communicator: the result is then null.
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  std::unique_ptr<MpiCommunicator> split_mpi(int color, int key, std::string name);

  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) override;
  // In place when `input` is exactly this rank's block of `output` (the distributed
  // optimizer's parameter all-gather); any other overlap is an error.
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) override;
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                       ReduceOp op) override;
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override;
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) override;
  // MPI_Alltoallv; every count and offset must fit MPI's int.
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                     std::span<const std::int64_t> send_counts, Tensor& output,
                                     std::span<const std::int64_t> recv_counts) override;
  // All receives and sends posted together (MPI_Irecv/Isend), completed together
  // (MPI_Waitall); a receive that gets fewer elements than its tensor holds is an error.
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override;
  // MPI_Allgather of the host integers on the communicator's thread, in issue order.
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override;
  // Blocks the host until every rank of the communicator has issued its barrier.
  void barrier() override;

 private:
  std::unique_ptr<Work> issue(std::string_view op, CommThread::Body body);

  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  CommThread thread_;
};

}  // namespace tandem
