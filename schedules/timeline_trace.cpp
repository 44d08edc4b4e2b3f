#include "schedules/timeline_trace.hpp"

#include <string>

namespace tandem {

Trace timeline_to_trace(const Timeline& tl) {
  Trace trace;
  const auto& s = tl.schedule;
  const bool chunks = s.spec.vpp > 1;
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    trace.name_process(r, "pp rank " + std::to_string(r), r);
    trace.name_thread(r, trace_thread::compute, "compute", 0);
    trace.name_thread(r, trace_thread::pp_comm, "pp send/recv", 1);
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const auto& op = s.ranks[r][i];
      const auto& t = tl.ranks[r][i];
      TraceSlice slice{describe(op, chunks),    "",      r,
                       trace_thread::compute,   t.start, t.end - t.start,
                       nlohmann::json::object()};
      if (op.is_compute()) {
        // A split backward's W is a class of its own ("weight"); its B stays "backward".
        slice.category = op.type == OpType::forward    ? "forward"
                         : op.type == OpType::backward ? "backward"
                                                       : "weight";
        slice.args = {{"microbatch", op.microbatch}, {"chunk", op.chunk}};
      } else {
        slice.category = op.type == OpType::p2p_wait ? "p2p wait" : "p2p";
        slice.tid = trace_thread::pp_comm;
        auto transfers = nlohmann::json::array();
        for (const auto& tr : op.transfers)
          transfers.push_back({{"direction", p2p_direction_name(tr.direction)},
                               {"microbatch", tr.microbatch},
                               {"chunk", tr.chunk},
                               {"peer", tr.peer}});
        slice.args = {{"transfers", transfers}};
      }
      trace.add_slice(std::move(slice));
    }
  }
  // One arrow per send, from the sending call to the receiving one.
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i)
      for (std::size_t k = 0; k < s.ranks[r][i].transfers.size(); ++k) {
        const auto& tr = s.ranks[r][i].transfers[k];
        if (tr.direction != P2PDirection::send_next && tr.direction != P2PDirection::send_prev)
          continue;
        const auto& peer = tl.peers[r][i][k];
        const std::string name =
            std::string(tr.direction == P2PDirection::send_next ? "act " : "grad ") +
            std::to_string(tr.microbatch) + (chunks ? "." + std::to_string(tr.chunk) : "");
        trace.add_flow(name, r, trace_thread::pp_comm, tl.ranks[r][i].start, peer.rank,
                       trace_thread::pp_comm, tl.ranks[peer.rank][peer.op].end);
      }
  trace.set_metadata("producer", "tandem schedule (idealised timeline)");
  trace.set_metadata("schedule", std::string(schedule_kind_name(s.spec.kind)));
  return trace;
}

}  // namespace tandem
