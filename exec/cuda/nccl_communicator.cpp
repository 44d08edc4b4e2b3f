// NcclCommunicator: host-side checks (messages as the MPI communicator's), then the NCCL
// call on the communication stream between two timing events. NcclWork keeps the tensors
// alive until the host has seen the operation finish; if a Work is dropped unwaited, the
// memory pool's release events still keep their blocks from reuse until the stream is past.
#include "exec/cuda/nccl_communicator.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec/cuda/cuda_device.hpp"
#include "exec/cuda/cuda_stream.hpp"
#include "exec/cuda/nccl_check.hpp"
#include "exec/mpi/mpi_types.hpp"
#include "kernels/cuda/check.hpp"

namespace tandem {

using mpi_detail::CallSite;
using mpi_detail::describe;
using mpi_detail::overlaps;

void throw_nccl_error(ncclResult_t code, const char* call, const char* file, int line) {
  throw NcclError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  ncclGetErrorString(code) + " (" + ncclGetLastError(nullptr) + ")");
}

// The ncclComm_t, destroyed when the communicator and every Work on it are gone.
class NcclHandle {
 public:
  explicit NcclHandle(ncclComm_t comm) : comm_(comm) {}
  ~NcclHandle() { (void)ncclCommDestroy(comm_); }
  NcclHandle(const NcclHandle&) = delete;
  NcclHandle& operator=(const NcclHandle&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_;
};

using collective_checks::check_disjoint;
using collective_checks::check_gathered_counts;
using collective_checks::check_multiple;
using collective_checks::check_rank;
using collective_checks::check_same_dtype;
using collective_checks::check_split_counts;

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::fp32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::fp16:
      return ncclFloat16;
    case DType::int32:
      return ncclInt32;
    case DType::int64:
      return ncclInt64;
  }
  throw std::logic_error("unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  throw std::logic_error("unknown reduce op");
}

char* address(const Tensor& t, std::string_view what, const CallSite& where) {
  if (t.numel() > 0 && !t.has_data())
    throw std::invalid_argument(describe(where) + ": " + std::string(what) +
                                " is a phantom tensor (no storage)");
  if (!t.has_data()) return nullptr;
  return static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype).value;
}

std::size_t count(const Tensor& t) {
  return static_cast<std::size_t>(t.numel());
}

// One issued operation: its timing events, the tensors it uses, its communicator.
struct NcclOperation {
  std::shared_ptr<NcclHandle> comm;
  std::string label;  // "all_reduce tp"
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  std::vector<Tensor> keep;
  WorkTiming timing{};
  bool done = false;

  ~NcclOperation() {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(end);
  }

  // Throws when NCCL reports an asynchronous failure (a peer gone, a network error).
  void check_async() const {
    ncclResult_t async = ncclSuccess;
    TANDEM_NCCL_CHECK(ncclCommGetAsyncError(comm->get(), &async));
    if (async != ncclSuccess && async != ncclInProgress)
      throw NcclError(label + " failed: " + ncclGetErrorString(async) + " (" +
                      ncclGetLastError(comm->get()) + ")");
  }

  void finish() {
    timing.finished = Clock::now();
    float ms = 0;
    if (cudaEventElapsedTime(&ms, start, end) == cudaSuccess)
      timing.started = timing.finished - std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double, std::milli>(ms));
    else
      timing.started = timing.issued;
    done = true;
    keep.clear();
  }
};

class NcclWork final : public Work {
 public:
  explicit NcclWork(std::unique_ptr<NcclOperation> op) : op_(std::move(op)) {}

  void wait() override {
    while (!test()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }

  bool test() override {
    if (op_->done) return true;
    const cudaError_t status = cudaEventQuery(op_->end);
    if (status == cudaErrorNotReady) {
      op_->check_async();
      return false;
    }
    TANDEM_CUDA_CHECK(status);
    op_->finish();
    return true;
  }

  std::optional<WorkTiming> timing() const override {
    if (!op_->done) return std::nullopt;
    return op_->timing;
  }

 private:
  std::unique_ptr<NcclOperation> op_;
};

}  // namespace

// An operation being issued: the communication stream has been made to wait for the
// issuing stream and the start event is recorded; finish() records the end event.
class NcclCommunicator::Launch {
 public:
  Launch(NcclCommunicator& c, Stream& issuing, std::string_view op)
      : stream_(cuda_stream_of(*c.stream_)), op_(std::make_unique<NcclOperation>()) {
    op_->comm = c.comm_;
    op_->label = std::string(op) + " " + c.name_;
    op_->timing.issued = Clock::now();
    auto ready = c.device_.create_event();
    issuing.record(*ready);
    c.stream_->wait(*ready);
    TANDEM_CUDA_CHECK(cudaEventCreate(&op_->start));
    TANDEM_CUDA_CHECK(cudaEventCreate(&op_->end));
    TANDEM_CUDA_CHECK(cudaEventRecord(op_->start, stream_));
  }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t comm() const { return op_->comm->get(); }
  void keep(const Tensor& t) { op_->keep.push_back(t); }
  std::unique_ptr<Work> finish() {
    TANDEM_CUDA_CHECK(cudaEventRecord(op_->end, stream_));
    return std::make_unique<NcclWork>(std::move(op_));
  }

