// The host's side of a collective: a framework issues every collective and p2p group from
// its one host thread (torch.distributed → NCCL enqueue), which costs host time like a
// kernel launch does. HostIssueCommunicator wraps a sim communicator and charges that
// time on the SimDevice's host issue clock before handing the call on, so the collective
// starts no earlier than the host issued it and later ops wait behind the issue.
// Where Megatron's host really waits it tells the device (SimDevice::host_waited): after
// a p2p group (batch_p2p_sync: torch.cuda.synchronize() after batch_isend_irecv), after
// gathering integers to the host, after a barrier; after a collective's wait only with
// GpuSpec::host_waits_for_collectives.
#pragma once

#include <memory>
#include <optional>
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
    return collective(inner_.all_reduce(s, buffer, op));
  }
  std::unique_ptr<Work> all_gather(Stream& s, const Tensor& input, Tensor& output) override {
    issue();
    return collective(inner_.all_gather(s, input, output));
  }
  std::unique_ptr<Work> reduce_scatter(Stream& s, const Tensor& input, Tensor& output,
                                       ReduceOp op) override {
    issue();
    return collective(inner_.reduce_scatter(s, input, output, op));
  }
  std::unique_ptr<Work> broadcast(Stream& s, Tensor& buffer, int root) override {
    issue();
    return collective(inner_.broadcast(s, buffer, root));
  }
  std::unique_ptr<Work> all_to_all(Stream& s, const Tensor& input, Tensor& output) override {
    issue();
    return collective(inner_.all_to_all(s, input, output));
  }
  std::unique_ptr<Work> all_to_all_v(Stream& s, const Tensor& input,
                                     std::span<const std::int64_t> send_counts, Tensor& output,
                                     std::span<const std::int64_t> recv_counts) override {
    issue();
    return collective(inner_.all_to_all_v(s, input, send_counts, output, recv_counts));
  }
  void all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                         std::span<std::int64_t> all) override {
    issue();
    inner_.all_gather_counts(s, mine, all);
    device_.host_waited();
  }
  std::unique_ptr<Work> batch_p2p(Stream& s, std::span<const P2POp> ops) override {
    // Inside a library call (Transformer Engine's userbuffers) the exchange is ordered on
    // streams; elsewhere it is Megatron's pipeline p2p, after which the host synchronizes.
    const bool library = device_.in_library_call();
    issue();
    auto work = inner_.batch_p2p(s, ops);
    if (library) return work;
    return std::make_unique<HostWaitWork>(std::move(work), device_);
  }
  void barrier() override {
    inner_.barrier();
    device_.host_waited();
  }

 private:
  // A collective's Work: the host sits through its wait only if the preset says so, and
  // never for a group of one, which Megatron bypasses (see issue()).
  std::unique_ptr<Work> collective(std::unique_ptr<Work> work) {
    if (!device_.host().waits_for_collectives || inner_.size() <= 1) return work;
    return std::make_unique<HostWaitWork>(std::move(work), device_);
  }

  // Work whose wait() the host really sits through.
  class HostWaitWork : public Work {
   public:
    HostWaitWork(std::unique_ptr<Work> inner, SimDevice& device)
        : inner_(std::move(inner)), device_(device) {}
    void wait() override {
      inner_->wait();
      device_.host_waited();
    }
    bool test() override { return inner_->test(); }
    std::optional<WorkTiming> timing() const override { return inner_->timing(); }

   private:
    std::unique_ptr<Work> inner_;
    SimDevice& device_;
  };

  // Megatron returns before calling torch.distributed on a group of one (mappings.py:
  // "Bypass the function if we are using only 1 GPU"), so such a call costs the host nothing.
  void issue() {
    if (inner_.size() <= 1) return;
    device_.host_work(
        device_.library_issue() ? device_.host().library_launch : device_.host().collective_issue,
        "collective issue");
  }

  Communicator& inner_;
  SimDevice& device_;
};

}  // namespace tandem::sim
