// MpiCommunicator: host-side argument checks, then one MPI call per operation, run on the
// communicator's thread. Bodies capture tensors by value so their storage stays alive
// until the operation is done, even if the caller drops its handles first.
#include "exec/mpi/mpi_communicator.hpp"

#include <stdexcept>
#include <utility>
#include <vector>

#include "exec/mpi/mpi_types.hpp"

namespace tandem {

using mpi_detail::buffer_of;
using mpi_detail::CallSite;
using mpi_detail::check_mpi;
using mpi_detail::describe;
using mpi_detail::mpi_count;
using mpi_detail::mpi_datatype;
using mpi_detail::mpi_reduce_op;
using mpi_detail::overlaps;

using collective_checks::check_disjoint;
using collective_checks::check_multiple;
using collective_checks::check_same_dtype;
using collective_checks::check_split_counts;

namespace {

int comm_rank(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("MpiCommunicator: MPI_COMM_NULL given");
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : name_(std::move(name)), rank_(comm_rank(comm)), size_(comm_size(comm)), thread_(comm) {
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
}

std::unique_ptr<Work> MpiCommunicator::issue(std::string_view op, CommThread::Body body) {
  return thread_.submit(std::string(op) + " " + name_, std::move(body));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, std::string name) {
  return split_mpi(color, key, std::move(name));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split_mpi(int color, int key, std::string name) {
  const std::string context = describe({"split", name_, size_});
  MPI_Comm result = MPI_COMM_NULL;
  issue("split", [&result, color, key, context](MPI_Comm comm) {
    check_mpi(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &result),
              "MPI_Comm_split", context);
  })->wait();  // `result` lives on this frame: wait before leaving it
  if (result == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(result, std::move(name));
}

std::unique_ptr<Work> MpiCommunicator::all_reduce(Stream&, Tensor& buffer, ReduceOp op) {
  const CallSite where{"all_reduce", name_, size_};
  const MPI_Op mpi_op = mpi_reduce_op(op, buffer.dtype, where);
  const int count = mpi_count(buffer.numel(), "buffer", where);
  void* data = buffer_of(buffer, "buffer", where);
  return issue(where.op, [buffer, data, count, mpi_op, context = describe(where)](MPI_Comm comm) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count, mpi_datatype(buffer.dtype), mpi_op, comm),
              "MPI_Allreduce", context);
  });
}

std::unique_ptr<Work> MpiCommunicator::all_gather(Stream&, const Tensor& input, Tensor& output) {
  const CallSite where{"all_gather", name_, size_};
  check_same_dtype(input, output, where);
  check_multiple(output.numel(), "output", size_, input.numel(), "input", where);
  const int count = mpi_count(input.numel(), "input", where);
  mpi_count(output.numel(), "output", where);
  // In place: the input already sits in this rank's block of the output.
  const bool in_place = input.has_data() && output.has_data() &&
                        input.storage->data() == output.storage->data() &&
                        input.offset == output.offset + rank_ * input.numel();
  if (!in_place) check_disjoint(input, output, where);
  const void* send = in_place ? MPI_IN_PLACE : buffer_of(input, "input", where);
  void* recv = buffer_of(output, "output", where);
  return issue(where.op, [input, output, send, recv, count,
                          context = describe(where)](MPI_Comm comm) {
    const MPI_Datatype type = mpi_datatype(input.dtype);
    check_mpi(MPI_Allgather(send, count, type, recv, count, type, comm), "MPI_Allgather", context);
  });
}

std::unique_ptr<Work> MpiCommunicator::reduce_scatter(Stream&, const Tensor& input, Tensor& output,
                                                      ReduceOp op) {
  const CallSite where{"reduce_scatter", name_, size_};
  check_same_dtype(input, output, where);
  const MPI_Op mpi_op = mpi_reduce_op(op, input.dtype, where);
  check_multiple(input.numel(), "input", size_, output.numel(), "output", where);
  check_disjoint(input, output, where);
  const int count = mpi_count(output.numel(), "output", where);
  mpi_count(input.numel(), "input", where);
  const void* send = buffer_of(input, "input", where);
  void* recv = buffer_of(output, "output", where);
  return issue(where.op, [input, output, send, recv, count, mpi_op,
                          context = describe(where)](MPI_Comm comm) {
    check_mpi(MPI_Reduce_scatter_block(send, recv, count, mpi_datatype(input.dtype), mpi_op, comm),
              "MPI_Reduce_scatter_block", context);
  });
}

std::unique_ptr<Work> MpiCommunicator::broadcast(Stream&, Tensor& buffer, int root) {
  const CallSite where{"broadcast", name_, size_};
  if (root < 0 || root >= size_)
    throw std::invalid_argument(describe(where) + ": root " + std::to_string(root) +
                                " is outside the group's ranks [0, " + std::to_string(size_) + ")");
  const int count = mpi_count(buffer.numel(), "buffer", where);
  void* data = buffer_of(buffer, "buffer", where);
  return issue(where.op, [buffer, data, count, root, context = describe(where)](MPI_Comm comm) {
    check_mpi(MPI_Bcast(data, count, mpi_datatype(buffer.dtype), root, comm), "MPI_Bcast", context);
  });
}

std::unique_ptr<Work> MpiCommunicator::all_to_all(Stream&, const Tensor& input, Tensor& output) {
  const CallSite where{"all_to_all", name_, size_};
  check_same_dtype(input, output, where);
  if (input.numel() != output.numel() || input.numel() % size_ != 0)
    throw std::invalid_argument(describe(where) + ": input holds " + std::to_string(input.numel()) +
                                " elements and output " + std::to_string(output.numel()) +
                                "; both must hold the same number, a multiple of the group size " +
                                std::to_string(size_));
  check_disjoint(input, output, where);
  const int block = mpi_count(input.numel() / size_, "input block", where);
  mpi_count(input.numel(), "input", where);
  const void* send = buffer_of(input, "input", where);
  void* recv = buffer_of(output, "output", where);
  return issue(where.op, [input, output, send, recv, block,
                          context = describe(where)](MPI_Comm comm) {
    const MPI_Datatype type = mpi_datatype(input.dtype);
    check_mpi(MPI_Alltoall(send, block, type, recv, block, type, comm), "MPI_Alltoall", context);
  });
}

namespace {

// MPI's int counts and displacements of one side of an all_to_all_v.
struct Splits {
  std::vector<int> counts;
  std::vector<int> displs;
};

Splits mpi_splits(std::span<const std::int64_t> counts, std::string_view what,
                  const CallSite& where) {
  Splits s;
  std::int64_t at = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    const std::string name = std::string(what) + "[" + std::to_string(p) + "]";
    s.counts.push_back(mpi_count(counts[p], name, where));
    s.displs.push_back(mpi_count(at, "offset of " + name, where));
    at += counts[p];
  }
  return s;
}

}  // namespace

