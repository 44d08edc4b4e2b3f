// Hooks on the training step's layer boundaries, for effects that are not the step's own: a
// binding may hang its own instrumentation on them. The step calls them and does not know
// what they do; without an observer nothing happens.
#pragma once

#include "core/device.hpp"

namespace tandem {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // At the start of each transformer layer pass: forward, recomputed forward, backward.
  virtual void layer_pass(Stream& /*s*/) {}
  // Before the output layer's forward and after its backward (the last stage's head).
  virtual void around_output_layer(Stream& /*s*/) {}
};

}  // namespace tandem
