// MPI's view of tandem's typed buffers: the MPI datatype of each DType, the MPI reduction of
// each ReduceOp, element counts as MPI's int, buffer addresses, and MPI error codes turned
// into exceptions. Every message names the call and the group ("all_gather on group tp"),
// so one rank's log line says which collective failed without a stack trace.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/communicator.hpp"
#include "core/tensor.hpp"
#include "exec/mpi/collective_checks.hpp"

namespace tandem {

// An MPI call returned an error (our communicators use MPI_ERRORS_RETURN).
class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace mpi_detail {

using collective_checks::CallSite;
using collective_checks::describe;
using collective_checks::overlaps;

// The MPI datatype elements of `t` travel as. bf16 and fp16 move as 16-bit integers: data
// movement needs only their size; reductions are refused by mpi_reduce_op.
MPI_Datatype mpi_datatype(DType t);

// Throws std::invalid_argument for bf16 and fp16: MPI has no reduction for them, and a
// silently wrong sum is worse than an error (reduce in fp32, as Megatron's main grads do).
MPI_Op mpi_reduce_op(ReduceOp op, DType t, const CallSite& where);

// MPI counts are int: throws std::invalid_argument naming `what` when n does not fit.
int mpi_count(std::int64_t n, std::string_view what, const CallSite& where);

// The address of t's first element; throws std::invalid_argument for a phantom tensor that
// holds elements (a zero-element tensor may have no storage).
void* buffer_of(const Tensor& t, std::string_view what, const CallSite& where);

// Throws MpiError "<call> failed in <context>: <MPI's error string>" unless code is
// MPI_SUCCESS. `context` is describe(where), computed at issue time: the call may run on the
// communication thread after the CallSite's strings are gone.
void check_mpi(int code, std::string_view call, std::string_view context);

}  // namespace mpi_detail
}  // namespace tandem
