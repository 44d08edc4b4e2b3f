// The idealised timeline as a trace in tandem's Chrome schema (core/trace.hpp): a process
// per pipeline stage, forward/backward slices on the compute thread, p2p calls on the
// pp send/recv thread, and a flow arrow from every send to its receive.
#pragma once

#include "core/trace.hpp"
#include "schedules/timeline.hpp"

namespace tandem {

Trace timeline_to_trace(const Timeline& timeline);

}  // namespace tandem
