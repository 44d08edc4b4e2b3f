// The communicator of a one-rank group, in process: what MPI_COMM_SELF is to MPI. At
// tensor-parallel size 1 the model still issues its all-reduces; here they complete at
// once with the data already in place. Single-process training and the in-process tests
// use it; multi-rank runs use the MPI communicator.
#pragma once

#include <string>

#include "core/communicator.hpp"

namespace tandem {

class SelfCommunicator : public Communicator {
 public:
  SelfCommunicator(Device& device, std::string name) : device_(device), name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return name_; }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;
  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) override;
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) override;
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                       ReduceOp op) override;
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override;
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) override;
  // One peer, itself: the counts are {input.numel()} and {output.numel()}, a copy.
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                     std::span<const std::int64_t> send_counts, Tensor& output,
                                     std::span<const std::int64_t> recv_counts) override;
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override;
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override;
  void barrier() override {}

 private:
  Device& device_;
  std::string name_;
};

}  // namespace tandem
