// DType and ReduceOp as MPI sees them, and the checks every MPI call site shares.
#include "exec/mpi/mpi_types.hpp"

#include <climits>

namespace tandem::mpi_detail {

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::fp32:
      return MPI_FLOAT;
    case DType::int32:
      return MPI_INT32_T;
    case DType::int64:
      return MPI_INT64_T;
    case DType::bf16:
    case DType::fp16:
      return MPI_UINT16_T;
  }
  throw std::logic_error("mpi_datatype: unknown dtype");
}

MPI_Op mpi_reduce_op(ReduceOp op, DType t, const CallSite& where) {
  if (t == DType::bf16 || t == DType::fp16)
    throw std::invalid_argument(describe(where) + ": cannot reduce " + std::string(dtype_name(t)) +
                                " tensors (MPI has no 16-bit float reduction); reduce in fp32");
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  throw std::logic_error("mpi_reduce_op: unknown ReduceOp");
}

int mpi_count(std::int64_t n, std::string_view what, const CallSite& where) {
  if (n > INT_MAX)
    throw std::invalid_argument(describe(where) + ": " + std::string(what) + " holds " +
                                std::to_string(n) + " elements, more than MPI's int count " +
                                std::to_string(INT_MAX));
  return static_cast<int>(n);
}

void* buffer_of(const Tensor& t, std::string_view what, const CallSite& where) {
  if (t.numel() == 0) return t.has_data() ? t.storage->data() : nullptr;
  if (!t.has_data())
    throw std::invalid_argument(describe(where) + ": " + std::string(what) + " " +
                                t.shape.to_string() + " has no storage (a phantom tensor)");
  return static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype).value;
}

void check_mpi(int code, std::string_view call, std::string_view context) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw MpiError(std::string(call) + " failed in " + std::string(context) + ": " +
                 std::string(text, static_cast<std::size_t>(length)));
}

}  // namespace tandem::mpi_detail
