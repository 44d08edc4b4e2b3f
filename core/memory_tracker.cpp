#include "core/memory_tracker.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {

void MemoryTracker::on_allocate(Bytes b) {
  std::lock_guard lock(mutex_);
  live_ += b;
  peak_ = std::max(peak_, live_);
}

void MemoryTracker::on_release(Bytes b) {
  std::lock_guard lock(mutex_);
  if (b > live_)
    throw std::logic_error("MemoryTracker: releasing " + std::to_string(b.value) +
                           " bytes with only " + std::to_string(live_.value) + " live");
  live_ -= b;
}

Bytes MemoryTracker::live() const {
  std::lock_guard lock(mutex_);
  return live_;
}

Bytes MemoryTracker::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

void MemoryTracker::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = live_;
}

}  // namespace tandem
