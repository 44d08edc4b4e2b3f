// tandem's command line: builds it, runs the chosen subcommand, and turns library errors
// into messages and exit codes (2 for bad input, 1 for anything else). main() is this; a
// search's forked child simulations run it too.
#include "tools/command_line.hpp"

#include <cstdlib>
#include <functional>
#include <iostream>

#include "core/error.hpp"
#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/threads.hpp"
#include "sim/simgrid_config.hpp"
#include "tools/cli.hpp"
#if TANDEM_WITH_CUDA
#include "exec/cuda/cuda_info.hpp"
#endif

namespace {

std::string backends() {
  namespace cpu = tandem::kernels::cpu;
  const std::string gemm = cpu::gemm_backend() == "openblas"
                               ? "GEMMs by OpenBLAS's " + cpu::blas_core() + " kernels"
                               : "GEMMs by Eigen";
  std::string s = "sim (SimGrid " + tandem::sim::simgrid_version() + "), cpu (MPI; " + gemm + ")";
#if TANDEM_WITH_CUDA
  s += ", cuda (" + tandem::cuda_versions() + ")";
#endif
  return s;
}

}  // namespace

namespace tandem::cli {

namespace {

// A number's rule checked on the option's text, before CLI11 converts it.
CLI::Validator number_rule(const std::string& name, bool (*holds)(double),
                           const std::string& rule) {
  return CLI::Validator(
      [holds, rule](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == nullptr || *end != '\0')
          return "value " + text + ": must be a number";
        return holds(v) ? std::string() : "value " + text + ": must be " + rule;
      },
      name);
}

}  // namespace

CLI::Validator positive() {
  return number_rule(
      "POSITIVE", [](double v) { return v > 0; }, "> 0");
}

CLI::Validator non_negative() {
  return number_rule(
      "NONNEGATIVE", [](double v) { return v >= 0; }, "≥ 0");
}

int run_command_line(int argc, char** argv) {
  CLI::App app{
      "tandem: Megatron-LM-style GPT pretraining, simulated (SimGrid) and real (MPI + Eigen, "
      "NCCL + CUDA), with one timeline trace format.\n"};
  app.require_subcommand(1);
  // A callback, not a string: the cuda versions open cuBLAS, which only --version asks for.
  app.set_version_flag("--version", std::function<std::string()>([] {
                         return std::string("tandem ") + TANDEM_VERSION +
                                "\nbackends: " + backends();
                       }));
  app.footer("Run 'tandem SUBCOMMAND --help' for a subcommand's options.");
  auto* info = app.add_subcommand("info", "Print the version and the backends built in");
  info->callback(
      [] { std::cout << "tandem " << TANDEM_VERSION << "\nbackends: " << backends() << "\n"; });
  try {
    add_layout_command(app);
    add_schedule_command(app);
    add_scenario_command(app);
    add_trace_command(app);
    add_preprocess_command(app);
    add_train_command(app);
    add_checkpoint_command(app);
    add_simulate_command(app);
    add_calibrate_command(app);
    add_validate_command(app);
    add_nccl_tests_command(app);
    add_search_command(app);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tandem::ConfigError& e) {
    std::cerr << "tandem: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tandem: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

int run_command_line(const std::vector<std::string>& args) {
  std::vector<std::string> text = args;
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  return run_command_line(static_cast<int>(text.size()), argv.data());
}

}  // namespace tandem::cli
