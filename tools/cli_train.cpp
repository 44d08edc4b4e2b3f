// `tandem train`: Megatron-style GPT pretraining for real on the cpu binding, one MPI
// process per rank (`mpirun -np N tandem train …`, or a single process without mpirun).
// Everything a user can get wrong — scenario, world size, data files, checkpoint — is
// checked before MPI starts and before any step runs.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "core/error.hpp"
#include "data/dataset_builder.hpp"
#include "exec/cpu/cpu_device.hpp"
#include "exec/mpi/group_communicators.hpp"
#include "exec/mpi/mpi_runtime.hpp"
#include "kernels/cpu/threads.hpp"
#include "model/flops.hpp"
#include "schedules/layout.hpp"
#include "tools/cli.hpp"
#include "tools/train_backend.hpp"
#include "train/megatron_log.hpp"
#include "train/op_tracing_device.hpp"
#include "train/rank_log.hpp"
#include "train/run_trace.hpp"
#include "train/trainer.hpp"

namespace tandem::cli {
namespace {

struct TrainOptions {
  ScenarioOptions scenario;
  std::vector<std::string> data_path;
  bool mock_data = false;
  std::string split = "969,30,1";
  std::string save, load, trace;
  std::string log_dir;  // per-rank log files
  int threads = 0;
  std::string device = "cpu";  // cpu | cuda
  bool trace_ops = false;      // --trace-ops: a slice per Device op
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The rules a real run adds to the scenario's own.
void check_trainable(const Scenario& s, int launched, const std::string& device) {
  std::vector<Violation> v;
  if (s.cluster.world_size != launched)
    v.push_back({"cluster.world_size", std::to_string(s.cluster.world_size),
                 "this run has " + std::to_string(launched) + " process(es): pass --world-size " +
                     std::to_string(launched) + " or launch with mpirun -np " +
                     std::to_string(s.cluster.world_size)});
  // Mixed precision: bf16 or fp16 activations and parameter copies over fp32 main
  // parameters on the cuda binding (fp16 with its loss scaler); the cpu kernels compute fp32
  // only (FP8 runs aside: below).
  if (device != "cuda" && (s.training.bf16 || s.training.fp16) && !s.training.fp8.enabled())
    v.push_back({s.training.bf16 ? "bf16" : "fp16", "true",
                 std::string("the cpu binding trains in fp32 (") +
                     (s.training.bf16 ? "bf16" : "fp16") + " needs --device cuda)"});
  if (!v.empty()) throw ConfigError(v);
}

data::SplitDatasets build_data(const TrainOptions& o, const Scenario& s) {
  if (o.data_path.empty() == !o.mock_data)
    throw ConfigError("--data-path", o.data_path.empty() ? "(none)" : o.data_path.front(),
                      "give either --data-path PREFIX… (from tandem preprocess) or --mock-data");
  data::GptDataConfig dc;
  dc.mock = o.mock_data;
  if (!o.mock_data) dc.blend = data::parse_data_path(o.data_path);
  dc.mock_data.vocab_size = s.model.vocab_size;
  dc.mock_data.eod = s.model.vocab_size - 1;
  dc.split = o.split;
  dc.dataset.sequence_length = s.model.seq_length;
  dc.dataset.random_seed = static_cast<std::uint64_t>(s.training.seed);
  const auto& t = s.training;
  return data::build_gpt_datasets(
      dc, {t.train_iters * t.global_batch_size, t.eval_iters * t.global_batch_size, std::nullopt});
}

TrainerGroups groups_of(const std::map<GroupKind, Communicator*>& g, int cp) {
  auto get = [&](GroupKind k) -> Communicator* {
    auto it = g.find(k);
    return it == g.end() ? nullptr : it->second;
  };
  return trainer_groups(get, cp);
}

void print_progress(std::int64_t it, std::int64_t total) {
  const int width = 30, done = static_cast<int>(width * it / std::max<std::int64_t>(1, total));
  std::cerr << "\r[" << std::string(static_cast<std::size_t>(done), '#')
            << std::string(static_cast<std::size_t>(width - done), '.') << "] " << it << "/"
            << total << std::flush;
}

// Each rank writes its part next to the trace; rank 0 merges them into one file.
void write_trace(const std::string& path, const RunTrace& trace, MpiRuntime& mpi,
                 const Layout& layout) {
  const int rank = mpi.world().rank(), size = mpi.world().size();
  auto part_path = [&](int r) { return path + ".rank" + std::to_string(r) + ".part"; };
  {
    std::ofstream out(part_path(rank));
    out << trace.part().dump();
    if (!out) throw std::runtime_error("cannot write " + part_path(rank));
  }
  mpi.world().barrier();
  if (rank != 0) return;
  std::vector<nlohmann::json> parts;
  std::vector<ParallelContext> contexts;
  for (int r = 0; r < size; ++r) {
    std::ifstream in(part_path(r));
    parts.push_back(nlohmann::json::parse(in));
    contexts.push_back(make_parallel_context(layout, r));
    std::filesystem::remove(part_path(r));
  }
  write_merged_trace(path, parts, contexts);
  std::cout << "wrote trace " << path << " (" << size << " ranks)\n";
}

// Megatron's data and checkpoint arguments given after -- or in a launch script: the
// same as this command's own flags (which win when both are given).
void take_megatron_data_args(TrainOptions& o) {
  for (const auto& [flag, values] : o.scenario.megatron.not_modelled) {
    const std::string first = values.empty() ? "" : values.front();
    if (flag == "--mock-data") o.mock_data = true;
    if (flag == "--data-path" && o.data_path.empty()) o.data_path = values;
    if (flag == "--split" && o.split == "969,30,1") o.split = first;
    if (flag == "--save" && o.save.empty()) o.save = first;
    if (flag == "--load" && o.load.empty()) o.load = first;
  }
}

void run_training(TrainOptions& o) {
  const int launched = env_int("OMPI_COMM_WORLD_SIZE", 1);
  // Without a scenario file: Megatron's defaults on the processes launched, as
  // pretrain_gpt.py under torchrun.
  o.scenario.without_file = ScenarioOptions::WithoutFile::megatron_defaults;
  o.scenario.default_world_size = launched;
  o.scenario.handled_flags = {"--mock-data", "--data-path", "--split", "--save", "--load"};
  Scenario s = resolve_scenario(o.scenario, false);
  take_megatron_data_args(o);
  check_trainable(s, launched, o.device);
  validate(s);
  check_step_supports(s);  // layouts the step cannot build, before MPI starts
  // FP8 needs bf16 or fp16 beside it (Megatron's rule, checked above); the cpu binding runs
  // the FP8 GEMMs in software and everything else in fp32, its only precision.
  if (o.device != "cuda" && s.training.fp8.enabled()) s.training.bf16 = s.training.fp16 = false;
  // A measured run's profiler effects are the simulator's adapter's (sim/profiler_effects.hpp),
  // not part of the step a real run trains.
  for (const auto& [field, set] :
       {std::pair{"training.host_sync_per_layer", s.training.host_sync_per_layer},
        std::pair{"training.host_layer_timestamps", s.training.host_layer_timestamps},
        std::pair{"training.host_sync_output_layer", s.training.host_sync_output_layer}})
    if (set)
      throw ConfigError(field, "true",
                        "a measured run's profiler effect, which only tandem simulate prices; "
                        "tandem train runs the step without it");
  check_device_flag(o.device);
  const auto data = build_data(o, s);  // reads and checks every data file
  if (!o.trace.empty()) {
    const auto parent = std::filesystem::path(o.trace).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      throw ConfigError("--trace", o.trace, "its folder " + parent.string() + " does not exist");
  }
  if (!o.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.log_dir, ec);
    if (ec) throw ConfigError("--log-dir", o.log_dir, "cannot be created: " + ec.message());
  }
  std::int64_t resume_from = -1;
  if (!o.load.empty()) resume_from = latest_checkpoint_iteration(o.load);
  const int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  kernels::cpu::set_num_threads(
      o.threads > 0 ? o.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local));

