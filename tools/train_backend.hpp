// The binding `tandem train --device cpu|cuda` runs on: the Device and this rank's
// communicator for every process group of the layout. cpu: CpuDevice and MPI
// communicators. cuda: CudaDevice on GPU (local rank mod GPU count) and NCCL
// communicators, bootstrapped over the MPI world and split per group kind.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/communicator.hpp"
#include "core/parallel_context.hpp"
#include "exec/mpi/mpi_runtime.hpp"
#include "schedules/layout.hpp"

namespace tandem::cli {

// Rejects, before any work, a device this build or machine cannot run: "cuda" without
// CUDA built in, or with no GPU visible (ConfigError naming --device and the reason).
void check_device_flag(const std::string& device);

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;
  virtual Device& device() = 0;
  // This rank's communicator per group kind it belongs to.
  virtual const std::map<GroupKind, Communicator*>& groups() const = 0;
};

// Collective over the MPI world: every rank calls it with the same device and layout.
std::unique_ptr<TrainBackend> make_train_backend(const std::string& device, MpiRuntime& mpi,
                                                 const Layout& layout);

}  // namespace tandem::cli
