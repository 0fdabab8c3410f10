// The batchwise command line: parse flags, build options, call the library, choose reporters,
// map errors to exit codes. The library never prints or exits; this file does both.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/utils.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "batchwise/advice.h"
#include "batchwise/command_runner.h"
#include "batchwise/compare.h"
#include "batchwise/convergence.h"
#include "batchwise/device.h"
#include "batchwise/distributed.h"
#include "batchwise/doctor.h"
#include "batchwise/error.h"
#include "batchwise/fit.h"
#include "batchwise/history.h"
#include "batchwise/html.h"
#include "batchwise/loader.h"
#include "batchwise/memory.h"
#include "batchwise/report.h"
#include "batchwise/sweep.h"
#include "batchwise/trace.h"
#include "batchwise/tune.h"
#include "batchwise/validate.h"
#include "batchwise/units.h"
#include "batchwise/version.h"
#include "batchwise/workload.h"
#include "launch.h"

namespace {

using namespace batchwise;

// Exit codes (documented in docs/cli.md).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;      // a run that ended in an error (fit outcome "error", an unexpected failure)
constexpr int kExitUsage = 2;       // bad flags or options
constexpr int kExitData = 3;        // dataset missing or corrupt
constexpr int kExitModel = 4;       // model cannot be built for this input
constexpr int kExitDevice = 5;      // device absent or unusable
constexpr int kExitDoesNotFit = 6;  // fit: not even the minimum batch fits
constexpr int kExitDistributed = 7; // a data-parallel rank died, hung past --dist-timeout, or the group did not form

struct Flags {
  WorkloadOptions workload;
  std::string memory_budget;
  double target = 0.9;
  int threads = 0;
  std::string json;
  bool quiet = false;
  // fit
  std::string mode = "model";
  int64_t min = 1, max = 0, multiple_of = 1;  // max 0: the default for the command and device
  int fit_steps = 2, fit_warmup = 0;
  std::string plan_for;
  std::string seq_len = "64";
  std::string input_shape;
  bool use_cmd = false;
  std::vector<std::string> command;
  std::vector<std::string> compare_files;
  std::string trace;
  std::string html;
  std::string report_file;
  std::string history;  // empty: the default path
  bool no_history = false, reuse = false, history_json = false;
  double reuse_max_age_h = 168;
  int history_limit = 20;
  // sweep
  std::string batch_sizes, range;
  int warmup = 2, steps = 5, repetitions = 3;
  double trial_timeout_s = 0;
  // plan, noise, learning rate
  int64_t global_batch = 0, world_size = 1, max_micro_batch = 0, base_batch = 32;
  std::string last_batch = "drop";
  int64_t noise_batch = 256, noise_micro_batch = 32;
  int noise_steps = 50;
  bool fixed_weights = false;
  bool no_noise = false;
  int64_t accumulation_steps = 1;
  bool profile = false;
  bool compare_precision = false;
  int64_t loader_batch = 256;
  bool no_monitor = false;
  // validate, tune --validate
  bool validate = false;
  double target_accuracy = 0, target_loss = 0, max_epochs = 3, max_seconds = 600;
  int64_t eval_every = 0;
  int64_t held_out_samples = 0;
  double stop_slower_than = 0;
  bool rule_lr = false;
  // tune's batch race
  bool no_race = false;
  bool sweep_all = false;
  double advice_budget_s = 0;
  int tune_noise_steps = 20;
  // data-parallel
  int nproc = 0;
  double dist_timeout_s = 300;
  std::string dist_backend = "auto";
};

// What each numeric flag accepts, wherever a subcommand declares it: CLI11 checks the value as it
// parses, before anything runs, and the message names the flag ("--steps: 0: must be at least 1").
// Non-numbers, NaN and infinities are refused too, and the upper bounds keep a typo from asking for
// 10^12 of anything. Omitting a flag keeps its default (often "0: none" or "the device's").
struct Bound {
  const char* flag;
  double low;
  bool low_open;  // the value must be above `low`, not merely at least it
  double high;
  const char* why = nullptr;  // said after the bound
};
constexpr double kMaxBatch = 1 << 30, kMaxCount = 1e7, kMaxSeconds = 1e7;
constexpr Bound kBounds[] = {
    {"--min", 1, false, kMaxBatch}, {"--max", 1, false, kMaxBatch}, {"--multiple-of", 1, false, kMaxBatch},
    {"--batch", 1, false, kMaxBatch}, {"--micro-batch", 1, false, kMaxBatch}, {"--base-batch", 1, false, kMaxBatch},
    {"--global-batch", 1, false, kMaxBatch}, {"--max-micro-batch", 1, false, kMaxBatch},
    {"--steps", 1, false, kMaxCount}, {"--fit-steps", 1, false, kMaxCount}, {"--noise-steps", 2, false, kMaxCount},
    {"--warmup", 0, false, kMaxCount}, {"--repetitions", 1, false, 1000}, {"--accumulation-steps", 1, false, 65536},
    {"--limit", 1, false, kMaxCount}, {"--prefetch", 1, false, 1024}, {"--workers", 0, false, 256},
    {"--threads", 1, false, 4096, "leave it out for torch's choice"},
    {"--nproc", 1, false, 1024, "the number of local processes"}, {"--world-size", 1, false, 1 << 20},
    {"--num-classes", 2, false, kMaxCount, "a classifier needs at least 2 classes; leave it out to use the largest label + 1"}, {"--synthetic-size", 1, false, 1e9}, {"--io-latency-us", 0, false, 1e7},
    {"--seed", 0, false, 18446744073709551615.0}, {"--held-out-samples", 1, false, 1e9},
    {"--eval-every", 1, false, 1e12}, {"--lr", 0, true, 1e6}, {"--target", 0, true, 1, "a fraction of the budget"},
    {"--target-accuracy", 0, true, 1}, {"--target-loss", 0, true, 1e9}, {"--max-epochs", 0, true, 1e6},
    {"--max-seconds", 0, false, kMaxSeconds}, {"--trial-timeout", 0, false, kMaxSeconds},
    {"--dist-timeout", 0, true, kMaxSeconds}, {"--advice-budget", 0, true, kMaxSeconds},
    {"--reuse-max-age", 0, false, 1e7}, {"--stop-slower-than", 1, false, 1e6},
};

CLI::Validator in_range(const Bound& b) {
  return CLI::Validator(
      [b](std::string& value) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(value, v) || !std::isfinite(v)) return fmt::format("{}: not a finite number", value);
        const std::string why = b.why ? fmt::format(" ({})", b.why) : "";
        if (b.low_open ? v <= b.low : v < b.low)
          return fmt::format("{}: must be {} {:.15g}{}", value, b.low_open ? "above" : "at least", b.low, why);
        if (v > b.high) return fmt::format("{}: must be at most {:.15g}{}", value, b.high, why);
        return "";
      },
      "", "range");
}

void bound_numeric_flags(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (const Bound& b : kBounds)
      if (CLI::Option* option = sub->get_option_no_throw(b.flag)) option->check(in_range(b));
}

// This process's rank in a data-parallel run (0 otherwise), for its messages.
int env_rank() {
  const char* rank = std::getenv("RANK");
  return rank && std::getenv("WORLD_SIZE") ? std::atoi(rank) : 0;
}

