#include "train/megatron_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tandem {

namespace {

std::string datetime(std::time_t now) {
  char when[32];
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  return when;
}

}  // namespace

std::string format_iteration_log(const IterationLog& l, std::time_t now) {
  const std::string when = datetime(now);
  char head[512];
  std::snprintf(head, sizeof head,
                " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per "
                "iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f | learning rate: "
                "%.6E | global batch size: %5lld | lm loss: %.6E |",
                when.c_str(), static_cast<long long>(l.iteration),
                static_cast<long long>(l.train_iters), static_cast<long long>(l.consumed_samples),
                l.elapsed_ms, l.tflops_per_gpu, l.learning_rate,
                static_cast<long long>(l.global_batch_size), l.lm_loss);
  std::string line = head;
  // Megatron's total_loss_dict: the MTP depths' losses follow the lm loss.
  for (std::size_t k = 0; k < l.mtp_losses.size(); ++k) {
    char mtp[64];
    std::snprintf(mtp, sizeof mtp, " mtp_%zu loss: %.6E |", k + 1, l.mtp_losses[k]);
    line += mtp;
  }
  char scale[64], norm[64] = "", tail[160];
  std::snprintf(scale, sizeof scale, " loss scale: %.1f |", l.loss_scale);
  if (l.grad_norm) std::snprintf(norm, sizeof norm, " grad norm: %.3f |", *l.grad_norm);
  std::snprintf(
      tail, sizeof tail, " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
      static_cast<long long>(l.skipped_iterations), static_cast<long long>(l.nan_iterations));
  return line + scale + norm + tail;
}

std::string format_training_done(const TrainingDone& d, std::time_t now) {
  char loss[32] = "none (no step run)";
  if (d.steps_run > 0) std::snprintf(loss, sizeof loss, "%.6E", d.last_loss);
  char line[256];
  std::snprintf(line, sizeof line,
                " [after training is done] datetime: %s | iterations: %lld/%lld | steps run: "
                "%lld | last loss: %s | elapsed time (s): %.2f |",
                datetime(now).c_str(), static_cast<long long>(d.iterations),
                static_cast<long long>(d.train_iters), static_cast<long long>(d.steps_run), loss,
                d.elapsed_seconds);
  return line;
}

std::string format_validation_log(std::int64_t iteration, double lm_loss) {
  char line[256];
  const double ppl = std::exp(std::min(20.0, lm_loss));  // Megatron caps the exponent at 20
  const int n = std::snprintf(line, sizeof line,
                              " validation loss at iteration %lld | lm loss value: %.6E | lm loss "
                              "PPL: %.6E | ",
                              static_cast<long long>(iteration), lm_loss, ppl);
  const std::string rule(static_cast<std::size_t>(n) + 1, '-');
  return rule + "\n" + line + "\n" + rule;
}

}  // namespace tandem
