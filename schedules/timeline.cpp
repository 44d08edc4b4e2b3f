// Transfer pairing and the playback that times a schedule (see timeline.hpp).
#include "schedules/timeline.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.hpp"

namespace tandem {
namespace {

bool is_send(P2PDirection d) {
  return d == P2PDirection::send_next || d == P2PDirection::send_prev;
}
bool is_activation(P2PDirection d) {
  return d == P2PDirection::send_next || d == P2PDirection::recv_prev;
}

struct Endpoint {
  int rank, op, transfer;
};

// (sender, receiver, activation?) → queued endpoints in program order.
using ChannelKey = std::tuple<int, int, bool>;

std::string where(const Schedule& s, int rank, int op) {
  const auto& o = s.ranks[rank][op];
  return "stage " + std::to_string(rank) + " op " + std::to_string(op) + " (" +
         describe(o, s.spec.vpp > 1) + ")";
}

// The chunk a receiver consumes, given the sender's chunk: the same chunk to a
// neighbour, the next chunk (activations) or previous chunk (gradients) around the ring.
int receiver_chunk(const Schedule& s, int sender, const Transfer& t) {
  const bool wraps = t.direction == P2PDirection::send_next ? sender == s.spec.pp - 1 : sender == 0;
  if (!wraps) return t.chunk;
  return t.direction == P2PDirection::send_next ? t.chunk + 1 : t.chunk - 1;
}

}  // namespace

std::vector<std::vector<std::vector<TransferPeer>>> pair_transfers(const Schedule& s) {
  std::map<ChannelKey, std::vector<Endpoint>> sends, recvs;
  std::vector<std::vector<std::vector<TransferPeer>>> peers(s.ranks.size());
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    peers[r].resize(s.ranks[r].size());
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const auto& op = s.ranks[r][i];
      peers[r][i].resize(op.transfers.size());
      for (int t = 0; t < static_cast<int>(op.transfers.size()); ++t) {
        const auto& tr = op.transfers[t];
        const bool act = is_activation(tr.direction);
        if (is_send(tr.direction))
          sends[{r, tr.peer, act}].push_back({r, i, t});
        else
          recvs[{tr.peer, r, act}].push_back({r, i, t});
      }
    }
  }
  auto describe_channel = [](const ChannelKey& k) {
    return std::string(std::get<2>(k) ? "activations" : "gradients") + " from stage " +
           std::to_string(std::get<0>(k)) + " to stage " + std::to_string(std::get<1>(k));
  };
  for (const auto& [key, ss] : sends) {
    const auto& rs = recvs[key];
    if (ss.size() != rs.size())
      throw ScheduleError(describe_channel(key) + ": " + std::to_string(ss.size()) + " sends but " +
                          std::to_string(rs.size()) + " receives");
    for (std::size_t k = 0; k < ss.size(); ++k) {
      const auto& snd = s.ranks[ss[k].rank][ss[k].op].transfers[ss[k].transfer];
      const auto& rcv = s.ranks[rs[k].rank][rs[k].op].transfers[rs[k].transfer];
      if (snd.microbatch != rcv.microbatch || receiver_chunk(s, ss[k].rank, snd) != rcv.chunk)
        throw ScheduleError(describe_channel(key) + ": transfer " + std::to_string(k) +
                            " sends microbatch " + std::to_string(snd.microbatch) + " chunk " +
                            std::to_string(snd.chunk) + " (" + where(s, ss[k].rank, ss[k].op) +
                            ") but the receiver expects microbatch " +
                            std::to_string(rcv.microbatch) + " chunk " + std::to_string(rcv.chunk) +
                            " (" + where(s, rs[k].rank, rs[k].op) + ")");
      peers[ss[k].rank][ss[k].op][ss[k].transfer] = {rs[k].rank, rs[k].op, rs[k].transfer};
      peers[rs[k].rank][rs[k].op][rs[k].transfer] = {ss[k].rank, ss[k].op, ss[k].transfer};
    }
  }
  for (const auto& [key, rs] : recvs)
    if (!rs.empty() && !sends.count(key))
      throw ScheduleError(describe_channel(key) + ": " + std::to_string(rs.size()) +
                          " receives but no sends");
  return peers;
}

