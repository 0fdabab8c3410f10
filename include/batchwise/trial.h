#pragma once
/// A trial: warm-up steps, then measured full training steps (forward, loss, backward, optimizer
/// step) at one batch size, with the step times, peak memory and outcome it produced.
#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/fields.h"
#include "batchwise/outcome.h"
#include "batchwise/utilisation.h"

namespace batchwise {

class Workload;

/// What a workload is, for reports: names, shapes and sizes.
struct WorkloadInfo {
  std::string model;
  std::string dataset;
  /// The data it read, as an absolute path: the folder (fashion-mnist, cifar10) or the file (idx, npy,
  /// csv); empty where none was read (synthetic data, a training command's, a Python model's own).
  std::string data_path;
  std::string labels_path;  ///< idx's and npy's labels file, likewise; empty where the data holds its labels
  std::string loss = "cross-entropy";
  std::string optimizer;
  double lr = 0;
  std::string precision = "fp32";
  /// The type the model's parameters are held in ("float32"; "bfloat16" or "float64" for a model built
  /// so, which trains in it whatever `precision`, the autocast, says); empty where unknown (--cmd).
  std::string parameter_dtype;
  std::vector<int64_t> input_shape;  ///< one sample, without the batch dimension
  /// Token workloads whose lengths vary: the shortest and longest length. Trials run at the
  /// longest (the worst case for memory), so a fitted batch cannot run out on its longest batch.
  std::vector<int64_t> seq_len_range;
  int64_t num_classes = 0;
  int64_t dataset_size = 0;     ///< samples the batches are drawn from
  int64_t parameter_count = 0;  ///< every parameter, trainable and frozen (a tensor two modules share, once)
  /// Of parameter_count, those that train (requires_grad): what gradients and optimizer state are held
  /// for. Empty where unknown (--cmd, a report from before 2026-12-06).
  std::optional<int64_t> trainable_parameter_count;
  int64_t parameter_bytes = 0;  ///< parameters and buffers, exactly

