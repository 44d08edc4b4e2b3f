#include "exec/cpu/self_communicator.hpp"

#include <stdexcept>

namespace tandem {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

void check_same_size(const char* what, const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel() || a.dtype != b.dtype)
    throw std::invalid_argument(std::string(what) + " on a one-rank group: input has " +
                                std::to_string(a.numel()) + " elements, output " +
                                std::to_string(b.numel()));
}

}  // namespace

std::unique_ptr<Communicator> SelfCommunicator::split(int, int, std::string name) {
  return std::make_unique<SelfCommunicator>(device_, std::move(name));
}

std::unique_ptr<Work> SelfCommunicator::all_reduce(Stream&, Tensor&, ReduceOp) {
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> SelfCommunicator::all_gather(Stream& s, const Tensor& in, Tensor& out) {
  check_same_size("all_gather", in, out);
  const bool in_place = in.storage == out.storage && in.offset == out.offset;
  if (!in_place) device_.copy(s, in, out);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> SelfCommunicator::reduce_scatter(Stream& s, const Tensor& in, Tensor& out,
                                                       ReduceOp) {
  check_same_size("reduce_scatter", in, out);
  device_.copy(s, in, out);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> SelfCommunicator::broadcast(Stream&, Tensor&, int root) {
  if (root != 0)
    throw std::invalid_argument("broadcast on a one-rank group from root " + std::to_string(root));
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> SelfCommunicator::all_to_all(Stream& s, const Tensor& in, Tensor& out) {
  check_same_size("all_to_all", in, out);
  device_.copy(s, in, out);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> SelfCommunicator::all_to_all_v(Stream& s, const Tensor& in,
                                                     std::span<const std::int64_t> send_counts,
                                                     Tensor& out,
                                                     std::span<const std::int64_t> recv_counts) {
  check_same_size("all_to_all_v", in, out);
  if (send_counts.size() != 1 || recv_counts.size() != 1 || send_counts[0] != in.numel() ||
      recv_counts[0] != out.numel())
    throw std::invalid_argument(
        "all_to_all_v on a one-rank group: send_counts and recv_counts must each hold one "
        "count, the tensor's " +
        std::to_string(in.numel()) + " elements");
  device_.copy(s, in, out);
  return std::make_unique<DoneWork>();
}

void SelfCommunicator::all_gather_counts(Stream&, std::span<const std::int64_t> mine,
                                         std::span<std::int64_t> all) {
  if (all.size() != mine.size())
    throw std::invalid_argument(
        "all_gather_counts on a one-rank group: " + std::to_string(all.size()) + " places for " +
        std::to_string(mine.size()) + " counts");
  std::copy(mine.begin(), mine.end(), all.begin());
}

std::unique_ptr<Work> SelfCommunicator::batch_p2p(Stream&, std::span<const P2POp> ops) {
  if (!ops.empty())
    throw std::invalid_argument(
        "point-to-point transfer on a one-rank group: a pipeline stage has no neighbour");
  return std::make_unique<DoneWork>();
}

}  // namespace tandem
