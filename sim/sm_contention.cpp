#include "sim/sm_contention.hpp"

#include <algorithm>

namespace tandem::sim {

int nccl_blocks(int channels, bool across_nodes, int compute_capability, bool nvls) {
  if (nvls) return channels;
  int blocks = 2 * channels;
  if (across_nodes && compute_capability >= 90 && blocks < 16) blocks *= 2;
  return blocks;
}

void SmContention::owe(double overlap, double held) {
  const double owed = overlap * held / (sm_count_ - held);
  pending_ += owed;
  total_ += owed;
}

void SmContention::compute_ran(double start, double end) {
  if (end <= start) return;
  for (const Window& w : windows_)
    owe(std::max(0.0, std::min(end, w.end) - std::max(start, w.start)), w.held);
  // Later spans start after this one: a window that ends before it is done with.
  while (!windows_.empty() && windows_.front().end <= start) windows_.pop_front();
  if (!busy_.empty() && start <= busy_.back().second) {
    busy_.back().second = std::max(busy_.back().second, end);
  } else {
    busy_.emplace_back(start, end);
  }
  // A collective never reaches more than a few thousand spans back; keep a bound.
  constexpr std::size_t kKept = 8192;
  if (busy_.size() > kKept) busy_.erase(busy_.begin(), busy_.begin() + kKept / 2);
}

void SmContention::collective_ran(double start, double end, int blocks) {
  if (sm_count_ <= 1 || blocks <= 0 || end <= start) return;
  // NCCL never holds more than half the GPU here: its channel counts stay far below.
  const double held = std::min(blocks, sm_count_ / 2);
  double overlap = 0;
  for (auto it = busy_.rbegin(); it != busy_.rend() && it->second > start; ++it)
    overlap += std::max(0.0, std::min(end, it->second) - std::max(start, it->first));
  owe(overlap, held);
  // Spans told later start after the last one told.
  if (busy_.empty() || end > busy_.back().second) windows_.push_back({start, end, held});
}

double SmContention::take_delay() {
  const double d = pending_;
  pending_ = 0;
  return d;
}

}  // namespace tandem::sim