  /// A training command's (--cmd): its model, data and rate are its own, none of them known here.
  bool is_command() const { return parameter_count == 0 && dataset_size == 0; }
};

/// The JSON fields of a WorkloadInfo, in JSON order (fields.h).
template <class V, class T, IfRecord<T, WorkloadInfo> = 0>
void fields(V& v, T& w) {
  v("model", w.model);
  v("dataset", w.dataset);
  v("data_path", w.data_path, NullUnless{!w.data_path.empty()});
  v("labels_path", w.labels_path, NullUnless{!w.labels_path.empty()});
  v("loss", w.loss);
  v("optimizer", w.optimizer);
  v("lr", w.lr);
  v("precision", w.precision);
  v("parameter_dtype", w.parameter_dtype, NullUnless{!w.parameter_dtype.empty()});
  v("input_shape", w.input_shape);
  v("seq_len_range", w.seq_len_range, NullUnless{!w.seq_len_range.empty()});
  v("num_classes", w.num_classes);
  v("dataset_size", w.dataset_size);
  v("parameter_count", w.parameter_count);
  v("trainable_parameter_count", w.trainable_parameter_count);
  v("parameter_bytes", w.parameter_bytes);
}

/// Bytes of the training state, counted exactly from its tensors.
struct StateBytes {
  int64_t parameter_bytes = 0;        ///< parameters and buffers
  int64_t gradient_bytes = 0;         ///< gradients held after the step
  int64_t optimizer_state_bytes = 0;  ///< e.g. SGD momentum: 1 x parameters; Adam: 2 x
};

/// The JSON fields of a StateBytes, in JSON order (fields.h).
template <class V, class T, IfRecord<T, StateBytes> = 0>
void fields(V& v, T& s) {
  v("parameter_bytes", s.parameter_bytes);
  v("gradient_bytes", s.gradient_bytes);
  v("optimizer_state_bytes", s.optimizer_state_bytes);
}

/// The phases of one training step, each ended by a device synchronisation: the profile pass's
/// figures (a synchronisation after every phase would distort the throughput a sweep ranks, so
/// sweeps never use it).
struct StepPhases {
  double data_s = 0;       ///< assembling the batch on the host
  double h2d_s = 0;        ///< copying it to the device (and normalising it there)
  double forward_s = 0;    ///< forward pass and loss
  double backward_s = 0;   ///< zeroing gradients and the backward pass
  double optimizer_s = 0;  ///< the optimizer step
  double total_s = 0;      ///< the whole step, end to end, in the same pass
};

/// The step profile at one batch size: mean phase times over `steps` profiled steps.
struct StepProfile {
  int64_t batch = 0;
  int steps = 0;
  StepPhases mean;
  /// data + h2d + forward + backward + optimizer over total: 1 when the phases account for the step.
  double coverage = 0;
};

/// The JSON fields of a StepProfile, in JSON order (fields.h): the phases sit beside batch and steps.
template <class V, class T, IfRecord<T, StepProfile> = 0>
void fields(V& v, T& p) {
  v("batch", p.batch);
  v("steps", p.steps);
  v("data_s", p.mean.data_s);
  v("h2d_s", p.mean.h2d_s);
  v("forward_s", p.mean.forward_s);
  v("backward_s", p.mean.backward_s);
  v("optimizer_s", p.mean.optimizer_s);
  v("total_s", p.mean.total_s);
  v("coverage", p.coverage);
}

/// A data-parallel trial (DistributedRunner), rank by rank. Trial::batch is the per-device batch;
/// Trial::samples_per_s counts every rank's samples.
struct DistributedTrial {
  int world_size = 1;
  Backend backend = Backend::Gloo;
  int64_t global_batch = 0;              ///< batch x world_size
  std::vector<double> rank_step_time_s;  ///< each rank's median step time
  std::vector<int64_t> rank_peak_bytes;  ///< each rank's peak memory
  std::vector<Outcome> rank_outcomes;    ///< what happened on each rank
  /// Of the measured steps' time, the share spent in the gradient all-reduce (waiting for the
  /// slowest rank included), averaged over the ranks.
  double allreduce_share = 0;
  /// Rank 0 alone, at the same per-device batch (DistributedRunner's measure_scaling); and the
  /// global samples/s over world_size x that: 1 is perfect scaling.
  std::optional<double> single_process_samples_per_s;
  std::optional<double> scaling_efficiency;
  /// Why single_process_samples_per_s is null (the run alone would outlast the other ranks'
  /// patience, or did not end ok); empty otherwise.
  std::string single_process_note;
};

/// The JSON fields of a DistributedTrial, in JSON order (fields.h).
template <class V, class T, IfRecord<T, DistributedTrial> = 0>
void fields(V& v, T& d) {
  v("world_size", d.world_size);
  v("backend", d.backend);
  v("global_batch", d.global_batch);
  v("rank_step_time_s", d.rank_step_time_s);
  v("rank_peak_bytes", d.rank_peak_bytes);
  v("rank_outcomes", d.rank_outcomes);
  v("allreduce_share", d.allreduce_share);
  v("single_process_samples_per_s", d.single_process_samples_per_s);
  v("scaling_efficiency", d.scaling_efficiency);
  v("single_process_note", d.single_process_note);
}

/// A trial that waits for its batches longer than this share of its step time is input-bound.
constexpr double kInputBoundShare = 0.2;

/// The most measured steps TrialOptions::min_time_s adds up to.
constexpr int kMaxMeasuredSteps = 10000;

/// Options of one trial.
/// Example: `run_trial(workload, TrialOptions(256).warmup(2).steps(5))`.
struct TrialOptions {
  explicit TrialOptions(int64_t batch) : batch_(batch) {}
  /// Samples per step. REQUIRES: >= 1.
  TORCH_ARG(int64_t, batch);
  /// Unmeasured steps first (allocator, caches and lazily created optimizer state settle).
  TORCH_ARG(int, warmup) = 2;
  /// Measured steps. REQUIRES: >= 1: a trial that trains zero steps measures nothing.
  TORCH_ARG(int, steps) = 5;
  /// More measured steps than `steps` while their times add up to less than this many seconds (at
  /// most kMaxMeasuredSteps in all): a step of a few milliseconds is measured often enough that the
  /// clock's and the scheduler's jitter average out. 0: exactly `steps`.
  TORCH_ARG(double, min_time_s) = 0;
  /// Device memory the trial may use; an allocation beyond it is an out-of-memory outcome.
  /// 0: the device's own limit.
  TORCH_ARG(int64_t, limit_bytes) = 0;
  /// Wall-clock limit in seconds, checked between steps; 0: none.
  TORCH_ARG(double, timeout_s) = 0;
  /// Each step accumulates gradients over this many micro-batches of the batch (as equal as
  /// possible; at most one per sample) before the optimizer step: the batch trained the way an
  /// accumulation plan trains it. 1: a plain step.
  TORCH_ARG(int64_t, accumulation_steps) = 1;
  /// Run the utilisation monitor (CPU per core, resident memory, NVML on GPU) during the steps.
  TORCH_ARG(bool, monitor) = true;
};

/// What one trial (or, in a sweep, all repetitions at one batch size) measured.
struct Trial {
  int64_t batch = 0;
  Outcome outcome = Outcome::Error;
  int warmup_steps = 0;  ///< warm-up steps asked for (per repetition)
  int steps = 0;         ///< measured steps asked for (per repetition)
  int repetitions = 1;
  int64_t accumulation_steps = 1;  ///< micro-batches per step (TrialOptions::accumulation_steps)
  int steps_run = 0;               ///< full training steps that completed, warm-up included
  /// fp16: of steps_run, those whose gradients overflowed, so their optimizer step was skipped
  /// (Workload::skipped_steps). A skipped step times fast and, with Adam, creates no optimizer
  /// state: a trial that skipped steps understates a trained step's time and peak memory.
  int skipped_steps = 0;
  /// Peak device memory: on CPU every accounted tensor byte, on CUDA the caching allocator's
  /// reserved bytes. For an out-of-memory trial, the peak reached before the failing request.
  int64_t peak_bytes = 0;
  int64_t peak_allocated_bytes = 0;  ///< CUDA: allocated (not reserved) peak; CPU: same as peak_bytes
  std::vector<double> step_times_s;  ///< raw, one per measured step, in the order they ran
  /// Of each measured step in step_times_s, the time it waited for its batch: an in-process trial's (a sweep's point
  /// pools its repetitions'), empty where they are not known (a command's trial, a report read back: not in the JSON).
  std::vector<double> step_waits_s;
  double samples_per_s = 0;      ///< batch / median step time; 0 unless ok
  double samples_per_s_min = 0;  ///< from the slowest step
  double samples_per_s_max = 0;  ///< from the fastest step
  /// samples_per_s is the trained program's own figure (a command's `samples_per_s=` line, or its
  /// step lines' `samples=` over the median step), not batch / median step time; a sweep then
  /// aggregates those figures (median over repetitions).
  bool throughput_reported = false;
  double step_time_s_median = 0;
  double step_time_s_stddev = 0;
  /// The interquartile range of the step times: over the median, the spread reports print. One
  /// step that another process delayed moves it little, where it can multiply the stddev.
  double step_time_s_iqr = 0;
  double loss_first = 0;  ///< training loss of the first and last step run
  double loss_last = 0;
  double wall_s = 0;                  ///< the whole trial: warm-up, steps, restore
  std::optional<bool> within_target;  ///< set by fit: peak_bytes <= target x budget
  /// Set by fit --mode model: the peak its memory model predicted before the trial ran.
  std::optional<int64_t> predicted_peak_bytes;
  StateBytes state;  ///< after the last step (zero if no step completed, or nothing counts it: a --cmd trial)
  /// Of the measured steps' time, the share spent waiting for the next batch (next_batch).
  double data_wait_share = 0;
  /// data_wait_share above kInputBoundShare: the step waits for its input; more loader workers,
  /// prefetching or a cheaper transform would speed it up (batchwise loader finds the setting).
  bool input_bound = false;
  /// Of the time this process's threads were ready to run during the measured steps, the share they
  /// waited for a CPU: held by another process, or by more of its own threads than there are cores
  /// (Linux's run-queue delay over it and the time run, /proc/self/task/*/schedstat; in a sweep, the
  /// mean over repetitions; data-parallel ranks agree on the most any of them waited, as a step is as
  /// slow as its slowest rank and the sweep's retries must be the same on every rank). Under 2 % on a
  /// quiet machine. Unset where Linux does not give it, and for a trial without measured steps or run
  /// by a command. On a shared CPU a step longer than the scheduler's slice is nearly always
  /// interrupted and a shorter one often not, so the median step favours the smaller batches: larger
  /// ones read slower than they are.
  std::optional<double> cpu_wait_share;
  /// The utilisation monitor's record of the steps (in a sweep: the first repetition's).
  std::optional<UtilisationSummary> utilisation;
  /// Set for data-parallel trials: what every rank measured.
  std::optional<DistributedTrial> distributed;
  /// An error trial whose training loss stopped being a finite number (NaN or infinity): at the
  /// first step the data or the model, later the rate. A gradient that is not finite shows in the
  /// next step's loss. Its message says which.
  bool non_finite = false;
  /// A `--cmd` trial without step lines, timed by the command's wall time over its steps (start-up and
  /// imports included: a crude figure; docs/cmd.md gives the rule). Its message says so too.
  bool wall_timing = false;
  std::string message;  ///< why, for oom / error / timeout
};

/// A fit trial against the target, as the reports' "target" column reads it: "within", "over" (its
/// peak past the target, or out of memory), or "-" where nothing was held to it (an error, a
/// timeout: no peak was measured to the end).
inline const char* target_text(const Trial& t) {
  if (!t.within_target) return "-";
  if (*t.within_target) return "within";
  return t.outcome == Outcome::Ok || t.outcome == Outcome::Oom ? "over" : "-";
}

/// A sweep's point it did not run (at or above a batch that ran out of memory: out of memory by that bound, with no
/// step and no peak of its own), which the reports show as not run, not as a measured failure.
inline bool not_run(const Trial& t) {
  return t.outcome == Outcome::Oom && t.steps_run == 0 && t.peak_bytes == 0 && t.step_times_s.empty() &&
         t.wall_s == 0;  // (a command out of memory at its first step, with no peak figure, ran for a time)
}

/// The JSON fields of a Trial, in JSON order (fields.h).
template <class V, class T, IfRecord<T, Trial> = 0>
void fields(V& v, T& t) {
  const bool ok = t.outcome == Outcome::Ok;
  const bool measured = !t.step_times_s.empty(), ran = t.steps_run > 0;
  v("batch", t.batch);
  v("outcome", t.outcome);
  v("peak_bytes", t.peak_bytes);
  v("peak_allocated_bytes", t.peak_allocated_bytes);
  v("samples_per_s", t.samples_per_s, NullUnless{ok});
  v("samples_per_s_min", t.samples_per_s_min, NullUnless{ok});
  v("samples_per_s_max", t.samples_per_s_max, NullUnless{ok});
  v("step_time_s_median", t.step_time_s_median, NullUnless{measured});
  v("step_time_s_stddev", t.step_time_s_stddev, NullUnless{measured});
  v("step_time_s_iqr", t.step_time_s_iqr, NullUnless{measured});
  v("step_times_s", t.step_times_s);
  v("warmup_steps", t.warmup_steps);
  v("steps", t.steps);
  v("repetitions", t.repetitions);
  v("steps_run", t.steps_run);
  v("skipped_steps", t.skipped_steps, When{t.skipped_steps > 0});
  v("accumulation_steps", t.accumulation_steps, When{t.accumulation_steps > 1});
  v("data_wait_share", t.data_wait_share);
  v("input_bound", t.input_bound);
  v("cpu_wait_share", t.cpu_wait_share, When{t.cpu_wait_share.has_value()});
  v("utilisation", t.utilisation, When{t.utilisation.has_value()});
  v("distributed", t.distributed, When{t.distributed.has_value()});
  v("loss_first", t.loss_first, NullUnless{ran});
  v("loss_last", t.loss_last, NullUnless{ran});
  v("wall_s", t.wall_s);
  // CUDA: reserved, not allocated (0 where a report read back holds figures whose difference overflows)
  int64_t fragmentation = 0;
  if (__builtin_sub_overflow(t.peak_bytes, t.peak_allocated_bytes, &fragmentation)) fragmentation = 0;
  v.computed("fragmentation_bytes", fragmentation);
  v("within_target", t.within_target, When{t.within_target.has_value()});
  v("predicted_peak_bytes", t.predicted_peak_bytes, When{t.predicted_peak_bytes.has_value()});
  // Only where something was counted: a --cmd trial's tensors are not batchwise's to count, nor a Workload's of your
  // own without state_bytes (their zeros had read as a model of no bytes)
  const bool counted = t.state.parameter_bytes > 0 || t.state.gradient_bytes > 0 || t.state.optimizer_state_bytes > 0;
  v("state", t.state, When{ran && ok && counted});
  v("non_finite", t.non_finite, When{t.non_finite});
  v("wall_timing", t.wall_timing, When{t.wall_timing});
  v("message", t.message, When{!ok || !t.message.empty()});
}

/// Fills the samples_per_s and step_time_s statistics of `trial` from its raw step times.
void summarize_steps(Trial& trial);

/// A trial's spread as reports print it: the interquartile range of its step times over their
/// median (0 without steps).
double step_spread(const Trial& trial);

/// Samples/s as a run that waits for its input pays for it: batch / (the median step less its wait + the mean wait).
/// Workers that hand out batches in bursts leave most steps with a batch ready, so batch / the median step reads
/// the step's own speed, not what the pipeline delivers. Where the waits are not known, samples_per_s.
double fed_samples_per_s(const Trial& trial);

/// What fit, sweep and tune run their trials on. WorkloadRunner runs them on a Workload in this
/// process; CommandRunner (command_runner.h) runs a user's training command once per trial.
/// Implement it to drive another training engine.
class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  virtual WorkloadInfo info() const = 0;
  /// One trial. Out of memory, errors and timeouts are outcomes, not exceptions, and the training
  /// state is as it was before (or, for a separate process, untouched).
  virtual Trial run(const TrialOptions& options) = 0;
  /// Memory held before training a single sample (the model's own), checked against the budget.
  virtual int64_t held_bytes() = 0;
  /// The budget when none is given: 80 % of available RAM on CPU, on CUDA the device's total, or the
  /// share of it the process capped itself to (DeviceMemory::usable_bytes).
  virtual int64_t default_budget_bytes() = 0;
  /// The total memory of the device the trials run on (for reports).
  virtual int64_t device_total_bytes() = 0;
  /// The most of it the trials may use: device_total_bytes, or less where the process capped its
  /// share (DeviceMemory::usable_bytes).
  virtual int64_t device_usable_bytes() { return device_total_bytes(); }
  /// Whether its trials run TrialOptions::steps exactly, whatever TrialOptions::min_time_s asks: a
  /// training command's, and data-parallel ranks' (their all-reduces pair up). A sweep's report then
  /// says min_time_s 0.
  virtual bool runs_steps_exactly() const { return false; }
};

