#include "sim/sim_world.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace tandem::sim {

SimWorld::SimWorld(std::vector<simgrid::s4u::Host*> hosts, std::vector<RankCoordinates> coords,
                   ParallelSizes sizes, SimMode mode)
    : hosts_(std::move(hosts)), coords_(std::move(coords)), sizes_(sizes), mode_(mode) {
  if (coords_.size() != hosts_.size())
    throw std::invalid_argument("SimWorld: " + std::to_string(hosts_.size()) + " hosts for " +
                                std::to_string(coords_.size()) + " ranks");
  present_.resize(hosts_.size());
  rank_of_.assign(hosts_.size(), -1);
  for (std::size_t r = 0; r < coords_.size(); ++r) {
    const auto& c = coords_[r];
    rank_of_.at(static_cast<std::size_t>(
        ((c.pp * sizes_.dp + c.dp) * sizes_.cp + c.cp) * sizes_.tp + c.tp)) = static_cast<int>(r);
    present_[r] = mode_ == SimMode::full || (c.tp == 0 && c.dp == 0 && c.cp == 0);
    if (present_[r]) present_ranks_.push_back(static_cast<int>(r));
  }
}

int SimWorld::count_present(const std::vector<int>& ranks) const {
  return static_cast<int>(
      std::count_if(ranks.begin(), ranks.end(), [&](int r) { return present(r); }));
}

int SimWorld::translate(int rank, int dtp, int ddp) const {
  const auto& c = coords_.at(static_cast<std::size_t>(rank));
  const int dp = (c.dp + ddp) % sizes_.dp, tp = (c.tp + dtp) % sizes_.tp;
  return rank_of_[static_cast<std::size_t>(
      ((c.pp * sizes_.dp + dp) * sizes_.cp + c.cp) * sizes_.tp + tp)];
}

const SimWorld::Route& SimWorld::route(int src, int dst) {
  auto it = routes_.find({src, dst});
  if (it != routes_.end()) return it->second;
  Route r;
  host(src)->route_to(host(dst), r.links, &r.latency);
  return routes_.emplace(std::make_pair(src, dst), std::move(r)).first->second;
}

double SimWorld::latency(int src, int dst) {
  return route(src, dst).latency;
}

std::vector<Flow> SimWorld::with_images(const std::vector<Flow>& flows) {
  if (mode_ == SimMode::full) return flows;
  // The group's own flows all stay: a ring is as slow as its slowest hop, whichever rank
  // sends it. Images of the group (the same operation of the tp and dp peers' groups) stay
  // when they share a link with one of those flows, since only then can they slow it.
  std::set<std::pair<int, int>> seen;
  std::set<simgrid::s4u::Link*> own_links;
  std::set<int> own_nodes;
  std::vector<Flow> kept;
  for (const auto& f : flows) {
    if (!seen.insert({f.src, f.dst}).second) continue;
    kept.push_back(f);
    if (!node_of_.empty()) {
      own_nodes.insert(node_of_[static_cast<std::size_t>(f.src)]);
      own_nodes.insert(node_of_[static_cast<std::size_t>(f.dst)]);
    }
    for (auto* l : route(f.src, f.dst).links)
      if (!nonblocking_ || !nonblocking_(l)) own_links.insert(l);
  }
  for (int dtp = 0; dtp < sizes_.tp; ++dtp)
    for (int ddp = 0; ddp < sizes_.dp; ++ddp) {
      if (dtp == 0 && ddp == 0) continue;
      for (const auto& f : flows) {
        const Flow g{translate(f.src, dtp, ddp), translate(f.dst, dtp, ddp), f.fraction};
        if (seen.count({g.src, g.dst})) continue;
        if (!node_of_.empty() && !own_nodes.count(node_of_[static_cast<std::size_t>(g.src)]) &&
            !own_nodes.count(node_of_[static_cast<std::size_t>(g.dst)]))
          continue;
        const auto& links = route(g.src, g.dst).links;
        if (std::any_of(links.begin(), links.end(),
                        [&](auto* l) { return own_links.count(l) > 0; })) {
          seen.insert({g.src, g.dst});
          kept.push_back(g);
        }
      }
    }
  return kept;
}

std::shared_ptr<Rendezvous> SimWorld::rendezvous(const std::string& key, int expected) {
  auto it = rendezvous_.find(key);
  if (it != rendezvous_.end()) return it->second;
  // Making the s4u mutex and condition variable is a simcall, during which other actors
  // run and may create the same rendezvous: build first, then look again.
  auto fresh = std::make_shared<Rendezvous>();
  auto& slot = rendezvous_[key];
  if (!slot) {
    slot = std::move(fresh);
    slot->expected = expected;
  }
  return slot;
}

void SimWorld::forget(const std::string& key) {
  rendezvous_.erase(key);
}

void SimWorld::fail(int rank, std::exception_ptr error) {
  if (aborted()) return;  // the first error is the one reported
  failure_ = std::move(error);
  failed_rank_ = rank;
  // Notifying is a simcall during which other actors may run and add rendezvous: copy.
  std::vector<std::shared_ptr<Rendezvous>> open;
  for (const auto& [key, rv] : rendezvous_) open.push_back(rv);
  for (const auto& rv : open) rv->cv->notify_all();
  for (const auto& cv : watched_) cv->notify_all();
}

void SimWorld::join_comm_actors(int rank) {
  // Copied: joining is a simcall, during which other ranks' actors may be added.
  const auto actors = comm_actors_[rank];
  for (const auto& actor : actors) actor->join();
}

}  // namespace tandem::sim