  int argc = 0;
  char** argv = nullptr;
  std::optional<MpiRuntime> runtime(std::in_place, argc, argv);
  MpiRuntime& mpi = *runtime;
  std::optional<RankLog> log;  // --log-dir: this rank's file; the reporter's stdout
  // From here an error on one rank must end every rank: report it and abort the job. A
  // single process has no peers to stop: it finalises MPI and reports the error as any
  // other command does (exit 2 for bad input, 1 otherwise), without MPI's abort banner.
  std::exception_ptr alone_failed;
  try {
    const int rank = mpi.world().rank();
    log.emplace(o.log_dir, rank, rank == launched - 1);  // Megatron's print_rank_last
    const Layout layout = make_layout(
        {launched, s.parallelism.tensor_model_parallel_size,
         s.parallelism.pipeline_model_parallel_size, s.parallelism.context_parallel_size,
         s.parallelism.expert_model_parallel_size, s.parallelism.order, embedding_stages(s)});
    auto backend = make_train_backend(o.device, mpi, layout);
    const ParallelContext ctx = make_parallel_context(layout, rank);
    // With --trace every communicator is wrapped so its collectives land in the trace.
    RunTrace run_trace;
    std::map<GroupKind, std::unique_ptr<Communicator>> traced;
    std::map<GroupKind, Communicator*> used;
    for (auto& [kind, comm] : backend->groups()) {
      used[kind] = comm;
      if (o.trace.empty()) continue;
      traced[kind] = std::make_unique<TracingCommunicator>(*comm, run_trace, ctx.group(kind),
                                                           trace_thread_of(kind));
      used[kind] = traced[kind].get();
    }
    // --trace-ops: every op timed in place on the stream's clock (a host wait per op).
    std::optional<OpTracingDevice> op_tracing;
    if (o.trace_ops) op_tracing.emplace(backend->device(), run_trace);
    Device& device = op_tracing ? *op_tracing : backend->device();
    // With --trace the step's named regions (the MTP block) get slices of their own.
    std::optional<RegionTracer> regions;
    if (!o.trace.empty()) regions.emplace(device, run_trace);
    Trainer trainer(s, ctx, device, groups_of(used, s.parallelism.context_parallel_size), *data[0],
                    data[1].get(), regions ? &*regions : nullptr);
    if (!o.trace.empty()) trainer.set_trace(&run_trace);
    if (resume_from >= 0) trainer.restore(load_checkpoint(o.load, resume_from, rank));
    const bool tty = log->reporter() && isatty(STDERR_FILENO);
    const auto& t = s.training;
    // Megatron's log line: num_floating_point_operations for the model's own shape.
    const double flops_per_iteration =
        num_floating_point_operations(dense_shape(s), static_cast<double>(t.global_batch_size));
    auto save = [&] {
      save_checkpoint(o.save, trainer.checkpoint_state());
      mpi.world().barrier();
      if (rank == 0) mark_latest_checkpoint(o.save, trainer.iteration());
      log->line("saved checkpoint at iteration " + std::to_string(trainer.iteration()) + " to " +
                o.save);
    };
    double interval_seconds = 0;
    std::int64_t interval_iters = 0, interval_skipped = 0;
    TrainingDone done{.train_iters = t.train_iters};
    const auto loop_start = std::chrono::steady_clock::now();
    while (trainer.iteration() < t.train_iters) {
      const auto start = std::chrono::steady_clock::now();
      const StepResult r = trainer.train_step();
      ++done.steps_run;
      done.last_loss = r.lm_loss;
      interval_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++interval_iters;
      if (r.skipped) ++interval_skipped;
      const std::int64_t it = trainer.iteration();
      if (it % t.log_interval == 0) {
        const double per_iter = interval_seconds / static_cast<double>(interval_iters);
        if (tty) std::cerr << "\r\033[K";
        log->line(
            format_iteration_log({it, t.train_iters, trainer.consumed_samples(), per_iter * 1e3,
                                  flops_per_iteration / (per_iter * launched * 1e12),
                                  r.learning_rate, r.global_batch_size, r.lm_loss, r.loss_scale,
                                  r.skipped ? std::nullopt : std::optional<double>(r.grad_norm),
                                  interval_skipped, std::isfinite(r.lm_loss) ? 0 : 1, r.mtp_losses},
                                 std::time(nullptr)));
        interval_seconds = 0;
        interval_iters = 0;
        interval_skipped = 0;
      }
      if (t.eval_interval > 0 && it % t.eval_interval == 0 && data[1]) {
        const double v = trainer.evaluate();
        log->line(format_validation_log(it, v));
      }
      if (!o.save.empty() && t.save_interval > 0 && it % t.save_interval == 0) save();
      if (tty) print_progress(it, t.train_iters);
    }
    if (tty) std::cerr << "\r\033[K";
    if (const auto routed = trainer.routed_per_expert(); !routed.empty()) {
      // What the simulator's routing model can replay (--moe-routing histogram:…).
      std::string list;
      for (const auto n : routed) list += (list.empty() ? "" : ",") + std::to_string(n);
      log->line("tokens routed per expert (this rank's tokens, its MoE layers, all steps): " +
                list + "; simulate them with --moe-routing histogram:" + list);
    }
    if (!o.save.empty() && (t.save_interval <= 0 || trainer.iteration() % t.save_interval != 0))
      save();
    if (!o.trace.empty()) write_trace(o.trace, run_trace, mpi, layout);
    // Said whatever the log interval: a run shorter than it printed nothing else.
    done.iterations = trainer.iteration();
    done.elapsed_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
    log->line(format_training_done(done, std::time(nullptr)));
  } catch (const ConfigError& e) {
    if (log) log->to_file(std::string("tandem: ") + e.what());
    if (mpi.world().size() > 1) mpi.abort(std::string("tandem: ") + e.what(), 2);
    alone_failed = std::current_exception();
  } catch (const std::exception& e) {
    if (log) log->to_file(std::string("tandem: error: ") + e.what());
    if (mpi.world().size() > 1) mpi.abort(std::string("tandem: error: ") + e.what(), 1);
    alone_failed = std::current_exception();
  }
  if (!alone_failed) return;
  runtime.reset();                       // MPI_Finalize: no peer waits for this process
  std::rethrow_exception(alone_failed);  // printed, with its exit code, by the command line
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto opts = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand(
      "train",
      "Pretrain a GPT for real: on the cpu binding (Eigen/OpenBLAS kernels, MPI across "
      "ranks) or with --device cuda on GPUs (cuBLAS, NCCL): mpirun -np N tandem train "
      "[SCENARIO] [--megatron-flags…] --data-path PREFIX");
  cmd->add_option("--data-path", opts->data_path,
                  "Indexed dataset prefix(es) from tandem preprocess, optionally weighted: "
                  "'PREFIX' or 'W1 PREFIX1 W2 PREFIX2'");
  cmd->add_flag("--mock-data", opts->mock_data, "Train on Megatron-style mock data");
  cmd->add_option("--split", opts->split, "train,valid,test ratio")->capture_default_str();
  cmd->add_option("--save", opts->save, "Checkpoint directory to write");
  cmd->add_option("--load", opts->load,
                  "Checkpoint directory to resume from (its latest iteration)");
  cmd->add_option("--log-dir", opts->log_dir,
                  "Write each rank's messages (its log lines, validation, checkpoints, errors) "
                  "to DIR/rank_00000.log, rank_00001.log, …; the last pipeline stage still "
                  "prints Megatron's log lines to stdout");
  cmd->add_option("--trace", opts->trace,
                  "Write a Chrome trace of the run (forward/backward per microbatch, every "
                  "collective and p2p batch, all ranks merged)");
  cmd->add_flag("--trace-ops", opts->trace_ops,
                "With --trace, a slice per Device op (name, shape), each timed to completion "
                "in place: what tandem calibrate --from-trace reads (slower: a wait per op)")
      ->needs("--trace");
  cmd->add_option("--device", opts->device,
                  "Binding to train on: cpu (Eigen/OpenBLAS + MPI) or cuda (one GPU per rank, "
                  "local rank mod GPU count; cuBLAS + NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--threads", opts->threads,
                  "Kernel threads per rank (default: cores / ranks per node)")
      ->check(positive());
  add_scenario_options(*cmd, opts->scenario);
  cmd->get_option("scenario")
      ->description(
          "Scenario JSON file (e.g. scenarios/brown-small.json); flags below override it. "
          "Without one, Megatron-LM's defaults and the flags given (as pretrain_gpt.py); after "
          "--: a pretrain_gpt.py argument list, verbatim");
  cmd->callback([opts] { run_training(*opts); });
}

}  // namespace tandem::cli