 private:
  cudaStream_t stream_;
  std::unique_ptr<NcclOperation> op_;
};

NcclCommunicator::Launch NcclCommunicator::begin(Stream& s, std::string_view op) {
  return Launch(*this, s, op);
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, std::string name, CudaDevice& device)
    : comm_(std::make_shared<NcclHandle>(comm)), name_(std::move(name)), device_(device) {
  TANDEM_NCCL_CHECK(ncclCommUserRank(comm, &rank_));
  TANDEM_NCCL_CHECK(ncclCommCount(comm, &size_));
  stream_ = device.create_stream(name_ + " comm");
}

NcclCommunicator::~NcclCommunicator() {
  (void)cudaStreamSynchronize(cuda_stream_of(*stream_));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, std::string name) {
  return split_nccl(color, key, std::move(name));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::split_nccl(int color, int key,
                                                               std::string name) {
  ncclComm_t result = nullptr;
  TANDEM_NCCL_CHECK(
      ncclCommSplit(comm_->get(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &result, nullptr));
  if (result == nullptr) return nullptr;
  return std::make_unique<NcclCommunicator>(result, std::move(name), device_);
}

std::unique_ptr<Work> NcclCommunicator::all_reduce(Stream& s, Tensor& buffer, ReduceOp op) {
  const CallSite where{"all_reduce", name_, size_};
  char* data = address(buffer, "buffer", where);
  Launch l = begin(s, where.op);
  l.keep(buffer);
  TANDEM_NCCL_CHECK(ncclAllReduce(data, data, count(buffer), nccl_type(buffer.dtype), nccl_op(op),
                                  l.comm(), l.stream()));
  return l.finish();
}

std::unique_ptr<Work> NcclCommunicator::all_gather(Stream& s, const Tensor& input, Tensor& output) {
  const CallSite where{"all_gather", name_, size_};
  check_same_dtype(input, output, where);
  check_multiple(output.numel(), "output", size_, input.numel(), "input", where);
  const bool in_place = input.has_data() && output.has_data() &&
                        input.storage->data() == output.storage->data() &&
                        input.offset == output.offset + rank_ * input.numel();
  if (!in_place) check_disjoint(input, output, where);
  const char* send = address(input, "input", where);
  char* recv = address(output, "output", where);
  Launch l = begin(s, where.op);
  l.keep(input);
  l.keep(output);
  TANDEM_NCCL_CHECK(
      ncclAllGather(send, recv, count(input), nccl_type(input.dtype), l.comm(), l.stream()));
  return l.finish();
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter(Stream& s, const Tensor& input,
                                                       Tensor& output, ReduceOp op) {
  const CallSite where{"reduce_scatter", name_, size_};
  check_same_dtype(input, output, where);
  check_multiple(input.numel(), "input", size_, output.numel(), "output", where);
  check_disjoint(input, output, where);
  const char* send = address(input, "input", where);
  char* recv = address(output, "output", where);
  Launch l = begin(s, where.op);
  l.keep(input);
  l.keep(output);
  TANDEM_NCCL_CHECK(ncclReduceScatter(send, recv, count(output), nccl_type(input.dtype),
                                      nccl_op(op), l.comm(), l.stream()));
  return l.finish();
}

std::unique_ptr<Work> NcclCommunicator::broadcast(Stream& s, Tensor& buffer, int root) {
  const CallSite where{"broadcast", name_, size_};
  check_rank(root, "root", size_, where);
  char* data = address(buffer, "buffer", where);
  Launch l = begin(s, where.op);
  l.keep(buffer);
  TANDEM_NCCL_CHECK(ncclBroadcast(data, data, count(buffer), nccl_type(buffer.dtype), root,
                                  l.comm(), l.stream()));
  return l.finish();
}

std::unique_ptr<Work> NcclCommunicator::all_to_all(Stream& s, const Tensor& input, Tensor& output) {
  const CallSite where{"all_to_all", name_, size_};
  check_same_dtype(input, output, where);
  if (input.numel() != output.numel() || input.numel() % size_ != 0)
    throw std::invalid_argument(describe(where) + ": input holds " + std::to_string(input.numel()) +
                                " elements and output " + std::to_string(output.numel()) +
                                "; both must hold the same number, a multiple of the group size " +
                                std::to_string(size_));
  check_disjoint(input, output, where);
  const char* send = address(input, "input", where);
  char* recv = address(output, "output", where);
  const std::size_t block = count(input) / static_cast<std::size_t>(size_);
  const std::size_t block_bytes = block * static_cast<std::size_t>(dtype_size(input.dtype).value);
  Launch l = begin(s, where.op);
  l.keep(input);
  l.keep(output);
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < size_; ++peer) {
    const std::size_t at = static_cast<std::size_t>(peer) * block_bytes;
    TANDEM_NCCL_CHECK(
        ncclSend(send + at, block, nccl_type(input.dtype), peer, l.comm(), l.stream()));
    TANDEM_NCCL_CHECK(
        ncclRecv(recv + at, block, nccl_type(input.dtype), peer, l.comm(), l.stream()));
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  return l.finish();
}

std::unique_ptr<Work> NcclCommunicator::all_to_all_v(Stream& s, const Tensor& input,
                                                     std::span<const std::int64_t> send_counts,
                                                     Tensor& output,
                                                     std::span<const std::int64_t> recv_counts) {
  const CallSite where{"all_to_all_v", name_, size_};
  check_same_dtype(input, output, where);
  check_split_counts(send_counts, "send_counts", input.numel(), "input", size_, where);
  check_split_counts(recv_counts, "recv_counts", output.numel(), "output", size_, where);
  check_disjoint(input, output, where);
  const char* send = address(input, "input", where);
  char* recv = address(output, "output", where);
  const auto element = static_cast<std::size_t>(dtype_size(input.dtype).value);
  Launch l = begin(s, where.op);
  l.keep(input);
  l.keep(output);
  TANDEM_NCCL_CHECK(ncclGroupStart());
  std::size_t send_at = 0, recv_at = 0;  // elements
  for (int peer = 0; peer < size_; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    const auto send_count = static_cast<std::size_t>(send_counts[p]);
    const auto recv_count = static_cast<std::size_t>(recv_counts[p]);
    if (send_count > 0)
      TANDEM_NCCL_CHECK(ncclSend(send + send_at * element, send_count, nccl_type(input.dtype), peer,
                                 l.comm(), l.stream()));
    if (recv_count > 0)
      TANDEM_NCCL_CHECK(ncclRecv(recv + recv_at * element, recv_count, nccl_type(input.dtype), peer,
                                 l.comm(), l.stream()));
    send_at += send_count;
    recv_at += recv_count;
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  return l.finish();
}

std::unique_ptr<Work> NcclCommunicator::batch_p2p(Stream& s, std::span<const P2POp> ops) {
  const CallSite where{"batch_p2p", name_, size_};
  std::vector<char*> buffers;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::string what =
        "op " + std::to_string(i) + (ops[i].kind == P2POp::Kind::send ? " (send)" : " (recv)");
    check_rank(ops[i].peer, what + " names peer", size_, where);
    buffers.push_back(address(ops[i].tensor, what, where));
  }
  Launch l = begin(s, where.op);
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    l.keep(op.tensor);
    if (op.kind == P2POp::Kind::send)
      TANDEM_NCCL_CHECK(ncclSend(buffers[i], count(op.tensor), nccl_type(op.tensor.dtype), op.peer,
                                 l.comm(), l.stream()));
    else
      TANDEM_NCCL_CHECK(ncclRecv(buffers[i], count(op.tensor), nccl_type(op.tensor.dtype), op.peer,
                                 l.comm(), l.stream()));
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  return l.finish();
}

void NcclCommunicator::all_gather_counts(Stream& s, std::span<const std::int64_t> mine,
                                         std::span<std::int64_t> all) {
  const CallSite where{"all_gather_counts", name_, size_};
  check_gathered_counts(mine.size(), all.size(), size_, where);
  if (mine.empty()) return;  // every member holds none (the same length on each)
  Tensor send = device_.allocate(Shape{static_cast<std::int64_t>(mine.size())}, DType::int64);
  Tensor recv = device_.allocate(Shape{static_cast<std::int64_t>(all.size())}, DType::int64);
  Launch l = begin(s, where.op);
  l.keep(send);
  l.keep(recv);
  // `mine` and `all` are host memory the caller keeps until this returns: the copies run
  // on the communication stream, in order with the gather, and the wait covers them all.
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(send.storage->data(), mine.data(), mine.size_bytes(),
                                    cudaMemcpyHostToDevice, l.stream()));
  TANDEM_NCCL_CHECK(ncclAllGather(send.storage->data(), recv.storage->data(), mine.size(),
                                  ncclInt64, l.comm(), l.stream()));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(all.data(), recv.storage->data(), all.size_bytes(),
                                    cudaMemcpyDeviceToHost, l.stream()));
  l.finish()->wait();
}

void NcclCommunicator::barrier() {
  Tensor token = device_.allocate(Shape{1}, DType::int32);
  device_.fill(*stream_, token, 0);
  all_reduce(*stream_, token, ReduceOp::sum)->wait();
}

}  // namespace tandem
