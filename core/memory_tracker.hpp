// Live and peak byte accounting shared by every allocator (cpu, cuda, sim). Because the
// three bindings count through this one type, the simulator's predicted high-water mark
// for a rank can equal the cpu binding's measured one to the byte.
#pragma once

#include <mutex>

#include "core/units.hpp"

namespace tandem {

class MemoryTracker {
 public:
  void on_allocate(Bytes b);
  void on_release(Bytes b);
  Bytes live() const;
  Bytes peak() const;
  void reset_peak();  // peak := live, e.g. at the start of an iteration

 private:
  mutable std::mutex mutex_;
  Bytes live_{0};
  Bytes peak_{0};
};

}  // namespace tandem
