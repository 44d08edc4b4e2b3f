// Megatron-LM's training and validation log lines, character for character, so that
// existing log parsers and dashboards read tandem's logs unchanged.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct IterationLog {
  std::int64_t iteration = 0;
  std::int64_t train_iters = 0;
  std::int64_t consumed_samples = 0;
  double elapsed_ms = 0;      // per iteration, averaged over the log interval
  double tflops_per_gpu = 0;  // Megatron's log formula (model/flops.hpp)
  double learning_rate = 0;
  std::int64_t global_batch_size = 0;
  double lm_loss = 0;
  double loss_scale = 1.0;
  // None when the logged step was skipped (loss scaling found an inf or a NaN): Megatron
  // then leaves the field out.
  std::optional<double> grad_norm = 0.0;
  std::int64_t skipped_iterations = 0;  // over the log interval
  std::int64_t nan_iterations = 0;
  // Multi-token prediction: "mtp_k loss" after the lm loss, one per depth (Megatron's
  // MTPLossLoggingHelper); empty without MTP.
  std::vector<double> mtp_losses{};
};

std::string format_iteration_log(const IterationLog& log, std::time_t now);
// The validation block: a dashed rule, the line, a dashed rule.
std::string format_validation_log(std::int64_t iteration, double lm_loss);

// What the run did, printed once at its end whatever the log interval (Megatron's
// "[after training is done]" line, with the iterations run, the last loss and the wall
// time of the loop). Its words keep clear of the iteration line's "lm loss: " and
// "iteration N/" that log parsers grep.
struct TrainingDone {
  std::int64_t iterations = 0;  // the iteration reached (a resumed run counts from its load)
  std::int64_t train_iters = 0;
  std::int64_t steps_run = 0;  // steps this process ran
  double last_loss = 0;        // of the last step run (when steps_run > 0)
  double elapsed_seconds = 0;  // wall time of the training loop
};
std::string format_training_done(const TrainingDone& done, std::time_t now);

}  // namespace tandem