void add_workload_flags(CLI::App* cmd, Flags& f) {
  auto& w = f.workload;
  cmd->add_option("--model", w.model(),
                  "mlp, lenet, resnet18, transformer, or a TorchScript file (model.pt, saved with torch.jit.save)")
      ->capture_default_str();
  cmd->add_option("--dataset", w.dataset(),
                  "fashion-mnist, cifar10 (--data-dir), idx or npy (--data-file, --labels-file), csv (--data-file, "
                  "--label-column) or synthetic")
      ->capture_default_str();
  cmd->add_option("--data-dir", w.data_dir(),
                  "fashion-mnist: the folder of its IDX files (default: /usr/share/datasets/fashion-mnist); cifar10: "
                  "the cifar-10-batches-bin folder");
  cmd->add_option("--data-file", w.data_file(), "idx: the images file; npy: the features .npy; csv: the .csv file");
  cmd->add_option("--labels-file", w.labels_file(), "idx: the labels file; npy: the labels .npy");
  cmd->add_option("--label-column", w.label_column(), "csv: the label column's header name or 0-based index (default: the last)");
  cmd->add_option("--loss", w.loss(), "cross-entropy (class labels) or mse (regression targets)")->capture_default_str();
  cmd->add_option("--num-classes", w.num_classes(), "classes the model predicts (default: largest label + 1; synthetic 10)");
  cmd->add_option("--input-shape", f.input_shape,
                  "one sample's shape without the batch, e.g. 3x32x32: what a TorchScript model takes, and the shape of "
                  "synthetic samples (default: the dataset's)");
  cmd->add_option("--device", w.device(), "cpu, cuda, cuda:N or auto")->capture_default_str();
  cmd->add_option("--optimizer", w.optimizer(), "sgd (momentum 0.9), adam or adamw")->capture_default_str();
  cmd->add_option("--precision", w.precision(),
                  "fp32, bf16 (autocast to bfloat16) or fp16 (autocast to float16 with loss scaling; on a CPU it pays only with half-precision units)")
      ->capture_default_str();
  cmd->add_option("--lr", w.lr(), "learning rate (default: sgd 0.01, adam/adamw 0.001)");
  cmd->add_option("--seq-len", f.seq_len,
                  "tokens per sample, transformer on synthetic data; a range like 32-128 fits the longest")
      ->capture_default_str();
  cmd->add_option("--workers", w.workers(), "input pipeline threads that prepare batches ahead (0: in the training thread)")
      ->capture_default_str();
  cmd->add_option("--prefetch", w.prefetch(), "batches each worker may have ready ahead")->capture_default_str();
  cmd->add_flag("--augment", w.augment(), "random crop (padding 4) and horizontal flip in the input pipeline (images)");
  cmd->add_option("--io-latency-us", w.io_latency_us(),
                  "emulate a slow input: a per-sample delay (sleep) in the pipeline, in microseconds")
      ->capture_default_str();
  cmd->add_option("--synthetic-size", w.synthetic_size(), "samples in the synthetic dataset")->capture_default_str();
  cmd->add_option("--seed", w.seed(), "seed of initialisation, data order and synthetic data")->capture_default_str();
  cmd->add_option("--memory-budget", f.memory_budget,
                  "memory the device may use, e.g. 2GiB (default: CPU 80 % of available RAM, CUDA the device's total)");
  cmd->add_option("--target", f.target, "fraction of the budget a fitting batch may peak at")->capture_default_str();
  cmd->add_option("--threads", f.threads, "intra-op threads (default: torch's choice)");
  cmd->add_option("--json", f.json, "write the JSON report to FILE");
  cmd->add_option("--html", f.html, "write the HTML report (charts, self-contained, opens offline) to FILE");
  cmd->add_option("--history", f.history,
                  "the run history to store this run in (default: $XDG_DATA_HOME/batchwise/history.sqlite)");
  cmd->add_flag("--no-history", f.no_history, "do not store this run");
  cmd->add_option("--trace", f.trace,
                  "write a Chrome trace (Perfetto, chrome://tracing) of one training step at the recommended batch to "
                  "FILE");
  cmd->add_option("--trial-timeout", f.trial_timeout_s, "seconds a trial may run, checked between steps (0: none)");
  cmd->add_flag("--quiet,-q", f.quiet, "print no progress lines");
  cmd->add_flag("--no-monitor", f.no_monitor, "do not sample CPU/GPU utilisation during trials");
  cmd->add_flag("--cmd", f.use_cmd,
                "train with your own command instead of a built-in workload; it follows --, with {batch} and {steps} "
                "substituted (no shell), and prints `batchwise: step` lines (docs/cmd.md); --device cpu measures its "
                "resident memory, cuda its device memory (NVML); --trial-timeout defaults to 600 s");
  cmd->add_option("command", f.command, "with --cmd: the training command, after --");
}

void add_fit_flags(CLI::App* cmd, Flags& f) {
  cmd->add_option("--mode", f.mode, "model (predict, verify, refine: exact in few trials), binsearch (doubling, then bisection; exact) or power (doubling only)")->capture_default_str();
  cmd->add_option("--min", f.min, "smallest batch tried")->capture_default_str();
  cmd->add_option("--max", f.max, "largest batch tried (default 65536; tune on CPU: 4096)");
  cmd->add_option("--multiple-of", f.multiple_of, "every batch tried is a multiple of this")->capture_default_str();
  cmd->add_option("--plan-for", f.plan_for,
                  "also predict the largest batch on a CUDA device of this memory: 24GiB, or t4, v100, l4, a10, "
                  "rtx4090, a100-40gb, l40s, a6000, a100-80gb, h100, h200");
}

void add_distributed_flags(CLI::App* cmd, Flags& f) {
  cmd->add_option("--nproc", f.nproc,
                  "train data-parallel in N local processes (torch.distributed; gloo on CPU, nccl on CUDA): batches "
                  "are per device. Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) every process "
                  "joins that group instead");
  cmd->add_option("--dist-timeout", f.dist_timeout_s,
                  "seconds a rank waits for the others in a collective before the run ends with exit code 7")
      ->capture_default_str();
  cmd->add_option("--dist-backend", f.dist_backend, "gloo, nccl or auto")->capture_default_str();
}

void add_sweep_flags(CLI::App* cmd, Flags& f) {
  cmd->add_flag("--profile", f.profile,
                "after the sweep, time each batch's step phase by phase (data, to device, forward, backward, "
                "optimizer) in a separate pass");
  cmd->add_option("--batch-sizes", f.batch_sizes, "list or range of batch sizes: 16,32,64 or 8-4096*2");
  cmd->add_option("--range", f.range, "range of batch sizes first-last*factor or first-last+step, e.g. 8-4096*2");
  cmd->add_option("--warmup", f.warmup, "unmeasured steps per trial")->capture_default_str();
  cmd->add_option("--repetitions", f.repetitions, "trials per batch size, interleaved")->capture_default_str();
}

FitOptions fit_options(const Flags& f, int64_t budget, const TrialCallback& progress,
                       const TrialStartCallback& started = {}) {
  return FitOptions()
      .mode(parse_fit_mode(f.mode))
      .budget_bytes(budget)
      .target(f.target)
      .min(f.min)
      .max(f.max)
      .multiple_of(f.multiple_of)
      .steps(f.fit_steps)
      .warmup(f.fit_warmup)
      .trial_timeout_s(f.trial_timeout_s)
      .monitor(!f.no_monitor)
      .on_trial(progress)
      .on_trial_start(started);
}