std::unique_ptr<Work> MpiCommunicator::all_to_all_v(Stream&, const Tensor& input,
                                                    std::span<const std::int64_t> send_counts,
                                                    Tensor& output,
                                                    std::span<const std::int64_t> recv_counts) {
  const CallSite where{"all_to_all_v", name_, size_};
  check_same_dtype(input, output, where);
  check_split_counts(send_counts, "send_counts", input.numel(), "input", size_, where);
  check_split_counts(recv_counts, "recv_counts", output.numel(), "output", size_, where);
  check_disjoint(input, output, where);
  Splits send = mpi_splits(send_counts, "send_counts", where);
  Splits recv = mpi_splits(recv_counts, "recv_counts", where);
  const void* send_buffer = buffer_of(input, "input", where);
  void* recv_buffer = buffer_of(output, "output", where);
  return issue(where.op, [input, output, send_buffer, recv_buffer, send = std::move(send),
                          recv = std::move(recv), context = describe(where)](MPI_Comm comm) {
    const MPI_Datatype type = mpi_datatype(input.dtype);
    check_mpi(MPI_Alltoallv(send_buffer, send.counts.data(), send.displs.data(), type, recv_buffer,
                            recv.counts.data(), recv.displs.data(), type, comm),
              "MPI_Alltoallv", context);
  });
}

