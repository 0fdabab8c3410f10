#pragma once
/// Runs a user's training command as a child process at one batch size and reports what happened:
/// how it ended, its step times (from the line protocol below), its peak resident memory and, where
/// NVML is present, its device memory. Torch-free: the child may be any program in any framework.
///
/// The line protocol (docs/cmd.md): the child prints, on stdout or stderr, lines that start with
/// `batchwise:` followed by a bare word and/or key=value pairs separated by spaces:
///   batchwise: step samples=256 loss=0.53   once per training step, after the optimizer step
///   batchwise: samples_per_s=1234.5         the child's own throughput; preferred when present
///   batchwise: peak_bytes=123456            device memory the child measured itself
/// `samples` defaults to the batch size. Unknown keys and malformed values are ignored.
///
/// No shell is involved: argv is executed as given (after substituting {batch} and {steps}), so an
/// argument like `; touch /tmp/x` stays one literal argument.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/outcome.h"

// Fluent option like torch's TORCH_ARG, written here so that this header stays torch-free.
#define BATCHWISE_COMMAND_ARG(T, name)                     \
 public:                                                   \
  CommandOptions& name(const T& new_##name) {              \
    this->name##_ = new_##name;                            \
    return *this;                                          \
  }                                                        \
  const T& name() const noexcept { return this->name##_; } \
  T& name() noexcept { return this->name##_; }             \
                                                           \
 private:                                                  \
  T name##_

namespace batchwise {

/// Environment variables as name, value pairs.
using CommandEnvironment = std::vector<std::pair<std::string, std::string>>;

/// How to run the command for one batch size.
/// Example:
///   run_command(CommandOptions({"python3", "train.py", "--batch-size={batch}", "--steps={steps}"}, 256)
///                   .steps(5).timeout_s(120).memory_limit_bytes(8LL << 30));
struct CommandOptions {
  CommandOptions(std::vector<std::string> argv, int64_t batch) : argv_(std::move(argv)), batch_(batch) {}

  /// The command, as a template: "{batch}" and "{steps}" are replaced inside each element
  /// ("--bs={batch}" becomes "--bs=256"; see substitute()). argv[0] is looked up on PATH unless it
  /// contains a '/'. REQUIRES: non-empty.
  BATCHWISE_COMMAND_ARG(std::vector<std::string>, argv);
  /// Samples per step. REQUIRES: >= 1.
  BATCHWISE_COMMAND_ARG(int64_t, batch);
  /// Measured steps. REQUIRES: >= 1. NOTE: "{steps}" becomes warmup + steps, the number of step
  /// lines the child should print; the child is told nothing else about warm-up.
  BATCHWISE_COMMAND_ARG(int, steps) = 5;
  /// Step lines not timed first (start-up, allocator and caches settle). REQUIRES: >= 0.
  /// NOTE: with 0, the first step is timed from the child's start, start-up included.
  BATCHWISE_COMMAND_ARG(int, warmup) = 2;
  /// Wall-clock limit in seconds: past it the process tree gets SIGTERM, then SIGKILL one second
  /// later. 0: none.
  BATCHWISE_COMMAND_ARG(double, timeout_s) = 0;
  /// Resident memory the child's process tree may use (its process group and every descendant, those
  /// that called setsid included): its RSS sampled every 10 ms, or with several processes (forked
  /// workers, torchrun's ranks) their summed PSS every 100 ms, so shared pages count once; above it
  /// the tree is killed (SIGKILL) and the run is out of memory. 0: none.
  BATCHWISE_COMMAND_ARG(int64_t, memory_limit_bytes) = 0;
  /// Extra environment for the child, applied last. The child always gets PYTHONUNBUFFERED=1,
  /// BATCHWISE_BATCH=<batch> and BATCHWISE_STEPS=<warmup + steps>; entries here override them.
  BATCHWISE_COMMAND_ARG(CommandEnvironment, env);
  /// Once warmup + steps step lines have been read, stop the child (SIGTERM, then SIGKILL) and
  /// count the run as ok: for scripts that train until told otherwise.
  BATCHWISE_COMMAND_ARG(bool, stop_after_steps) = false;
  /// Otherwise, one that trains on (prints a step line past warmup + steps) is stopped (SIGTERM, then SIGKILL) this
  /// long after its last step asked for, or as long again as its steps took from its start, whichever is longer,
  /// and its steps count (ran_on_past_steps); so are they where its steps had ended when the timeout came. One that
  /// stops training is left to end (an evaluation, a checkpoint, a peak line). One that trained on had run each trial
  /// to its timeout, which then discarded it. REQUIRES: finite, >= 0.
  BATCHWISE_COMMAND_ARG(double, past_steps_grace_s) = 10;
};

/// What one run of the command did. Plain data; classify() turns it into an outcome.
struct CommandResult {
  std::vector<std::string> argv;  ///< as executed, after substitution
  int64_t batch = 0;
  int warmup = 0;                  ///< step lines not timed
  int steps = 0;                   ///< measured steps asked for (the child was told warmup + steps)
  double timeout_s = 0;            ///< as asked (0: none)
  int64_t memory_limit_bytes = 0;  ///< as asked (0: none)

  int exit_status = -1;                   ///< the child's exit status; -1 when it died of a signal (or unknown)
  int signal = 0;                         ///< the signal that ended the child; 0 when it exited
  bool timed_out = false;                 ///< batchwise stopped it at timeout_s
  bool killed_over_memory_limit = false;  ///< batchwise killed it above memory_limit_bytes
  bool stopped_after_steps = false;       ///< batchwise stopped it after enough steps (option, or ran_on_past_steps)
  /// Its steps ended, it ran on (trained on past the grace, CommandOptions::past_steps_grace_s, or reached the
  /// timeout) and batchwise stopped it: its steps count.
  bool ran_on_past_steps = false;
  /// The kernel's OOM kill counter of our cgroup (v2 memory.events or v1 memory.oom_control) rose
  /// during the run and the child died of a SIGKILL batchwise did not send.
  bool oom_killer = false;
  bool oom_killer_known = false;  ///< the counter could be read before and after
  int64_t oom_kills = 0;          ///< the counter's rise: OOM kills anywhere in our cgroup meanwhile
  std::string oom_message;        ///< first output line that reads as out of memory; empty if none

  /// Peak resident memory: the larger of the sampled process-tree sum and the child's own
  /// high-water mark (VmHWM) as last sampled.
  int64_t peak_rss_bytes = 0;
  std::optional<int64_t> reported_peak_bytes;  ///< from `batchwise: peak_bytes=`
  std::optional<int64_t> nvml_peak_bytes;      ///< highest NVML per-process sum seen, if any used
  /// Device memory: the larger of the two above (each is a lower bound: the child's own figure
  /// leaves out the CUDA context, NVML's is sampled). Unset for a run that used no device.
  std::optional<int64_t> peak_device_bytes;

  /// One per measured step (step lines after the first `warmup`), seconds between consecutive
  /// step lines as batchwise read them.
  std::vector<double> step_times_s;
  std::vector<int64_t> step_samples;  ///< samples of each measured step
  /// Each measured step's `batch=`: the batch the command's data loader gave it (per process, before accumulation),
  /// where its line says (the framework callbacks'); 0 where it does not.
  std::vector<int64_t> step_batches;
  /// The callback that said it reports steps (`batchwise: reporter=NAME`, as it is made): a run of it that printed no
  /// step line trained nothing, whatever its wall time, and is no wall-time measure.
  std::string reporter;
  /// The type of a batch whose samples the callback could not count (`uncounted=TYPE` on a step line): its steps
  /// were counted as the batch asked for, which batchwise then cannot check.
  std::string uncounted_batch;
  /// The step lines read before oom_message was (the steps it trained before printing it).
  int oom_message_step = 0;
  std::optional<double> reported_samples_per_s;  ///< last `batchwise: samples_per_s=`
  std::optional<double> loss;                    ///< last reported loss (a finite one)
  std::optional<double> first_loss;              ///< first reported loss (a finite one)
  /// A step line reported `loss=nan` (or inf): the command's training is not finite, an error trial.
  bool non_finite_loss = false;
  std::string non_finite_loss_text;  ///< the first such value, as printed
  int non_finite_loss_step = 0;      ///< the step line it came on (1-based; 0: before any)
  int steps_seen = 0;                ///< step lines read, warm-up included
  int protocol_lines = 0;            ///< `batchwise:` lines read, malformed ones included
  double wall_s = 0;                 ///< from start to exit
  std::string output_tail;           ///< last 20 lines of stdout and stderr, interleaved as read
};

/// A CommandResult judged: the outcome, one sentence that says exactly what happened, and the
/// throughput used to rank batch sizes.
struct CommandVerdict {
  Outcome outcome = Outcome::Error;
  std::string message;
  /// Ok only: the child's samples_per_s when reported, else measured samples / measured time,
  /// else (no usable step lines) batch x (warmup + steps) / wall_s. 0 otherwise.
  double samples_per_s = 0;
  /// Ok only: the measured step times; with wall_timing, wall_s / (warmup + steps) once per step.
  std::vector<double> step_times_s;
  /// The timing is the crude wall-time fallback (start-up and imports included).
  bool wall_timing = false;
};

/// A command that printed no step line is timed by its wall time only when it ran at least this
/// long: a shorter run is start-up, and cannot be told from one that trained nothing (`sh -c true`
/// exits in milliseconds). docs/cmd.md states the rule.
constexpr double kWallFallbackMinS = 1.0;

/// Judges a run. In order: killed over the memory limit, killed by the OOM killer, or an
/// out-of-memory message (unless the child exited 0 after all its steps) -> Oom; timed out ->
/// Timeout; stopped after its steps, or exit status 0 -> Ok (without a timed step or a reported
/// samples/s, only after kWallFallbackMinS of wall time: sooner it "ran no step" or was "too short to
/// time" -> Error; and never where it ended within its warm-up -> Error); anything else -> Error.
CommandVerdict classify(const CommandResult& result);

/// Replaces {batch} with `batch` and {steps} with `steps` inside each element of `argv`
/// (run_command passes warmup + steps). A placeholder is a name in braces;
/// other braces ("{}", "{'a': 1}") are kept, and "{{" and "}}" are literal braces ("{{batch}}"
/// gives "{batch}"). Throws ConfigError for an empty argv or program name, or an unknown
/// {placeholder} (named in the message).
std::vector<std::string> substitute(const std::vector<std::string>& argv, int64_t batch, int steps);

/// Whether an output line reads as a framework's out-of-memory message (PyTorch CPU and CUDA,
/// Python MemoryError, TensorFlow, JAX, std::bad_alloc, ENOMEM).
bool is_oom_message(const std::string& line);

/// Throws ConfigError where `program` (a command's argv[0]) cannot be started: not found (on PATH, as
/// run_command looks for it), not executable, not a program; the message names it and the fix, as
/// run_command's would in the first trial. A program with a {placeholder} is left to run_command.
void check_program(const std::string& program);

/// Runs the command once and waits for it (and kills what is left of its process tree).
/// Runs, out-of-memory runs, crashes and time-outs are results, not exceptions.
/// Throws ConfigError for invalid options, Error when the program cannot be started at all
/// (not found, not executable): the message names argv[0] and the fix.
/// NOTE: the calling thread blocks; stdout and stderr are read while the child runs.
CommandResult run_command(const CommandOptions& options);

/// Kills the process group of the command run_command is running now, if any, and the descendants
/// outside it found by the last scan (at most 100 ms old). Async-signal-safe:
/// call it from a SIGINT/SIGTERM handler, so that an interrupted batchwise leaves no trainer (or
/// its workers) behind; the child's own group does not get the terminal's Ctrl-C.
void stop_running_command();

}  // namespace batchwise

#undef BATCHWISE_COMMAND_ARG
