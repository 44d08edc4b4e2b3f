// make_train_backend and check_device_flag; the only file of tools/ that knows CUDA.
#include "tools/train_backend.hpp"

#include <cstdlib>

#include "core/error.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "exec/mpi/group_communicators.hpp"
#if TANDEM_WITH_CUDA
#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_info.hpp"
#include "exec/cuda/nccl_groups.hpp"
#endif

namespace tandem::cli {
namespace {

class CpuBackend final : public TrainBackend {
 public:
  CpuBackend(MpiRuntime& mpi, const Layout& layout)
      : comms_(make_group_communicators(mpi.world(), layout)) {
    for (auto& [kind, comm] : comms_) groups_[kind] = comm.get();
  }
  Device& device() override { return device_; }
  const std::map<GroupKind, Communicator*>& groups() const override { return groups_; }

 private:
  CpuDevice device_;
  GroupCommunicators comms_;
  std::map<GroupKind, Communicator*> groups_;
};

#if TANDEM_WITH_CUDA
int local_rank() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return v ? std::atoi(v) : 0;
}

class CudaBackend final : public TrainBackend {
 public:
  CudaBackend(MpiRuntime& mpi, const Layout& layout)
      : device_(local_rank() % cuda_availability().devices),
        world_(NcclCommunicator::create(mpi.world(), device_, "world")),
        comms_(make_nccl_group_communicators(*world_, layout)) {
    for (auto& [kind, comm] : comms_) groups_[kind] = comm.get();
  }
  Device& device() override { return device_; }
  const std::map<GroupKind, Communicator*>& groups() const override { return groups_; }

 private:
  CudaDevice device_;  // declared first: outlives the communicators' streams
  std::unique_ptr<NcclCommunicator> world_;
  NcclGroupCommunicators comms_;
  std::map<GroupKind, Communicator*> groups_;
};
#endif

}  // namespace

void check_device_flag(const std::string& device) {
  if (device != "cuda") return;
#if TANDEM_WITH_CUDA
  const auto a = cuda_availability();
  if (a.devices == 0)
    throw ConfigError("--device", device,
                      "no CUDA GPU is visible to this process (" + a.reason + ")");
#else
  throw ConfigError("--device", device,
                    "this tandem was built without CUDA: rebuild where nvcc, cuBLAS and NCCL are "
                    "installed (cmake -DTANDEM_CUDA=ON), or use --device cpu");
#endif
}

std::unique_ptr<TrainBackend> make_train_backend(const std::string& device, MpiRuntime& mpi,
                                                 const Layout& layout) {
#if TANDEM_WITH_CUDA
  if (device == "cuda") return std::make_unique<CudaBackend>(mpi, layout);
#endif
  check_device_flag(device);
  return std::make_unique<CpuBackend>(mpi, layout);
}

}  // namespace tandem::cli
