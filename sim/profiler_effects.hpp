// The measured-run adapter's side of the step: what a profiler around a measured run did to
// it, priced on the sim binding through the step's layer hooks (model/step_observer.hpp),
// so the training step itself knows nothing of profilers. A scenario asks for these with
// TrainingConfig's host_sync_per_layer, host_layer_timestamps and host_sync_output_layer;
// `tandem validate` sets them for vTrain's rows (tools/measured_runs.cpp), whose trainer
// flushed CUPTI's buffers at each layer's start and end and synchronized around the output
// layer.
#pragma once

#include <array>
#include <memory>

#include "core/scenario.hpp"
#include "core/trace.hpp"
#include "model/step_observer.hpp"
#include "sim/sim_device.hpp"
#include "train/run_trace.hpp"

namespace tandem::sim {

class ProfilerEffects : public StepObserver {
 public:
  ProfilerEffects(const TrainingConfig& t, SimDevice& device)
      : device_(device),
        sync_per_layer_(t.host_sync_per_layer),
        timestamps_(t.host_layer_timestamps),
        sync_output_layer_(t.host_sync_output_layer) {}

  // The host waits for the stream (host_sync_per_layer), then takes a timestamp: host time,
  // no sync (host_layer_timestamps).
  void layer_pass(Stream& s) override {
    if (sync_per_layer_) s.synchronize();
    if (timestamps_) device_.host_layer_timestamp();
  }
  // The host waits for the stream before the output layer's forward and after its backward.
  void around_output_layer(Stream& s) override {
    if (sync_output_layer_) s.synchronize();
  }

 private:
  SimDevice& device_;
  bool sync_per_layer_, timestamps_, sync_output_layer_;
};

// The sim binding's observer of every step: how ops are issued (a library call's ops cost
// the host a C++ launch each after the first: SimDevice::begin_library_call) and, when the
// scenario asks for them, a profiler's effects.
class SimStepObserver : public StepObserver {
 public:
  SimStepObserver(SimDevice& device, std::unique_ptr<ProfilerEffects> profiler)
      : device_(device), profiler_(std::move(profiler)) {}
  void layer_pass(Stream& s) override {
    if (profiler_) profiler_->layer_pass(s);
  }
  void around_output_layer(Stream& s) override {
    if (profiler_) profiler_->around_output_layer(s);
  }
  void begin_library_call(Stream& /*s*/) override { device_.begin_library_call(); }
  void end_library_call(Stream& /*s*/) override { device_.end_library_call(); }
  void begin_split_gemm(Stream& /*s*/) override { device_.begin_split_gemm(); }
  void end_split_gemm(Stream& /*s*/) override { device_.end_split_gemm(); }
  // A region's compute is booked apart (SimDevice::region_seconds) and, with a trace, shown
  // as a slice of its own on the compute thread, inside the pass that runs it.
  void begin_region(Stream& s, std::string_view name) override {
    device_.begin_region(std::string(name));
    region_start_[task()] = device_.trace_time(s);
  }
  void end_region(Stream& s, std::string_view name) override {
    device_.end_region();
    if (trace_)
      trace_->slice(std::string(name), std::string(name),
                    trace_thread::compute_of_task(static_cast<int>(task())), region_start_[task()],
                    device_.trace_time(s));
  }
  void set_trace(RunTrace* trace) { trace_ = trace; }

 private:
  SimDevice& device_;
  std::unique_ptr<ProfilerEffects> profiler_;
  RunTrace* trace_ = nullptr;
  std::size_t task() const { return static_cast<std::size_t>(device_.host_turns().current_task()); }
  std::array<RunTrace::Clock::time_point, 2> region_start_{};  // per host task
};

// The observer a scenario asks for, or null when it sets none of the three.
inline std::unique_ptr<ProfilerEffects> profiler_effects(const TrainingConfig& t,
                                                         SimDevice& device) {
  if (!t.host_sync_per_layer && !t.host_layer_timestamps && !t.host_sync_output_layer)
    return nullptr;
  return std::make_unique<ProfilerEffects>(t, device);
}

}  // namespace tandem::sim