Timeline make_timeline(const Schedule& s, const IdealCosts& costs) {
  Timeline tl{s, costs, {}, pair_transfers(s), Seconds(0)};
  const int n = static_cast<int>(s.ranks.size());
  tl.ranks.resize(n);
  for (int r = 0; r < n; ++r) tl.ranks[r].resize(s.ranks[r].size());
  std::vector<int> next(n, 0);  // index of the op each stage is at
  std::vector<Seconds> clock(n, Seconds(0));
  // Per stage, the op index of the last overlapped post of each call (its p2p_wait's).
  std::vector<std::map<P2PCall, int>> last_posted(n);
  // Per stage, the (microbatch, chunk) whose backward is split (a W follows).
  std::vector<std::set<std::pair<int, int>>> split(n);
  for (int r = 0; r < n; ++r)
    for (const auto& op : s.ranks[r])
      if (op.type == OpType::weight) split[r].insert({op.microbatch, op.chunk});
  auto compute_cost = [&](int r, const ScheduleOp& op) {
    switch (op.type) {
      case OpType::forward:
        return costs.forward;
      case OpType::weight:
        return costs.backward * costs.weight_fraction;
      default:
        return split[r].count({op.microbatch, op.chunk})
                   ? costs.backward * (1.0 - costs.weight_fraction)
                   : costs.backward;
    }
  };

  // An op is posted once its stage reaches it; its start is then final.
  auto posted = [&](const TransferPeer& p) { return next[p.rank] >= p.op; };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      while (next[r] < static_cast<int>(s.ranks[r].size())) {
        const int i = next[r];
        const auto& op = s.ranks[r][i];
        auto& timed = tl.ranks[r][i];
        timed.start = clock[r];
        // A call's transfers end p2p after both ends posted them.
        auto transfers_end = [&](int at) -> std::optional<Seconds> {
          const auto& ps = tl.peers[r][at];
          if (!std::all_of(ps.begin(), ps.end(), posted)) return std::nullopt;
          const Seconds from = tl.ranks[r][at].start;
          Seconds end = from;
          for (const auto& p : ps)
            end = std::max(end, std::max(from, tl.ranks[p.rank][p.op].start) + costs.p2p);
          return end;
        };
        if (op.is_compute()) {
          timed.end = timed.start + compute_cost(r, op);
        } else if (op.type == OpType::p2p && op.overlapped) {
          timed.end = timed.start;  // posted; its wait finds when it ends
          last_posted[r][op.call] = i;
        } else if (op.type == OpType::p2p_wait) {
          const auto it = last_posted[r].find(op.call);
          if (it == last_posted[r].end())
            throw ScheduleError(where(s, r, i) + " waits for a call that was never posted");
          const auto end = transfers_end(it->second);
          if (!end) break;
          tl.ranks[r][it->second].end = *end;
          timed.end = std::max(timed.start, *end);
        } else {
          const auto end = transfers_end(i);
          if (!end) break;
          timed.end = *end;
        }
        clock[r] = timed.end;
        ++next[r];
        progress = true;
      }
    }
  }
  std::ostringstream stuck;
  for (int r = 0; r < n; ++r)
    if (next[r] < static_cast<int>(s.ranks[r].size())) stuck << "\n  " << where(s, r, next[r]);
  if (!stuck.str().empty())
    throw ScheduleError("schedule deadlocks; stages blocked at:" + stuck.str());
  for (int r = 0; r < n; ++r) tl.makespan = std::max(tl.makespan, clock[r]);
  return tl;
}

double Timeline::bubble_fraction(int rank) const {
  if (makespan.value <= 0) return 0.0;
  Seconds busy(0);
  const auto& ops = schedule.ranks[rank];
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].is_compute()) busy += ranks[rank][i].end - ranks[rank][i].start;
  return 1.0 - busy / makespan;
}

double Timeline::bubble_fraction() const {
  double sum = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) sum += bubble_fraction(r);
  return ranks.empty() ? 0.0 : sum / static_cast<double>(ranks.size());
}

}  // namespace tandem