SweepOptions sweep_options(const Flags& f, int64_t budget, const TrialCallback& progress,
                           const TrialStartCallback& started = {}) {
  std::vector<int64_t> sizes;
  for (const auto& [text, flag] : {std::pair{f.batch_sizes, "--batch-sizes"}, std::pair{f.range, "--range"}}) {
    if (text.empty()) continue;
    const auto more = parse_batch_sizes(text, flag);
    sizes.insert(sizes.end(), more.begin(), more.end());
  }
  return SweepOptions()
      .batch_sizes(sizes)
      .warmup(f.warmup)
      .steps(f.steps)
      .repetitions(f.repetitions)
      .budget_bytes(budget)
      .accumulation_steps(f.accumulation_steps)
      .stop_after_flat(f.sweep_all ? -1 : 0)  // 0: tune's default
      .monitor(!f.no_monitor)
      .trial_timeout_s(f.trial_timeout_s)
      .on_trial(progress)
      .on_trial_start(started);
}

void write_file(const std::string& path, const std::string& text, const char* flag = "--json") {
  // Write beside the target, then rename: a reader never sees half a report.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(fmt::format("{} {}: cannot write there; check the folder exists and is writable", flag, path));
    out << text;
    if (!out.flush()) throw ConfigError(fmt::format("{} {}: writing failed (disk full?)", flag, path));
  }
  std::filesystem::rename(tmp, path);
}

// Fails before a run, not after it, when an output file cannot be written.
void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const bool existed = std::filesystem::exists(path);
  if (!std::ofstream(path, std::ios::app))
    throw ConfigError(fmt::format("{} {}: cannot write there; check the folder exists and is writable", flag, path));
  if (!existed) std::filesystem::remove(path);
}

ValidateOptions validate_options(const Flags& f, std::vector<int64_t> candidates) {
  return ValidateOptions(std::move(candidates))
      .target_accuracy(f.target_accuracy)
      .target_loss(f.target_loss)
      .max_epochs(f.max_epochs)
      .max_seconds(f.max_seconds)
      .eval_every_samples(f.eval_every)
      .base_batch(f.base_batch)
      .held_out_samples(f.held_out_samples)
      .stop_slower_than(f.stop_slower_than)
      .measure_lr(!f.rule_lr);
}

void add_validate_flags(CLI::App* cmd, Flags& f) {
  cmd->add_option("--target-accuracy", f.target_accuracy, "stop at this test accuracy (default 0.85 when no target)");
  cmd->add_option("--target-loss", f.target_loss, "stop at this test loss");
  cmd->add_option("--max-epochs", f.max_epochs, "give up after this many epochs per candidate")->capture_default_str();
  cmd->add_option("--max-seconds", f.max_seconds, "give up after this much training time per candidate (0: none)")
      ->capture_default_str();
  cmd->add_option("--eval-every", f.eval_every, "evaluate every this many training samples (default: 1/20 epoch)");
  cmd->add_option("--held-out-samples", f.held_out_samples,
                  "evaluate on the first N held-out samples (default: all; fewer evaluate faster, less precisely)");
  cmd->add_option("--stop-slower-than", f.stop_slower_than,
                  "stop a candidate once its training time passes this multiple of the fastest so far (e.g. 1.5; "
                  "default: never)");
  cmd->add_flag("--rule-lr", f.rule_lr,
                "train each candidate at the scaling rule's rate alone (Goyal's epochs of warm-up), not the rate "
                "tune advises (the rule capped by a range test at that batch)");
}

int run_doctor_command(const Flags& f) {
  if (f.threads > 0) torch::set_num_threads(f.threads);
  const DoctorReport d = run_doctor();
  std::cout << to_table(d) << std::flush;
  if (!f.json.empty()) write_file(f.json, to_json(d));
  return kExitOk;
}

int run_report(const Flags& f) {
  const std::string out = f.html.empty() ? std::filesystem::path(f.report_file).replace_extension(".html").string() : f.html;
  if (out == f.report_file) throw ConfigError(fmt::format("-o {}: that is the JSON report itself; give another file", out));
  write_file(out, html_from_file(f.report_file), "-o");
  fmt::print("{}\n", out);
  return kExitOk;
}

int run_compare(const Flags& f) {
  const Comparison c = compare_reports(f.compare_files.at(0), f.compare_files.at(1));
  std::cout << to_table(c) << std::flush;
  if (!f.json.empty()) write_file(f.json, to_json(c));
  return kExitOk;
}

std::string history_path(const Flags& f) { return f.history.empty() ? default_history_path() : f.history; }

int run_history(const Flags& f) {
  History h(history_path(f));
  const auto runs = h.list(f.history_limit);
  if (f.history_json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : runs)
      j.push_back({{"id", r.id}, {"date", r.date}, {"command", r.command}, {"workload", r.workload},
                   {"device", r.device}, {"versions", r.versions}, {"budget_bytes", r.budget_bytes},
                   {"fit_batch", r.fit_batch ? nlohmann::json(*r.fit_batch) : nlohmann::json(nullptr)},
                   {"recommended_batch",
                    r.recommended_batch ? nlohmann::json(*r.recommended_batch) : nlohmann::json(nullptr)}});
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  fmt::print("{} ({} shown, newest first)\n", history_path(f), runs.size());
  fmt::print("{:>5}  {:<20}  {:<5}  {:>7}  {:>7}  {}\n", "id", "date", "cmd", "fit", "batch", "workload | device | versions");
  for (const auto& r : runs)
    fmt::print("{:>5}  {:<20}  {:<5}  {:>7}  {:>7}  {} | {} | {}\n", r.id, r.date, r.command,
               r.fit_batch ? std::to_string(*r.fit_batch) : "-",
               r.recommended_batch ? std::to_string(*r.recommended_batch) : "-", r.workload, r.device, r.versions);
  return kExitOk;
}

bool known_optimizer(const WorkloadInfo& w) {
  const auto& optimizers = optimizer_names();
  return w.lr > 0 && std::find(optimizers.begin(), optimizers.end(), w.optimizer) != optimizers.end();
}

// plan: the learning rate at the global batch, measured when it is one plain step on this device (no
// accumulation, one rank; an accumulated or multi-device step is not range-tested here), else the
// rule's; and the run plan from the base batch to it.
void plan_learning_rate(const Flags& f, Report& report, ModuleWorkload* workload, bool data_parallel) {
  if (!report.accumulation || !known_optimizer(report.workload)) return;
  const int64_t batch = report.accumulation->global_batch;
  const bool one_step = report.accumulation->accumulation_steps == 1 && report.accumulation->world_size == 1;
  if (one_step && workload && !data_parallel && f.workload.precision() != "fp16")
    report.lr = advise_lr(*workload, batch, LrAdviceOptions(f.base_batch, report.workload.lr));
  else
    report.lr = unmeasured_lr(report.workload.optimizer, f.base_batch, report.workload.lr, batch);
  std::vector<std::pair<std::string, LrAdvice>> rows{
      {"base", unmeasured_lr(report.workload.optimizer, f.base_batch, report.workload.lr, f.base_batch)}};
  if (batch != f.base_batch) rows.emplace_back("planned", *report.lr);
  report.run_plan = plan_run(optimizer_settings(report.workload.optimizer, workload), report.workload.dataset_size, rows);
}

