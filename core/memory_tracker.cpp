#include "core/memory_tracker.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {
namespace {

std::size_t index(MemoryUse use) {
  const auto i = static_cast<std::size_t>(use);
  if (i >= kMemoryUses) throw std::invalid_argument("MemoryTracker: unknown memory use");
  return i;
}

}  // namespace

std::string_view memory_use_name(MemoryUse use) {
  switch (use) {
    case MemoryUse::activations:
      return "activations";
    case MemoryUse::weights:
      return "weights";
    case MemoryUse::gradients:
      return "gradients";
    case MemoryUse::optimizer:
      return "optimizer";
    case MemoryUse::fp8:
      return "fp8";
    case MemoryUse::communication:
      return "communication";
  }
  return "unknown";
}

void MemoryTracker::on_allocate(Bytes b, MemoryUse use) {
  const std::size_t i = index(use);
  std::lock_guard lock(mutex_);
  live_ += b;
  live_by_use_[i] += b;
  if (live_ > peak_) {
    peak_ = live_;
    peak_by_use_ = live_by_use_;
  }
}

void MemoryTracker::on_release(Bytes b, MemoryUse use) {
  const std::size_t i = index(use);
  std::lock_guard lock(mutex_);
  if (b > live_by_use_[i])
    throw std::logic_error("MemoryTracker: releasing " + std::to_string(b.value) + " bytes of " +
                           std::string(memory_use_name(use)) + " with only " +
                           std::to_string(live_by_use_[i].value) + " live");
  live_ -= b;
  live_by_use_[i] -= b;
}

Bytes MemoryTracker::live() const {
  std::lock_guard lock(mutex_);
  return live_;
}

Bytes MemoryTracker::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

MemoryByUse MemoryTracker::peak_by_use() const {
  std::lock_guard lock(mutex_);
  return peak_by_use_;
}

MemoryByUse MemoryTracker::live_by_use() const {
  std::lock_guard lock(mutex_);
  return live_by_use_;
}

void MemoryTracker::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = live_;
  peak_by_use_ = live_by_use_;
}

}  // namespace tandem