/// The memory budget trials run under: `requested` (--memory-budget), or the runner's default where
/// it is 0. A budget above the device's memory (device_total_bytes) is refused (ConfigError): a
/// trial past the memory there is would not stop at the budget but run out of the device's memory,
/// and on a CPU be killed by the kernel with the run lost; a fit would also say that larger batches
/// may fit where none can. So is one above the share the process capped itself to
/// (device_usable_bytes): its trials would run out of memory at the cap, not at the budget. Where
/// the runner cannot read its device's total (0), the budget stands.
/// A `requested` budget whose `target` share is not above what the model holds before its first
/// sample (its parameters and buffers, or the runner's held bytes) is refused too: no batch trains in
/// it (fit asks its target's share; the others the whole budget, target 1).
/// fit checks its budget; the CLI's session and Python's calls check --memory-budget as given.
int64_t checked_budget_bytes(TrialRunner& runner, int64_t requested, double target = 1);

/// Runs trials on a Workload in this process with run_trial. A trial that skipped some of its steps
/// (fp16 gradients that overflowed while the loss scale settled; the settled scale carries over, see
/// ModuleWorkload::loss_scale) runs once more, from the settled scale, and reports that run, with a
/// note of the first in its message and both runs' time in wall_s. One whose every step was skipped
/// did not settle the scale, so it is reported as it is.
class WorkloadRunner : public TrialRunner {
 public:
  explicit WorkloadRunner(Workload& workload) : workload_(workload) {}
  WorkloadInfo info() const override;
  Trial run(const TrialOptions& options) override;
  int64_t held_bytes() override;
  int64_t default_budget_bytes() override;
  int64_t device_total_bytes() override;
  int64_t device_usable_bytes() override;

 private:
  Workload& workload_;
};

/// Runs one trial on `workload`. Every step is real training on real batches. Before it returns,
/// parameters, buffers, gradients, optimizer state, training mode and the global RNG are restored
/// bit-identically (fp16's loss scale, batchwise's own, may stay settled: ModuleWorkload::loss_scale)
/// and the device's cache is released (on CUDA with the cuBLAS workspaces).
/// Throws only for unusable options (ConfigError); out of memory and step errors are outcomes.
Trial run_trial(Workload& workload, const TrialOptions& options);

}  // namespace batchwise
