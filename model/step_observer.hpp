// Hooks on the training step's structure, for what a binding adds beyond the ops themselves:
// its own instrumentation, or the price of how the ops are issued. The step calls them and
// does not know what they do; without an observer nothing happens.
#pragma once

#include <string_view>

#include "core/device.hpp"

namespace tandem {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // At the start of each transformer layer pass: forward, recomputed forward, backward.
  virtual void layer_pass(Stream& /*s*/) {}
  // Before the output layer's forward and after its backward (the last stage's head).
  virtual void around_output_layer(Stream& /*s*/) {}
  // Around ops that one library call issues from its own C++ (Transformer Engine's
  // userbuffers overlap: the blocks of a GEMM and their ring steps), not one by one from
  // the framework.
  virtual void begin_library_call(Stream& /*s*/) {}
  virtual void end_library_call(Stream& /*s*/) {}
  // Around the blocks of one GEMM that a library splits and runs on several streams
  // (Transformer Engine's userbuffers overlap, model/tp_comm_overlap.hpp: a block per ring
  // step), so that one block's last wave of tiles runs beside the next block's first.
  virtual void begin_split_gemm(Stream& /*s*/) {}
  virtual void end_split_gemm(Stream& /*s*/) {}
  // Around a named part of the step that a binding may account for apart: "mtp", the
  // multi-token prediction block's forward and backward with its depths' output layer and
  // loss (model/gpt_chunk.cpp). Regions do not nest.
  virtual void begin_region(Stream& /*s*/, std::string_view /*name*/) {}
  virtual void end_region(Stream& /*s*/, std::string_view /*name*/) {}
};

}  // namespace tandem
