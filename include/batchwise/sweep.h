#pragma once
/// Sweep: samples/s, step time and peak memory at each of a list of batch sizes, with
/// repetitions interleaved across sizes, and the knee where a bigger batch stops paying.
#include <torch/arg.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/fields.h"
#include "batchwise/fit.h"
#include "batchwise/trial.h"

namespace batchwise {

/// Options of a sweep.
/// Example: `sweep(workload, SweepOptions().batch_sizes({16, 64, 256}).repetitions(3))`.
struct SweepOptions {
  TORCH_ARG(std::vector<int64_t>, batch_sizes);
  TORCH_ARG(int, warmup) = 2;
  TORCH_ARG(int, steps) = 5;
  /// Each repetition measures at least this many seconds of steps (TrialOptions::min_time_s): more
  /// than `steps` where steps are short. Not for a training command or data-parallel ranks, which
  /// run exactly `steps`.
  TORCH_ARG(double, min_time_s) = 0.1;
  /// Each repetition visits every batch size once; odd repetitions run the sizes in reverse, so
  /// drift (thermal, other load) favours none.
  TORCH_ARG(int, repetitions) = 3;
  TORCH_ARG(int64_t, budget_bytes) = 0;
  /// The knee is the smallest batch within this fraction of the best samples/s.
  TORCH_ARG(double, knee_tolerance) = 0.05;
  TORCH_ARG(double, trial_timeout_s) = 0;
  /// Micro-batches per step (TrialOptions::accumulation_steps).
  TORCH_ARG(int64_t, accumulation_steps) = 1;
  /// Run the utilisation monitor during each trial (TrialOptions::monitor).
  TORCH_ARG(bool, monitor) = true;
  /// When > 0: the first repetition (ascending) stops going up once this many batches in a row
  /// fail to beat the best samples/s so far by the knee tolerance; larger batches are not run (a
  /// batch past the knee only costs time, and a large one on a slow model costs minutes). tune uses 3
  /// when this is 0 and it chose the batches (doublings up to the fit); batches given are all swept;
  /// < 0: never, in tune too. A batch that looks flat because it ran far slower than the best so
  /// far (kNoisyShare) is measured again before it ends the sweep: another process on the cores
  /// slows a trial, it never speeds one up, so the faster figure is the batch's.
  TORCH_ARG(int, stop_after_flat) = 0;
  /// Progress: index counts the planned trials (sizes x repetitions, a count that never changes);
  /// the first repetition's trials that stop_after_flat leaves out count as done (the index jumps),
  /// and a re-measure outside the plan comes with index -1.
  TORCH_ARG(TrialCallback, on_trial);
  TORCH_ARG(TrialStartCallback, on_trial_start);
  /// Predicted seconds of one trial at a batch (tune's, from the fit's step times: time_plan.h).
  /// When set, the sweep counts the time left over its planned trials (an Eta: the predictions left,
  /// scaled by how those run compare) and gives it to on_eta after each trial, before on_trial.
  TORCH_ARG(std::function<double(int64_t)>, expected_trial_s);
  TORCH_ARG(std::function<void(double left_s)>, on_eta);
};

/// One point per batch size, aggregated over repetitions (raw step times kept).
struct SweepResult {
  std::vector<Trial> points;
  /// Batches left out by stop_after_flat, and why.
  std::vector<int64_t> not_run;
  std::string not_run_reason;
  std::optional<int64_t> knee_batch;
  int repetitions = 0;
  double knee_tolerance = 0.05;
  double min_time_s = 0;
  int64_t budget_bytes = 0;
  /// Batches measured once more than the repetitions asked, because their repetitions mostly
  /// disagreed (kNoisyShare) where the fastest of them would move the knee, or because their first
  /// figure, that far below the best so far, would have ended the sweep; ascending.
  std::vector<int64_t> remeasured;
  /// Of those, the batches whose repetitions still mostly disagree where it moves the knee: the
  /// knee rests on noise.
  std::vector<int64_t> unsettled;
  /// Empty, or what the noise the sweep met means for its figures (tune and sweep put it in the
  /// report's warnings).
  std::string noise_warning;
  /// Batches one of whose trials waited for a core more than kSharedCpuShare of its time, in
  /// steps long enough to be interrupted (kInterruptibleStepS), each such trial run once more at
  /// the sweep's end, when a burst of other work may be over; the one that waited less counts, so
  /// the repetitions stay as many (a retry that fails joins them, as any failure does). The retries
  /// stop at the first that waits over kSharedCpuShare again (the machine is still shared), fails or
  /// reads no share, and are at most one repetition's worth; one entry per retry, in the order they
  /// ran.
  std::vector<int64_t> cpu_retried;
  /// How many of those retries waited less and count in place of the trial they retried.
  int cpu_retries_kept = 0;
  /// Empty, or that the sweep shared the CPU (its trials' median Trial::cpu_wait_share above
  /// kSharedCpuShare, after the retries) and what that does to its figures.
  std::string shared_cpu_warning;
  /// tune's second look (retime): the batches its race turns on, timed again in alternated trials
  /// after the sweep, each trial pooled into its point (the repetitions count them); ascending.
  std::vector<int64_t> retimed;
  /// How many rounds of them ran (each batch once a round; the last cut short where a trial failed;
  /// those left out because a trial waited for a core included),
  /// and the largest standard error, as a share, of a retimed batch's samples/s against the fastest
  /// of them, a ratio per round, over those rounds (1: fewer than two rounds, unknown). It is the
  /// error of the paired rounds; the points' figures pool the sweep's trials with theirs.
  int retime_rounds = 0;
  double retime_error = 0;
  /// Why the rounds stopped: the figures known to the precision asked, or the budget or the most
  /// rounds reached first, or a trial that failed; or why none ran.
  std::string retime_note;
  /// The warnings above that are not empty, for the report's (context.warnings).
  std::vector<std::string> warnings() const {
    std::vector<std::string> out;
    for (const std::string* w : {&noise_warning, &shared_cpu_warning})
      if (!w->empty()) out.push_back(*w);
    return out;
  }
};

/// A sweep whose trials waited for a CPU more than this share of the time their threads were ready
/// to run (the median over its batches) is warned of: a quiet machine reads under 2 %, one training
/// thread beside one busy loop on its core about half.
constexpr double kSharedCpuShare = 0.1;

/// A trial whose median step is at least this long is nearly always interrupted while another
/// process holds its core, so its figures carry the wait: Linux's base scheduler slice is 0.75 ms
/// times 1 + log2 of the CPUs, up to 8 of them, so 3 ms at most (1.5 ms on 2). A shorter step's
/// median is one no wait interrupted, and its wait share can pass kSharedCpuShare on a quiet machine
/// (a thread pool waking at each parallel region): it is not run again for it.
constexpr double kInterruptibleStepS = 0.003;

/// The median over a sweep's batches that ran of the share of the time their threads were ready to
/// run that they waited for a core (Trial::cpu_wait_share); 0 where none was read.
double cpu_wait_share(const SweepResult& s);

/// A repetition (or a first measurement) this much slower than the same batch's fastest, or than the
/// best samples/s before it, is taken for noise and measured again where that matters. Repetitions
/// of short steps differ by about a third even on a quiet machine (docs/cli.md): a lower threshold
/// would flag a quiet machine.
constexpr double kNoisyShare = 0.4;

/// The JSON fields of a SweepResult, in JSON order (fields.h); its budget is the report's.
template <class V, class T, IfRecord<T, SweepResult> = 0>
void fields(V& v, T& s) {
  v("points", s.points);
  v("knee_batch", s.knee_batch);
  v("knee_tolerance", s.knee_tolerance);
  v("repetitions", s.repetitions);
  v("min_time_s", s.min_time_s);
  v("remeasured", s.remeasured, When{!s.remeasured.empty()});
  v("unsettled", s.unsettled, When{!s.unsettled.empty()});
  v("noise_warning", s.noise_warning, When{!s.noise_warning.empty()});
  v("cpu_retried", s.cpu_retried, When{!s.cpu_retried.empty()});
  v("cpu_retries_kept", s.cpu_retries_kept, When{!s.cpu_retried.empty()});
  v("shared_cpu_warning", s.shared_cpu_warning, When{!s.shared_cpu_warning.empty()});
  v("not_run", s.not_run, When{!s.not_run.empty()});
  v("not_run_reason", s.not_run_reason, When{!s.not_run.empty()});
  v("retimed", s.retimed, When{!s.retimed.empty()});
  v("retime_rounds", s.retime_rounds, When{!s.retimed.empty()});
  v("retime_error", s.retime_error, When{!s.retimed.empty()});
  v("retime_note", s.retime_note, When{!s.retime_note.empty()});
}

/// The smallest batch whose samples/s is within `tolerance` of the best ok point; none if no point
/// is ok.
std::optional<int64_t> knee_batch(const std::vector<Trial>& points, double tolerance = 0.05);

/// Runs the sweep. A batch that runs out of memory is listed with outcome oom, and larger batches
/// are listed as oom without being run.
SweepResult sweep(Workload& workload, const SweepOptions& options);
SweepResult sweep(TrialRunner& runner, const SweepOptions& options);

/// A second look at a few batches a sweep measured (tune's: those its race turns on): one sweep of
/// three repetitions reads two batches 5 % apart in either order (docs/benchmarks.md, "The pair each
/// mlp verdict turns on"), and a race's rules read differences of 5 %. Rounds of alternated trials
/// of these batches only (ascending, then descending), with the sweep's settings.
/// Example: `retime(runner, sweep_options, result, RetimeOptions().batches({512, 1024}).budget_s(3))`.
struct RetimeOptions {
  /// Batches of the sweep whose points ran ok; fewer than two, or any other, are not timed.
  TORCH_ARG(std::vector<int64_t>, batches);
  /// Stop once each batch's samples/s against the fastest of them (by their pooled figures), a ratio
  /// per round, has a standard error over the rounds at most this share...
  TORCH_ARG(double, precision) = 0.015;
  /// ...after at least this many rounds, and at most this many.
  TORCH_ARG(int, min_rounds) = 3;
  TORCH_ARG(int, max_rounds) = 12;
  /// The most seconds of trials (their wall_s); a round that would pass it, by its batches' last
  /// trials, is not run. 0: no limit but max_rounds.
  TORCH_ARG(double, budget_s) = 0;
  /// Each trial, as it ends (index -1: outside the sweep's plan).
  TORCH_ARG(TrialCallback, on_trial);
};

/// Times `o.batches()` again (RetimeOptions), pooling each trial into its point of `sweep` as a
/// further repetition, then the knee again; records what it did in sweep.retimed and after (retimed
/// stays empty where no round ran, the note saying why). A trial that fails joins its point, as in
/// the sweep (one out of memory bounds the larger batches), and the timing stops there. A round with
/// a trial that waited for a core (over kSharedCpuShare of its time, in interruptible steps) counts
/// for nothing: its trials are not pooled nor its ratios read, and the note says how many. Runs nothing
/// where fewer than two of the batches ran ok in the sweep (or their runner reported its own
/// samples/s: a command's step lines, which the pooled steps would not move).
void retime(TrialRunner& runner, const SweepOptions& sweep_options, SweepResult& sweep, const RetimeOptions& o);

/// The step profile (profile_steps) at each ok point of a sweep; a batch that cannot be profiled keeps
/// its sweep figures and adds a line to `warnings`.
std::vector<StepProfile> profile_sweep(Workload& workload, const SweepResult& sweep,
                                       std::vector<std::string>& warnings);

}  // namespace batchwise
