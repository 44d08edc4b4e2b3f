// One library call of the step: ops that a library issues from its own C++ inside one
// framework call — a Transformer Engine module (LayerNormLinear, Linear, DotProductAttention)
// under transformer_impl "transformer_engine", or the blocks and ring steps of a userbuffers
// GEMM (model/tp_comm_overlap.hpp). The step only marks the call (model/step_observer.hpp);
// what it costs is the binding's business (the simulator's host issue clock). Calls nest.
#pragma once

#include "model/tensor_parallel.hpp"

namespace tandem {

class LibraryCall {
 public:
  // `active` false: the ops are the framework's own, one call each (transformer_impl
  // "local"), and nothing is marked.
  explicit LibraryCall(ModelEnv& env, bool active = true)
      : env_(env), active_(active && env.observer != nullptr) {
    if (active_) env_.observer->begin_library_call(env_.stream);
  }
  ~LibraryCall() {
    if (active_) env_.observer->end_library_call(env_.stream);
  }
  LibraryCall(const LibraryCall&) = delete;
  LibraryCall& operator=(const LibraryCall&) = delete;

 private:
  ModelEnv& env_;
  bool active_;
};

// The blocks of one GEMM that a library splits and runs on several streams (Transformer
// Engine's userbuffers: model/tp_comm_overlap.hpp), marked for the binding
// (StepObserver::begin_split_gemm); nothing in the math changes.
class SplitGemm {
 public:
  explicit SplitGemm(ModelEnv& env) : env_(env) {
    if (env_.observer) env_.observer->begin_split_gemm(env_.stream);
  }
  ~SplitGemm() {
    if (env_.observer) env_.observer->end_split_gemm(env_.stream);
  }
  SplitGemm(const SplitGemm&) = delete;
  SplitGemm& operator=(const SplitGemm&) = delete;

 private:
  ModelEnv& env_;
};

}  // namespace tandem