namespace {

// One p2p operation as the communication thread posts it.
struct PostedP2P {
  P2POp::Kind kind;
  Tensor tensor;  // keeps the storage alive
  void* data;
  int count;
  int peer;
};

void run_batch(const std::vector<PostedP2P>& batch, MPI_Comm comm, const std::string& context) {
  constexpr int kTag = 0;  // same-pair messages match in posting order (MPI non-overtaking)
  std::vector<MPI_Request> requests(batch.size(), MPI_REQUEST_NULL);
  // Receives first, so a send to this rank inside the batch finds its match posted.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const PostedP2P& p = batch[i];
      const MPI_Datatype type = mpi_datatype(p.tensor.dtype);
      if (pass == 0 && p.kind == P2POp::Kind::recv)
        check_mpi(MPI_Irecv(p.data, p.count, type, p.peer, kTag, comm, &requests[i]), "MPI_Irecv",
                  context);
      if (pass == 1 && p.kind == P2POp::Kind::send)
        check_mpi(MPI_Isend(p.data, p.count, type, p.peer, kTag, comm, &requests[i]), "MPI_Isend",
                  context);
    }
  }
  std::vector<MPI_Status> statuses(batch.size());
  check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), statuses.data()),
            "MPI_Waitall", context);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].kind != P2POp::Kind::recv) continue;
    int received = 0;
    MPI_Get_count(&statuses[i], mpi_datatype(batch[i].tensor.dtype), &received);
    if (received != batch[i].count)
      throw std::invalid_argument(context + ": op " + std::to_string(i) + " received " +
                                  std::to_string(received) + " elements from peer " +
                                  std::to_string(batch[i].peer) + ", its tensor holds " +
                                  std::to_string(batch[i].count));
  }
}

}  // namespace

std::unique_ptr<Work> MpiCommunicator::batch_p2p(Stream&, std::span<const P2POp> ops) {
  const CallSite where{"batch_p2p", name_, size_};
  std::vector<PostedP2P> batch;
  batch.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const std::string what =
        "op " + std::to_string(i) + (op.kind == P2POp::Kind::send ? " (send)" : " (recv)");
    if (op.peer < 0 || op.peer >= size_)
      throw std::invalid_argument(describe(where) + ": " + what + " names peer " +
                                  std::to_string(op.peer) + ", outside the group's ranks [0, " +
                                  std::to_string(size_) + ")");
    batch.push_back({op.kind, op.tensor, buffer_of(op.tensor, what, where),
                     mpi_count(op.tensor.numel(), what, where), op.peer});
  }
  return issue(where.op, [batch = std::move(batch), context = describe(where)](MPI_Comm comm) {
    run_batch(batch, comm, context);
  });
}

void MpiCommunicator::all_gather_counts(Stream&, std::span<const std::int64_t> mine,
                                        std::span<std::int64_t> all) {
  const CallSite where{"all_gather_counts", name_, size_};
  collective_checks::check_gathered_counts(mine.size(), all.size(), size_, where);
  const int n = mpi_count(static_cast<std::int64_t>(mine.size()), "counts", where);
  issue(where.op, [mine, all, n, context = describe(where)](MPI_Comm comm) {
    check_mpi(MPI_Allgather(mine.data(), n, MPI_INT64_T, all.data(), n, MPI_INT64_T, comm),
              "MPI_Allgather", context);
  })->wait();
}

void MpiCommunicator::barrier() {
  issue("barrier", [context = describe({"barrier", name_, size_})](MPI_Comm comm) {
    check_mpi(MPI_Barrier(comm), "MPI_Barrier", context);
  })->wait();
}

}  // namespace tandem
