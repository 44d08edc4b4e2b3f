// NcclCommunicator: tandem's Communicator over a NCCL communicator, for the cuda binding.
// Arguments are checked on the host at issue time, with the messages of the MPI
// communicator ("all_gather on group tp (size 2): output holds 6 elements, expected …").
// Every operation is asynchronous on the communicator's own CUDA stream: the issuing
// stream records an event, the communication stream waits on it (so the collective reads
// what the issuing stream computed), the NCCL call is enqueued, and a Work is returned.
// Work::wait blocks the host until the operation has run (polling ncclCommGetAsyncError,
// so a failed peer surfaces as an NcclError instead of a hang); a stream that reads the
// result after that is safe. Operations of one communicator run in issue order, those of
// different communicators (tp, dp, pp) concurrently. Pipeline p2p batches are one
// ncclGroupStart / ncclSend… ncclRecv… / ncclGroupEnd.
// Buffers: device tensors of fp32, bf16, fp16, int32 or int64 (all reducible in NCCL).
#pragma once

#include <nccl.h>

#include <memory>
#include <string>

#include "core/communicator.hpp"

namespace tandem {

class CudaDevice;
class NcclHandle;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (an MPI world): rank 0 makes the ncclUniqueId, `bootstrap`
  // broadcasts it, every rank calls ncclCommInitRank on `device`'s GPU. Ranks and size are
  // those of `bootstrap`.
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap, CudaDevice& device,
                                                  std::string name);
  // Takes ownership of `comm` (ncclCommDestroy when the last Work on it is gone too).
  NcclCommunicator(ncclComm_t comm, std::string name, CudaDevice& device);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return name_; }

  // ncclCommSplit, blocking, collective over this communicator; a negative color opts out
  // and returns null.
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  std::unique_ptr<NcclCommunicator> split_nccl(int color, int key, std::string name);

  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) override;
  // In place when `input` is exactly this rank's block of `output`.
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) override;
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                       ReduceOp op) override;
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override;
  // One ncclSend/ncclRecv pair per peer inside a group.
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) override;
  // One ncclSend and one ncclRecv per peer with its own count, in one group; a zero count
  // posts nothing for that side.
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                     std::span<const std::int64_t> send_counts, Tensor& output,
                                     std::span<const std::int64_t> recv_counts) override;
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override;
  // Through device buffers: `mine` copied up, ncclAllGather (int64) on the communication
  // stream after the work issued on `s`, copied down, waited for.
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override;
  // A one-element all-reduce, waited for: every rank has issued its barrier.
  void barrier() override;

 private:
  class Launch;
  Launch begin(Stream& s, std::string_view op);

  std::shared_ptr<NcclHandle> comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  CudaDevice& device_;
  std::unique_ptr<Stream> stream_;  // where this communicator's operations run
};

}  // namespace tandem