int run(const std::string& command, Flags& f) {
  if (command == "compare") return run_compare(f);
  if (command == "history") return run_history(f);
  if (command == "report") return run_report(f);
  if (command == "doctor") return run_doctor_command(f);
  CpuMemoryTracker::install();  // before any model exists, so its tensors are counted
  if (f.threads > 0) torch::set_num_threads(f.threads);
  {
    // "64" or a range "32-128": only its shortest and longest length matter.
    const auto lengths = parse_batch_sizes(f.seq_len, "--seq-len");
    f.workload.seq_len(lengths.back()).seq_len_min(lengths.size() > 1 ? lengths.front() : 0);
  }
  if (!f.input_shape.empty()) f.workload.input_shape(parse_shape(f.input_shape, "--input-shape"));
  int64_t budget = f.memory_budget.empty() ? 0 : parse_bytes(f.memory_budget, "--memory-budget");
  if (!f.batch_sizes.empty() || !f.range.empty()) (void)sweep_options(f, 0, {});  // validate before loading data
  const std::optional<PlanDevice> plan_device =
      f.plan_for.empty() ? std::nullopt : std::optional<PlanDevice>(parse_plan_device(f.plan_for));
  if (command == "sweep" && f.batch_sizes.empty() && f.range.empty())
    throw ConfigError("sweep: no batch sizes; pass --batch-sizes 16,32,64 or --range 8-4096*2");

  if (command == "plan") (void)parse_last_batch(f.last_batch, "--last-batch");
  if (command == "noise" && f.use_cmd)
    throw ConfigError("noise: the noise scale needs the gradients of batchwise's own training step; it cannot be "
                      "measured through --cmd");
  if (f.accumulation_steps < 1)
    throw ConfigError(fmt::format("--accumulation-steps {}: must be at least 1", f.accumulation_steps));
  if (command == "loader" && f.use_cmd)
    throw ConfigError("loader: batchwise tunes its own input pipeline; with --cmd, tune your DataLoader's num_workers "
                      "inside your command");
  if (f.workload.precision() == "fp16" && f.accumulation_steps > 1)
    throw ConfigError("--accumulation-steps with --precision fp16: accumulation does not support fp16's loss scaling "
                      "yet; use bf16 or fp32");
  if (f.workload.precision() == "fp16" && command == "noise")
    throw ConfigError("noise with --precision fp16: the noise scale does not support fp16's loss scaling yet; use bf16 "
                      "or fp32");
  if (f.profile && f.accumulation_steps > 1)
    throw ConfigError("--profile with --accumulation-steps: the profile times plain steps; profile without accumulation");
  if ((command == "validate" || f.validate) && f.workload.loss() == "mse" && f.target_loss == 0)
    throw ConfigError("validate with --loss mse: there is no accuracy to reach; give --target-loss");
  if ((command == "validate" || f.validate) && (f.target_accuracy > 1 || f.target_accuracy < 0 || f.target_loss < 0))
    throw ConfigError(fmt::format("--target-accuracy {} / --target-loss {}: accuracy is between 0 and 1, loss positive",
                                  f.target_accuracy, f.target_loss));
  if ((command == "validate" || f.validate) && f.max_epochs <= 0)
    throw ConfigError(fmt::format("--max-epochs {}: must be positive", f.max_epochs));
  if (f.compare_precision && f.use_cmd)
    throw ConfigError("--compare-precision: batchwise sets the precision of its own training step; with --cmd, run "
                      "your command once per precision and compare the reports");
  if (f.profile && f.use_cmd)
    throw ConfigError("--profile: batchwise profiles its own training step; with --cmd, profile inside your command");
  if (f.accumulation_steps > 1 && f.use_cmd)
    throw ConfigError("--accumulation-steps: batchwise accumulates in its own training step; with --cmd, accumulate "
                      "inside your command");
  if (command == "validate" && f.batch_sizes.empty())
    throw ConfigError("validate: no candidates; pass --batch-sizes 32,128,512");
  if ((command == "validate" || f.validate) && f.use_cmd)
    throw ConfigError("validate: time-to-accuracy needs batchwise's own training loop; it cannot run through --cmd");
  if ((command == "validate" || f.validate) && f.target_accuracy == 0 && f.target_loss == 0) f.target_accuracy = 0.85;
  if (f.tune_noise_steps < 2) throw ConfigError(fmt::format("--noise-steps {}: at least 2", f.tune_noise_steps));
  if (command == "noise" && (f.noise_micro_batch < 1 || f.noise_micro_batch >= f.noise_batch ||
                             f.noise_batch % f.noise_micro_batch != 0))  // before the data is loaded
    throw ConfigError(fmt::format("noise scale: --micro-batch {} must be below --batch {} and divide it",
                                  f.noise_micro_batch, f.noise_batch));
  if (f.base_batch < 1) throw ConfigError(fmt::format("--base-batch {}: must be at least 1", f.base_batch));
  check_writable(f.trace, "--trace");
  check_writable(f.json, "--json");
  check_writable(f.html, "--html");
  if (!f.html.empty() && chartjs_version().empty())
    (void)to_html("", "--html");  // built without Chart.js: say so before the run
  if (!f.command.empty() && !f.use_cmd)
    throw ConfigError(fmt::format("unexpected argument {}: to run a training command, put --cmd before -- {}",
                                  f.command.front(), command_line(f.command)));
  // Data-parallel: the ranks --nproc started, or a group torchrun's environment describes.
  const std::optional<GroupAddress> address = group_address_from_env();
  const bool data_parallel = address && address->world_size > 1;
  if (data_parallel) {
    if (command != "fit" && command != "sweep" && command != "tune" && command != "plan")
      throw ConfigError(fmt::format("{} runs in one process, but WORLD_SIZE={} asks for a data-parallel run; data-parallel "
                                    "trials are for fit, sweep, tune and plan",
                                    command, address->world_size));
    const char* unsupported = f.use_cmd                ? "--cmd (run your own command under torchrun instead)"
                              : f.profile              ? "--profile"
                              : f.compare_precision    ? "--compare-precision"
                              : f.validate             ? "--validate"
                              : !f.trace.empty()       ? "--trace"
                              : f.reuse                ? "--reuse"
                                                       : nullptr;
    if (unsupported)
      throw ConfigError(fmt::format("{} is not supported in a data-parallel run ({} ranks); run it in one process",
                                    unsupported, address->world_size));
    if (f.dist_timeout_s <= 0)
      throw ConfigError(fmt::format("--dist-timeout {}: must be a positive number of seconds", f.dist_timeout_s));
    if (f.workload.device() == "cuda" || (f.workload.device() == "auto" && resolve_device("auto").type == "cuda"))
      f.workload.device(fmt::format("cuda:{}", address->local_rank));  // one device per local rank
    if (command == "plan") f.world_size = address->world_size;
  }
  const bool lead = !data_parallel || address->rank == 0;  // the rank that reports
  if (!lead) {  // rank 0 writes the report, the history and the table
    f.json.clear();
    f.html.clear();
    f.no_history = true;
  }
  std::shared_ptr<Group> group;
  std::unique_ptr<DataParallelWorkload> dp_workload;
  std::vector<int64_t> rank_budgets;

  // The trials run either on a built-in (or TorchScript) workload in this process, or on the
  // user's command, one child process per trial.
  std::unique_ptr<Workload> workload;
  std::unique_ptr<TrialRunner> runner;
  Dataset held_out;
  bool cuda = false;
  std::string device = f.workload.device();
  if (f.use_cmd) {  // the command's GPU is not LibTorch's: CommandRunner finds it through NVML
    auto command_runner = std::make_unique<CommandRunner>(f.command, device);
    cuda = command_runner->is_cuda();
    runner = std::move(command_runner);
    if (f.trial_timeout_s == 0) f.trial_timeout_s = 600;  // a hung command must not hang the run
  } else {
    if (command == "validate" || f.validate) held_out = load_test_split(f.workload);  // before a long run
    workload = make_workload(f.workload);
    runner = std::make_unique<WorkloadRunner>(*workload);
    if (data_parallel) {
      group = Group::join(*address, workload->device(),
                          std::chrono::milliseconds(static_cast<int64_t>(f.dist_timeout_s * 1000)), f.dist_backend);
      dp_workload = std::make_unique<DataParallelWorkload>(dynamic_cast<ModuleWorkload&>(*workload), group);
      // Each rank enforces its own budget; the decisions use the smallest, which every rank can honour.
      // Without a budget, the ranks on one host share its RAM (a CUDA rank has its device to itself).
      const int64_t own_budget = budget > 0 ? budget
                                 : workload->device().is_cuda()
                                     ? runner->default_budget_bytes()
                                     : runner->default_budget_bytes() / address->local_world_size;
      auto distributed = std::make_unique<DistributedRunner>(*dp_workload, own_budget,
                                                             /*measure_scaling=*/command == "sweep" || command == "tune");
      rank_budgets = distributed->gather(own_budget, "agreeing on the memory budget");
      budget = *std::min_element(rank_budgets.begin(), rank_budgets.end());
      runner = std::move(distributed);
    }
    cuda = workload->device().is_cuda();
  }
  if (f.max == 0) {
    // On CPU a step at 65536 samples takes seconds to minutes, and throughput has long flattened
    // by then; tune's question is which batch to train with, so it stops at 4096 unless told.
    f.max = command == "tune" && !cuda ? 4096 : 65536;
  }
  Report report;
  if (f.use_cmd) {
    report.context = make_context(DeviceSpec{});
    if (cuda) {
      report.context.device_type = "cuda";
      report.context.device_name = static_cast<const CommandRunner&>(*runner).device_name();
    }
  } else {
    report.context = make_context(workload->device().is_cuda() ? resolve_device(workload->device().str()) : DeviceSpec{});
  }
  if (group)
    report.distributed = DistributedRun{group->size(), group->backend(), rank_budgets, f.dist_timeout_s};
  report.context.device_total_bytes = runner->device_total_bytes();
  report.workload = runner->info();
  report.budget_bytes = budget > 0 ? budget : runner->default_budget_bytes();
  report.target = f.target;

  // Progress: one line per trial on stderr. The estimate of time left uses the current phase's
  // pace (a fit's trials and a sweep's are timed apart).
  const auto start = std::chrono::steady_clock::now();
  auto phase_start = start;
  const bool live = isatty(STDERR_FILENO) != 0;
  // "3/14" and ", ~12 s left" for trial `index` of `planned`, `done` trials of this phase finished.
  auto position = [&](int index, int planned, int done, std::chrono::steady_clock::time_point now) {
    const std::string of = planned > 0 ? fmt::format("{}/{}", index + 1, planned) : fmt::format("{}", index + 1);
    const double phase = std::chrono::duration<double>(now - phase_start).count();
    const std::string eta = planned > 0 && done > 0 && done < planned
                                ? fmt::format(", ~{:.0f} s left", phase / done * (planned - done))
                                : std::string();
    return std::pair{of, eta};
  };
  TrialCallback progress = [&](const Trial& t, int index, int planned) {
    if (f.quiet || !lead) return;
    const auto now = std::chrono::steady_clock::now();
    if (index == 0) phase_start = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            std::chrono::duration<double>(t.wall_s));
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const auto [of, eta] = position(index, planned, index + 1, now);
    const std::string what = t.outcome == Outcome::Ok && t.samples_per_s > 0 && t.warmup_steps > 0
                                 ? fmt::format("{:.0f} samples/s", t.samples_per_s)
                                 : to_string(t.outcome);
    // On a terminal the finished line replaces the live one; elsewhere (a log, a pipe) it is
    // simply the next line.
    fmt::print(stderr, "{}[trial {}] batch {}: {}, peak {} ({:.1f} s elapsed{})\n", live ? "\r\033[K" : "", of,
               t.batch, what, format_bytes(t.peak_bytes), elapsed, eta);
  };
  // On a terminal: a live line for the trial now running (which batch, time so far, time left).
  TrialStartCallback started = [&](int64_t batch, int index, int planned) {
    if (f.quiet || !live || !lead) return;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const auto [of, eta] = position(index, planned, index, now);
    fmt::print(stderr, "\r\033[K[trial {}] batch {}: training... ({:.1f} s elapsed{})", of, batch, elapsed, eta);
    std::fflush(stderr);
  };

  // Long training passes (validate, the batch race): a live line on a terminal, a line every 10 s
  // elsewhere, so a log shows the run is alive and how far it is.
  auto last_line = std::chrono::steady_clock::now() - std::chrono::hours(1);
  std::string last_candidate;  // not a terminal: a line when a candidate starts, then one every 10 s
  auto training_line = [&](const std::string& text, const std::string& candidate) {
    if (f.quiet || !lead) return;
    const auto now = std::chrono::steady_clock::now();
    if (live) {
      fmt::print(stderr, "\r\033[K{}", text);
      std::fflush(stderr);
    } else if (candidate != last_candidate || now - last_line >= std::chrono::seconds(10)) {
      fmt::print(stderr, "{}\n", text);
      last_line = now;
      last_candidate = candidate;
    }
  };
  auto metric_text = [](double loss, const std::optional<double>& accuracy) {
    return accuracy ? fmt::format("accuracy {:.3f}, loss {:.3f}", *accuracy, loss) : fmt::format("loss {:.3f}", loss);
  };
  auto on_validate = [&](const ValidateProgress& p) {
    const std::string target = p.target_left_s ? fmt::format("~{:.0f} s to the target, ", *p.target_left_s) : "";
    training_line(fmt::format("[validate {}/{}] batch {}: epoch {:.2f}, {}, {:.1f} s trained ({}at most {:.0f} s "
                              "left; {:.0f} s elapsed)",
                              p.index + 1, p.count, p.batch, p.epochs, metric_text(p.loss, p.accuracy), p.train_s,
                              target, p.limit_left_s, p.elapsed_s),
                  fmt::format("validate {}", p.index));
  };
  auto on_race = [&](const RaceProgress& p) {
    training_line(fmt::format("[race rung {}/{}, {}/{}] batch {}: epoch {:.2f}, held-out {} ({:.0f} s elapsed, ~{:.0f} s "
                              "left)",
                              p.rung, p.rungs, p.index, p.count, p.batch, p.epochs, metric_text(p.loss, p.accuracy),
                              p.elapsed_s, p.left_s),
                  fmt::format("race {} {}", p.rung, p.index));
  };
  auto print_validation = [&](const ValidationResult& v) {
    if (live && !f.quiet && lead) fmt::print(stderr, "\r\033[K");
    for (const auto& run : v.runs)
      if (!f.quiet && lead)
        fmt::print(stderr, "[validate] batch {} (lr {:.4g}): {}\n", run.batch, run.lr.lr,
                   run.reached ? fmt::format("reached {} in {:.1f} s of training ({:.2f} epochs)", v.target, run.train_s,
                                             run.epochs)
                               : run.message);
  };
  auto validate_with_progress = [&](const std::vector<int64_t>& candidates) {
    ValidationResult v = validate(*workload, held_out, validate_options(f, candidates).on_progress(on_validate));
    print_validation(v);
    return v;
  };

  int code = kExitOk;
  std::unique_ptr<History> history;
  if (!f.no_history || f.reuse) history = std::make_unique<History>(history_path(f));
  std::optional<FitResult> reused;
  if (f.reuse) {
    if (f.use_cmd) throw ConfigError("--reuse: a command's fit is not stored by workload; drop --reuse with --cmd");
    const std::optional<HistoryEntry> entry = history->find_fit(to_json(report), f.reuse_max_age_h * 3600);
    if (!f.quiet)
      fmt::print(stderr, "{}\n", entry ? fmt::format("reusing the fit of run {} ({}): batch {}", entry->id,
                                                       entry->date, *entry->fit_batch)
                                        : std::string("--reuse: no matching fit in the history; fitting"));
    if (entry) {
      FitResult r;
      r.mode = parse_fit_mode(f.mode);
      r.outcome = FitOutcome::Fits;
      r.batch = *entry->fit_batch;
      r.budget_bytes = report.budget_bytes;
      r.target = f.target;
      r.multiple_of = f.multiple_of;
      r.message = fmt::format("reused from run {} of {} in {} (--reuse): no fit trials ran", entry->id, entry->date,
                              history_path(f));
      reused = r;
    }
  }
  auto* module_workload = dynamic_cast<ModuleWorkload*>(workload.get());
  if (command == "tune") {
    TuneSubject subject(*runner, workload.get());
    if (!f.use_cmd) subject.options = f.workload;
    subject.world_size = group ? group->size() : 1;
    subject.held_out = [&]() {
      if (held_out.size() == 0) held_out = held_out_or_training_sample(f.workload, module_workload->data());
      return held_out;
    };
    if (!data_parallel)
      subject.release = [&] {  // --compare-precision fits the other precisions without this one's model
        module_workload = nullptr;
        runner.reset();
        workload.reset();
        held_out = Dataset{};
      };
    TuneOptions options = TuneOptions()
                              .fit(fit_options(f, report.budget_bytes, progress, started))
                              .sweep(sweep_options(f, report.budget_bytes, progress, started))
                              .reuse_fit(reused)
                              .profile(f.profile)
                              .noise(!f.no_noise)
                              .noise_steps(f.tune_noise_steps)
                              .race(!f.no_race)
                              .race_budget_s(f.advice_budget_s)
                              .base_batch(f.base_batch)
                              .compare_precision(f.compare_precision)
                              .on_stage([&](const TuneStage& s) {
                                if (!f.quiet && lead) fmt::print(stderr, "{}{}\n", live ? "\r\033[K" : "", s.what);
                              })
                              .on_race(on_race);
    if (f.validate) options.validate(validate_options(f, {}).on_progress(on_validate));
    report = tune(subject, options, report);
    if (live && !f.quiet && lead) fmt::print(stderr, "\r\033[K");
    if (report.validation && !f.quiet && lead) print_validation(*report.validation);
  } else if (command == "noise") {
    if (!f.quiet)
      fmt::print(stderr, "measuring the gradient noise scale: {} training steps at batch {} in micro-batches of {}\n",
                 f.noise_steps, f.noise_batch, f.noise_micro_batch);
    report.noise = measure_noise_scale(*workload, NoiseOptions()
                                                      .batch(f.noise_batch)
                                                      .micro_batch(f.noise_micro_batch)
                                                      .steps(f.noise_steps)
                                                      .train(!f.fixed_weights));
  } else if (command == "loader") {
    if (!f.quiet) fmt::print(stderr, "trying input-pipeline settings at batch {}\n", f.loader_batch);
    report.loader = search_loader(dynamic_cast<ModuleWorkload&>(*workload), f.loader_batch, f.warmup, f.steps);
  } else if (command == "validate") {
    if (!f.quiet) fmt::print(stderr, "validating: training to the target at each of {}\n", f.batch_sizes);
    report.validation = validate_with_progress(parse_batch_sizes(f.batch_sizes, "--batch-sizes"));
    if (report.validation->fastest_batch) {
      for (const auto& run : report.validation->runs)
        if (run.batch == *report.validation->fastest_batch)
          report.lr = run.lr, report.recommendation = Recommendation{
              run.batch, fmt::format("batch {} reached {} soonest: {:.1f} s of training ({} steps, {:.2f} epochs, lr "
                                     "{:.4g})",
                                     run.batch, report.validation->target, run.train_s, run.steps, run.epochs, run.lr.lr)};
    }
  } else if (command == "plan") {
    int64_t max_micro = f.max_micro_batch;
    if (max_micro == 0) {  // the largest micro-batch is what fits: measure it
      report.fit = fit(*runner, fit_options(f, report.budget_bytes, progress, started));
      if (report.fit->batch) max_micro = *report.fit->batch;
    }
    if (max_micro > 0) {
      report.accumulation = plan_accumulation(PlanRequest(f.global_batch, max_micro)
                                                  .world_size(f.world_size)
                                                  .multiple_of(f.multiple_of)
                                                  .dataset_size(report.workload.dataset_size)
                                                  .last_batch(parse_last_batch(f.last_batch, "--last-batch"))
                                                  .batchnorm(workload && uses_batchnorm(*workload)));
    }
    plan_learning_rate(f, report, module_workload, data_parallel);
  } else if (command == "fit") {
    report.fit = fit(*runner, fit_options(f, report.budget_bytes, progress, started));
    report.recommendation = recommend(report.fit, std::nullopt);
  } else if (command == "sweep") {
    report.sweep = sweep(*runner, sweep_options(f, report.budget_bytes, progress, started));
    report.recommendation = recommend(std::nullopt, report.sweep);
    if (f.profile) {
      if (!workload) throw ConfigError("--profile: batchwise profiles its own training step; with --cmd, profile inside your command");
      report.step_profile = profile_sweep(*workload, *report.sweep, report.context.warnings);
    }
  }
  if ((command == "fit" || command == "sweep") && report.recommendation && known_optimizer(report.workload))
    report.lr = unmeasured_lr(report.workload.optimizer, f.base_batch, report.workload.lr,
                              report.recommendation->batch * (group ? group->size() : 1));
  if (!f.trace.empty()) {
    if (!workload) throw ConfigError("--trace profiles batchwise's own training step; with --cmd, profile inside your command");
    if (!report.recommendation) {
      fmt::print(stderr, "batchwise {}: --trace {}: no batch was recommended, so no step was traced\n", command, f.trace);
    } else {
      const int64_t events = write_step_trace(*workload, report.recommendation->batch, f.trace);
      if (!f.quiet)
        fmt::print(stderr, "trace of one step at batch {}: {} ({} events; open in https://ui.perfetto.dev)\n",
                   report.recommendation->batch, f.trace, events);
    }
  }
  if (plan_device && report.fit) report.plan = plan_for(*report.fit, *plan_device, f.target, f.multiple_of);
  if (report.fit && report.fit->outcome == FitOutcome::DoesNotFit) code = kExitDoesNotFit;
  if (report.fit && report.fit->outcome == FitOutcome::Error) code = kExitFailed;

  if (group) (void)group->all_gather({0}, "ending the run together");  // rank 0 hosts the store: it leaves last
  if (!lead) {
    if (!f.quiet) {
      const std::string fitted = report.fit && report.fit->batch ? fmt::format("fit batch {} per device", *report.fit->batch)
                                                                 : std::string();
      const std::string rec = report.recommendation ? fmt::format("recommended batch {} per device", report.recommendation->batch)
                                                    : std::string();
      fmt::print(stderr, "batchwise {} (rank {} of {}): done, as agreed with every rank{}{}{}\n", command, address->rank,
                 address->world_size, fitted.empty() && rec.empty() ? "" : ": ", fitted,
                 !fitted.empty() && !rec.empty() ? ", " + rec : rec);
    }
    return code;
  }
  std::cout << to_table(report) << std::flush;
  const std::string json = to_json(report);
  if (!f.json.empty()) write_file(f.json, json);
  if (!f.html.empty()) {
    write_file(f.html, to_html(json, "this run's report"), "--html");
    if (!f.quiet) fmt::print(stderr, "HTML report: {}\n", f.html);
  }
  if (!f.no_history) {
    try {
      history->add(command, json);
    } catch (const Error& e) {  // the run itself succeeded; losing its record is worth a warning, not a failure
      fmt::print(stderr, "batchwise {}: warning: the run was not stored in the history: {}\n", command, e.what());
    }
  }
  return code;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batchwise: which batch size should I train with on this hardware, and why?\n"
               "Trains the real model on real data at candidate batch sizes and measures what happens."};
  app.set_version_flag("--version", std::string("batchwise ") + BATCHWISE_VERSION + " (" + BATCHWISE_BUILD_COMMIT + ")");
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 run failed, 2 bad options, 3 bad dataset, 4 bad model, 5 bad device, "
             "6 no batch fits, 7 a data-parallel rank died or hung.\nExample:\n  batchwise tune                       # lenet on Fashion-MNIST, best device\n"
             "  batchwise fit --model resnet18 --memory-budget 4GiB --json fit.json");
  Flags f;

  auto* fit_cmd = app.add_subcommand("fit", "Find the largest batch whose peak memory stays within target x budget");
  add_workload_flags(fit_cmd, f);
  add_fit_flags(fit_cmd, f);
  add_distributed_flags(fit_cmd, f);
  fit_cmd->add_option("--steps", f.fit_steps, "training steps per fit trial")->capture_default_str();
  fit_cmd->add_option("--warmup", f.fit_warmup, "extra steps before those (they count towards the peak too)")
      ->capture_default_str();
  fit_cmd->footer("Example:\n  batchwise fit --model lenet --memory-budget 512MiB --mode binsearch --multiple-of 8 --json fit.json\n"
                  "  batchwise fit --model mlp --nproc 2 --memory-budget 1GiB   # the per-device batch, data-parallel");

  auto* sweep_cmd = app.add_subcommand("sweep", "Measure samples/s, step time and peak memory at each batch size");
  add_workload_flags(sweep_cmd, f);
  add_sweep_flags(sweep_cmd, f);
  add_distributed_flags(sweep_cmd, f);
  sweep_cmd->add_option("--steps", f.steps, "measured steps per trial")->capture_default_str();
  sweep_cmd->add_option("--accumulation-steps", f.accumulation_steps,
                        "train each batch as this many accumulated micro-batches (as `plan` would)")
      ->capture_default_str();
  sweep_cmd->footer("Example:\n  batchwise sweep --model mlp --range 16-1024*2 --repetitions 3 --json sweep.json\n"
                    "  batchwise sweep --model lenet --nproc 2 --batch-sizes 32,128,512   # scaling and all-reduce share");

  auto* tune_cmd = app.add_subcommand("tune", "Fit, sweep doublings of --min up to the fit, and recommend a batch");
  add_workload_flags(tune_cmd, f);
  add_fit_flags(tune_cmd, f);
  add_sweep_flags(tune_cmd, f);
  add_distributed_flags(tune_cmd, f);
  tune_cmd->add_option("--steps", f.steps, "measured steps per sweep trial")->capture_default_str();
  tune_cmd->add_option("--fit-steps", f.fit_steps, "training steps per fit trial")->capture_default_str();
  tune_cmd->add_flag("--reuse", f.reuse,
                     "skip the fit when the history holds one for the same workload, device, versions, budget and "
                     "target, no older than --reuse-max-age");
  tune_cmd->add_option("--reuse-max-age", f.reuse_max_age_h, "hours a stored fit stays reusable")->capture_default_str();
  tune_cmd->add_flag("--sweep-all", f.sweep_all,
                     "sweep every doubling up to the fit (default: stop once 3 in a row do not raise samples/s by the "
                     "knee tolerance; --batch-sizes are always all swept)");
  tune_cmd->footer("Example:\n  batchwise tune                      # lenet on Fashion-MNIST on the best device\n"
                   "  batchwise tune --model resnet18 --dataset synthetic --max 512 --json tune.json");

  tune_cmd->add_flag("--no-noise", f.no_noise,
                     "skip the gradient noise scale, and with it goodput: recommend the throughput knee");
  tune_cmd->add_option("--noise-steps", f.tune_noise_steps, "training steps measuring the noise scale")
      ->capture_default_str();
  tune_cmd->add_option("--base-batch", f.base_batch,
                       "the batch --lr is meant for; the recommended batch's learning rate is scaled from it")
      ->capture_default_str();

  tune_cmd->add_flag("--no-race", f.no_race,
                     "skip the batch race (branched runs from a warm start): recommend from the noise scale's goodput");
  tune_cmd->add_option("--advice-budget", f.advice_budget_s,
                       "seconds of training the batch race may take (default: twice the fit and sweep's time, at least "
                       "30 s, at most 4 epochs at the best samples/s)");
  tune_cmd->add_flag("--compare-precision", f.compare_precision,
                     "also fit and measure bf16 (and fp16 on CUDA) at the recommended batch, and say whether it pays");
  tune_cmd->add_flag("--validate", f.validate,
                     "train to a target (--target-accuracy, default 0.85) at the recommended batch, the knee, and half "
                     "and twice the recommendation; recommend the one that got there soonest");
  add_validate_flags(tune_cmd, f);

  auto* validate_cmd = app.add_subcommand(
      "validate", "Train to a target test accuracy or loss at each batch size, with its scaled learning rate");
  add_workload_flags(validate_cmd, f);
  validate_cmd->add_option("--batch-sizes", f.batch_sizes, "the candidates: a list or range, e.g. 32,128,512")->required();
  add_validate_flags(validate_cmd, f);
  validate_cmd->add_option("--base-batch", f.base_batch, "the batch --lr is meant for")->capture_default_str();
  validate_cmd->footer("Example:\n  batchwise validate --model lenet --batch-sizes 32,128,512 --target-accuracy 0.85 "
                       "--json validate.json");

  auto* loader_cmd = app.add_subcommand(
      "loader", "Find the input-pipeline setting (workers, prefetch) that keeps the training step fed");
  add_workload_flags(loader_cmd, f);
  loader_cmd->add_option("--batch", f.loader_batch, "the batch size to feed")->capture_default_str();
  loader_cmd->add_option("--warmup", f.warmup, "unmeasured steps per setting")->capture_default_str();
  loader_cmd->add_option("--steps", f.steps, "measured steps per setting")->capture_default_str();
  loader_cmd->footer("Example:\n  batchwise loader --model resnet18 --dataset cifar10 --data-dir cifar-10-batches-bin "
                     "--augment --batch 128");

  auto* doctor_cmd = app.add_subcommand(
      "doctor", "Check the set-up: LibTorch build, BLAS, a GEMM rate against the CPU's peak, threads, CUDA");
  doctor_cmd->add_option("--threads", f.threads, "intra-op threads (default: torch's choice)");
  doctor_cmd->add_option("--json", f.json, "write the findings as JSON to FILE");
  doctor_cmd->footer("Example:\n  batchwise doctor\n  batchwise doctor --threads 1   # see what one thread costs");

  auto* plan_cmd = app.add_subcommand(
      "plan", "Micro-batch x accumulation steps x devices that keep a global batch exact, with its learning rate");
  add_workload_flags(plan_cmd, f);
  add_fit_flags(plan_cmd, f);
  add_distributed_flags(plan_cmd, f);
  plan_cmd->add_option("--global-batch", f.global_batch, "samples per optimizer step over all devices")->required();
  plan_cmd->add_option("--world-size", f.world_size, "devices (data-parallel ranks)")->capture_default_str();
  plan_cmd->add_option("--max-micro-batch", f.max_micro_batch,
                       "the largest batch one device runs (default: fit it now, with the fit flags)");
  plan_cmd->add_option("--last-batch", f.last_batch, "an epoch's short last batch: drop (drop_last), pad or keep")
      ->capture_default_str();
  plan_cmd->add_option("--base-batch", f.base_batch, "the batch --lr is meant for")->capture_default_str();
  plan_cmd->add_option("--fit-steps", f.fit_steps, "training steps per fit trial")->capture_default_str();
  plan_cmd->footer("Example:\n  batchwise plan --global-batch 4096 --world-size 2 --memory-budget 2GiB\n"
                   "  batchwise plan --global-batch 1000 --max-micro-batch 96 --multiple-of 8 --last-batch pad");

  auto* noise_cmd = app.add_subcommand("noise", "Measure the gradient noise scale (critical batch) during real training");
  add_workload_flags(noise_cmd, f);
  noise_cmd->add_option("--batch", f.noise_batch, "B: samples per training step")->capture_default_str();
  noise_cmd->add_option("--micro-batch", f.noise_micro_batch, "b: the small batch; divides --batch")->capture_default_str();
  noise_cmd->add_option("--steps", f.noise_steps, "training steps measured")->capture_default_str();
  noise_cmd->add_flag("--fixed-weights", f.fixed_weights, "measure without optimizer steps (at the initial weights)");
  noise_cmd->footer("Example:\n  batchwise noise --model lenet --batch 512 --micro-batch 32 --steps 100 --json noise.json");

  auto* history_cmd = app.add_subcommand("history", "List the runs stored in the history, newest first");
  history_cmd->add_option("--history", f.history, "the history database (default: $XDG_DATA_HOME/batchwise/history.sqlite)");
  history_cmd->add_option("--limit", f.history_limit, "runs to list")->capture_default_str();
  history_cmd->add_flag("--json", f.history_json, "print the runs as JSON");
  history_cmd->footer("Example:\n  batchwise history --limit 5\n  batchwise tune --reuse   # reuses a matching fit from it");

  auto* compare_cmd = app.add_subcommand("compare", "Two reports side by side, batch by batch, with ratios");
  compare_cmd->add_option("reports", f.compare_files, "two JSON reports written with --json: A, then B")
      ->required()
      ->expected(2);
  compare_cmd->add_option("--json", f.json, "write the comparison as JSON to FILE");
  compare_cmd->footer("Example:\n  batchwise tune --json laptop.json   # on one machine\n"
                      "  batchwise tune --json server.json   # on another\n"
                      "  batchwise compare laptop.json server.json");

  auto* report_cmd = app.add_subcommand("report", "Draw a JSON report as a self-contained HTML page with charts");
  report_cmd->add_option("report", f.report_file, "a JSON report written with --json")->required();
  report_cmd->add_option("-o,--output", f.html, "the HTML file to write (default: the report's name with .html)");
  report_cmd->footer("Example:\n  batchwise tune --json run.json\n  batchwise report run.json -o report.html   # open it in a browser");

  bound_numeric_flags(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // one line, as every other usage error
    const auto parsed = app.get_subcommands();
    const std::string name = parsed.empty() ? "" : " " + parsed.front()->get_name();
    fmt::print(stderr, "batchwise{}: {}; see batchwise{} --help\n", name, e.what(), name);
    return kExitUsage;
  }

  const std::string command = app.get_subcommands().front()->get_name();
  if (f.nproc > 1 && !cli::launched_rank())
    return cli::launch_ranks(f.nproc, argc, argv, f.dist_timeout_s + 10, kExitDistributed);
  // A rank other than 0 of a data-parallel run says which it is (its input may differ: its device).
  const int rank = env_rank();
  const std::string who = rank > 0 ? fmt::format("batchwise {} (rank {})", command, rank) : "batchwise " + command;
  auto say = [&](const std::string& text) { fmt::print(stderr, "{}: {}\n", who, text); };
  // Ctrl-C or a kill: a running --cmd trial's process group (its own, out of the terminal's
  // reach) goes too, then batchwise ends as the signal says.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction action {};
    action.sa_handler = [](int signo) {
      stop_running_command();
      signal(signo, SIG_DFL);
      raise(signo);
    };
    sigaction(sig, &action, nullptr);
  }
  try {
    return run(command, f);
  } catch (const ConfigError& e) {
    say(e.what());
    return kExitUsage;
  } catch (const DataError& e) {
    say(e.what());
    return kExitData;
  } catch (const ModelError& e) {
    say(e.what());
    return kExitModel;
  } catch (const DeviceError& e) {
    say(e.what());
    return kExitDevice;
  } catch (const DistributedError& e) {
    say(e.what());
    return kExitDistributed;
  } catch (const Error& e) {
    say(e.what());
    return kExitFailed;
  } catch (const c10::Error& e) {
    say("torch: " + first_line(e.what_without_backtrace()));
    return kExitFailed;
  } catch (const std::exception& e) {
    say(first_line(e.what()));
    return kExitFailed;
  }
}
