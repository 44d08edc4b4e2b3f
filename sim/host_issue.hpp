// The host's side of a collective: a framework issues every collective and p2p group from
// its one host thread (torch.distributed → NCCL enqueue), which costs host time like a
// kernel launch does. HostIssueCommunicator wraps a sim communicator and charges that
// time on the SimDevice's host issue clock before handing the call on, so the collective
// starts no earlier than the host issued it and later ops wait behind the issue.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/communicator.hpp"
#include "sim/sim_device.hpp"

namespace tandem::sim {

class HostIssueCommunicator : public Communicator {
 public:
  HostIssueCommunicator(Communicator& inner, SimDevice& device) : inner_(inner), device_(device) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string_view name() const override { return inner_.name(); }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override {
    return inner_.split(color, key, std::move(name));
  }
  std::unique_ptr<Work> all_reduce(Stream& s, Tensor& buffer, ReduceOp op) override {
    issue();
    return inner_.all_reduce(s, buffer, op);
  }
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) override {
    issue();
    return inner_.all_gather(s, input, output);
  }
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                       ReduceOp op) override {
    issue();
    return inner_.reduce_scatter(s, input, output, op);
  }
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override {
    issue();
    return inner_.broadcast(s, buffer, root);
  }
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) override {
    issue();
    return inner_.all_to_all(s, input, output);
  }
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                     std::span<const std::int64_t> send_counts, Tensor& output,
                                     std::span<const std::int64_t> recv_counts) override {
    issue();
    return inner_.all_to_all_v(s, input, send_counts, output, recv_counts);
  }
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override {
    issue();
    inner_.all_gather_counts(s, mine, all);
  }
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override {
    issue();
    return inner_.batch_p2p(s, ops);
  }
  void barrier() override { inner_.barrier(); }

 private:
  void issue() { device_.host_work(device_.host().collective_issue, "collective issue"); }

  Communicator& inner_;
  SimDevice& device_;
};

}  // namespace tandem::sim
