// NcclCommunicator::create (the MPI-bootstrapped NCCL world) and
// make_nccl_group_communicators (one ncclCommSplit per group kind).
#include "exec/cuda/nccl_groups.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/nccl_check.hpp"

namespace tandem {

namespace {

// Host bytes behind a Tensor, for the bootstrap broadcast of the ncclUniqueId.
class HostBytes final : public Storage {
 public:
  explicit HostBytes(std::size_t n) : bytes_(n) {}
  void* data() override { return bytes_.data(); }
  Bytes bytes() const override { return Bytes(static_cast<std::int64_t>(bytes_.size())); }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap,
                                                           CudaDevice& device, std::string name) {
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int32_t) == 0);
  constexpr std::int64_t words = sizeof(ncclUniqueId) / sizeof(std::int32_t);
  Tensor id_words{Shape{words}, DType::int32, std::make_shared<HostBytes>(sizeof(ncclUniqueId)), 0};
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    TANDEM_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(id_words.storage->data(), &id, sizeof(id));
  }
  // The bootstrap is a host (MPI) communicator: it ignores the stream.
  bootstrap.broadcast(device.default_stream(), id_words, 0)->wait();
  std::memcpy(&id, id_words.storage->data(), sizeof(id));
  ncclComm_t comm = nullptr;
  TANDEM_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  return std::make_unique<NcclCommunicator>(comm, std::move(name), device);
}

NcclGroupCommunicators make_nccl_group_communicators(NcclCommunicator& world,
                                                     const Layout& layout) {
  if (world.size() != layout.sizes.world())
    throw std::invalid_argument(
        "make_nccl_group_communicators: the world communicator has " +
        std::to_string(world.size()) +
        " ranks but the layout needs tp × pp × dp × cp = " + std::to_string(layout.sizes.tp) +
        " × " + std::to_string(layout.sizes.pp) + " × " + std::to_string(layout.sizes.dp) + " × " +
        std::to_string(layout.sizes.cp) + " = " + std::to_string(layout.sizes.world()));
  NcclGroupCommunicators result;
  // std::map iterates kinds in one order on every rank, so the splits pair up.
  for (const auto& [kind, groups] : layout.groups) {
    const GroupMembership m = group_membership(layout, kind, world.rank());
    auto comm = world.split_nccl(m.color, m.key, std::string(group_kind_name(kind)));
    if (comm) result.emplace(kind, std::move(comm));
  }
  return result;
}

}  // namespace tandem
