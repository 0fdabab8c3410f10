#pragma once
/// Validation by real training from the same starting state at each candidate batch size, each with
/// its scaled learning rate. Two modes: time to a target (train until a held-out metric reaches it:
/// what the goodput model predicts), and full runs (train a given number of epochs with a warm-up
/// and a decaying rate, as the user's run will, and compare final held-out quality and time).
#include <torch/arg.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <functional>

#include "batchwise/advice.h"
#include "batchwise/choices.h"
#include "batchwise/convergence.h"
#include "batchwise/data.h"
#include "batchwise/fields.h"
#include "batchwise/outcome.h"
#include "batchwise/schedule.h"

namespace batchwise {

class Workload;

/// The held-out accuracy the command line trains to when given neither a target nor a run length.
inline constexpr double kDefaultTargetAccuracy = 0.85;

/// Example: `validate(workload, test_set, ValidateOptions({64, 256}).target_accuracy(0.85))`.
struct ValidateOptions {
  explicit ValidateOptions(std::vector<int64_t> batch_sizes) : batch_sizes_(std::move(batch_sizes)) {}
  TORCH_ARG(std::vector<int64_t>, batch_sizes);
  /// Stop when held-out accuracy reaches this (classification); 0: not a target.
  TORCH_ARG(double, target_accuracy) = 0;
  /// Stop when held-out loss falls to this; 0: not a target. Exactly one of the two targets is
  /// required (both: ConfigError), unless `epochs` is set (then neither).
  TORCH_ARG(double, target_loss) = 0;
  /// Full runs: train every candidate exactly this many epochs with `lr_schedule` (no target), and
  /// compare final held-out quality and training time. 0: the target mode.
  TORCH_ARG(double, epochs) = 0;
  /// The rate's shape over a full run after the advised warm-up (schedule.h); only with `epochs`.
  TORCH_ARG(LrSchedule, lr_schedule) = LrSchedule::Constant;
  /// Full runs: also train this batch-size schedule (schedule.h) over the same run, each phase at
  /// its batch's advised rate, so that it is measured like a fixed batch. Empty: none.
  TORCH_ARG(std::vector<BatchPhase>, batch_schedule);
  /// Full runs: where the best final quality is at the smallest batch trained, train half of it as
  /// well, and again, at most this many times: a best at the edge of the grid says only that a
  /// smaller batch may be better still (an H200's transformer, 4 epochs: tune validated 2,048 to
  /// 16,384, found 2,048 best, and 256 ends 4 points above it). 0: the batches given only.
  TORCH_ARG(int, extend_below) = 0;
  /// Give up after this many epochs of training data.
  TORCH_ARG(double, max_epochs) = 3;
  /// Give up after this much training time (seconds) per candidate; 0: no limit.
  TORCH_ARG(double, max_seconds) = 600;
  /// Evaluate after every this many training samples; 0: every 1/20 of an epoch (with `epochs`, every
  /// tenth of the run).
  TORCH_ARG(int64_t, eval_every_samples) = 0;
  /// The learning rate is scaled from (base_batch, base_lr) with scale_lr; base_lr 0: the workload's.
  TORCH_ARG(int64_t, base_batch) = 32;
  TORCH_ARG(double, base_lr) = 0;
  /// Each candidate's rate is advised as tune advises it (advise_lr from the same starting weights:
  /// the rule capped by a range test at that batch, warmed up over an epoch). false: the rule alone,
  /// with its own warm-up (linear: 5 epochs, capped at a quarter of max_epochs).
  TORCH_ARG(bool, measure_lr) = true;
  /// Evaluate on the first this many held-out samples; 0: all of them.
  TORCH_ARG(int64_t, held_out_samples) = 0;
  /// check_target_unmet_at_start already ran on these weights (the CLI's, before its stage line):
  /// validate() does not evaluate the held-out samples for it again.
  TORCH_ARG(bool, target_checked) = false;
  /// Stop a candidate once its training time passes this multiple of the fastest time to the target
  /// so far: it can no longer come within it. 0: never (every candidate runs to its target or limit).
  TORCH_ARG(double, stop_slower_than) = 0;
  /// The device memory a run's training may hold (its budget, kept to as a trial keeps to it): past
  /// it the run fails as out of memory at that batch. The held-out evaluations are not held to it
  /// (their batch is batchwise's, not the run's). 0: no limit.
  TORCH_ARG(int64_t, limit_bytes) = 0;
  /// Called after every evaluation.
  TORCH_ARG(std::function<void(const struct ValidateProgress&)>, on_progress);
  /// Asked after every training step and before every candidate: true stops the validation there
  /// (the CLI's Ctrl-C). The run under way is dropped (it did not finish), no later candidate
  /// trains, the runs that finished are kept and judged among themselves, and
  /// ValidationResult::not_trained names the rest. A run whose step failed (threw) while it says
  /// true is the stop's too, dropped and named, not a failed run (Python's Ctrl-C raises in the
  /// model's forward). Unset: never.
  TORCH_ARG(std::function<bool()>, should_stop);
};

/// Where a validation stands, after an evaluation.
struct ValidateProgress {
  int64_t batch = 0;
  std::string
      schedule;  ///< a batch-size schedule's run ("64:0,256:2"; `batch` its first phase's); empty: a fixed batch
  int index = 0, count = 0;  ///< the candidate's place, and how many there are
  double epochs = 0;
  double train_s = 0;  ///< this candidate's training time so far
  double loss = 0;
  std::optional<double> accuracy;
  /// Training time this candidate may still take: to its --max-seconds or --max-epochs, or the
  /// stop_slower_than limit, whichever is nearest.
  double limit_left_s = 0;
  /// Training time to the target (time_to_target); none when the metric is not improving.
  std::optional<double> target_left_s;
  double elapsed_s = 0;  ///< wall time since the validation began, evaluations included
};

/// One evaluation on the held-out set.
struct ValidationPoint {
  int64_t samples = 0;  ///< training samples seen so far
  int64_t steps = 0;
  double train_s = 0;  ///< training time so far (evaluations excluded)
  double loss = 0;
  std::optional<double> accuracy;
};

/// Training time a run still needs to reach a target accuracy or loss (0: none), the sooner of the
/// two: each measure as a line in the log of training time (learning curves flatten, so a line in
/// time itself would promise the target far too soon), fitted by least squares through the
/// evaluations of the latest half of the training time (at least the last two), so that one noisy
/// evaluation does not swing it; none when neither measure moves towards its target along its line.
std::optional<double> time_to_target(const std::vector<ValidationPoint>& curve, double target_accuracy,
                                     double target_loss);

/// The JSON fields of a ValidationPoint, in JSON order (fields.h).
/// A point's loss as the JSON holds it: a loss that is not finite (a diverged run) is null there, and reads
/// back not a number, not 0 (it had read "loss 0.0000" in the HTML and compare).
template <class V, class T>
void loss_field(V& v, T& point) {
  v.property(
      "loss", point, [](const auto& p) { return std::isfinite(p.loss) ? std::optional<double>(p.loss) : std::nullopt; },
      [](auto& p, const std::optional<double>& loss) {
        p.loss = loss ? *loss : std::numeric_limits<double>::quiet_NaN();
      });
}

template <class V, class T, IfRecord<T, ValidationPoint> = 0>
void fields(V& v, T& p) {
  v("samples", p.samples);
  v("steps", p.steps);
  v("train_s", p.train_s);
  loss_field(v, p);
  v("accuracy", p.accuracy);
}

/// One candidate batch size.
struct ValidationRun {
  int64_t batch = 0;
  LrAdvice lr;               ///< the rate and warm-up trained with
  int64_t warmup_steps = 0;  ///< linear warm-up actually applied, in optimizer steps
  double warmup_epochs = 0;  ///< the same in epochs
  bool reached = false;
  double train_s = 0;  ///< to the target, or until it gave up
  int64_t steps = 0;
  double epochs = 0;
  double eval_s = 0;     ///< time spent evaluating (not in train_s)
  ValidationPoint last;  ///< the last evaluation
  std::vector<ValidationPoint> curve;
  std::string message;  ///< why it stopped without reaching the target; or an error
  /// Ok where the run trained (to the target, to a limit, or to its run's end); Oom where it ran out of
  /// memory; Error where a step failed or the loss stopped being finite (`message` words it). A
  /// validation in which no run trained is a failure (the CLI's exit code, Python's TrainingError).
  Outcome outcome = Outcome::Ok;
  /// Full runs: the held-out loss and accuracy after the last step, on the whole held-out set.
  std::optional<double> final_loss, final_accuracy;
  /// Full runs: final quality within the noise of the best run's (ValidationResult::good_batches).
  bool good = false;
  /// A batch-size schedule's run ("64:0,256:2"; `batch` is its first phase's, `lr` its rate): empty
  /// for a fixed batch. Each phase's advised rate, in order.
  std::string schedule;
  std::vector<double> phase_lrs;
  /// On a CPU: the share of the run's time its threads waited for a core while ready to run
  /// (Linux's run-queue delay, as Trial::cpu_wait_share); none where it was not read.
  std::optional<double> cpu_wait_share;
  /// Whether `last` is an evaluation: a run stopped before its first (by a limit, a signal, a failure) has none, and
  /// its loss is no figure (its 0 had read as a perfect loss).
  bool evaluated() const { return !curve.empty() || reached; }
};

/// The JSON fields of a ValidationRun, in JSON order (fields.h): of its advice, the rate, rule and cap.
template <class V, class T, IfRecord<T, ValidationRun> = 0>
void fields(V& v, T& r) {
  v("batch", r.batch);
  v("lr", r.lr.lr);
  v("lr_rule", r.lr.scaled.rule);
  v("lr_capped", r.lr.capped);
  v("warmup_steps", r.warmup_steps);
  v("warmup_epochs", r.warmup_epochs);
  v("reached", r.reached);
  v("train_s", r.train_s);
  v("steps", r.steps);
  v("epochs", r.epochs);
  v("eval_s", r.eval_s);
  v.property(  // the last evaluation's; null where there was none, or it was not finite
      "loss", r,
      [](const auto& run) {
        return run.evaluated() && std::isfinite(run.last.loss) ? std::optional<double>(run.last.loss) : std::nullopt;
      },
      [](auto& run, const std::optional<double>& loss) {
        run.last.loss = loss ? *loss : std::numeric_limits<double>::quiet_NaN();
      });
  v("accuracy", r.last.accuracy);
  v("message", r.message);
  v("outcome", r.outcome, When{r.outcome != Outcome::Ok});
  v("final_loss", r.final_loss, When{r.final_loss.has_value()});
  v("final_accuracy", r.final_accuracy, When{r.final_accuracy.has_value()});
  v("good", r.good, When{r.final_loss.has_value()});
  v("schedule", r.schedule, When{!r.schedule.empty()});
  v("phase_lrs", r.phase_lrs, When{!r.schedule.empty()});
  v("cpu_wait_share", r.cpu_wait_share, When{r.cpu_wait_share.has_value()});
  v("curve", r.curve);
}

struct ValidationResult {
  std::string target;            ///< "test accuracy >= 0.85" or "test loss <= 0.4"
  std::string held_out;          ///< the held-out set's name and size
  int64_t held_out_samples = 0;  ///< the samples each evaluation reads (0 in a report older than the field)
  std::vector<ValidationRun> runs;
  /// The candidate that reached the target in the least training time; none if none did. Full runs:
  /// the good batch that trained in the least time.
  std::optional<int64_t> fastest_batch;
  /// Full runs: their length and the rate's shape; 0 and "" in the target mode.
  double epochs = 0;
  std::string lr_schedule;
  /// Full runs: the best final quality (accuracy for class labels, else loss), and the batches whose
  /// final quality is within the held-out set's noise of it: accuracy within max(0.005, two standard
  /// errors of a proportion over the held-out set), loss within 2 % (no per-sample spread is kept).
  std::optional<int64_t> best_batch;
  std::vector<int64_t> good_batches;
  /// Full runs: the held-out loss and accuracy at the initial weights, on the whole test split. A run
  /// whose final loss is not 2 % below that loss, nor its accuracy above that accuracy beyond the
  /// split's noise, did not leave the start: it is neither best nor good (its `message` says so), and
  /// where no fixed batch's run left it there is no best or fastest batch.
  std::optional<double> loss_before, accuracy_before;

  /// Full runs: whether any fixed batch's run finished (has a final quality), left the start or not.
  bool any_fixed_run_finished() const {
    for (const ValidationRun& r : runs)
      if (r.final_loss && r.schedule.empty()) return true;
    return false;
  }
  /// A batch-size schedule's run (the last of `runs`), judged against the fixed batches' best: the
  /// training time it saves against the fastest good fixed batch (negative: it took longer), where
  /// its final quality is good; none otherwise.
  std::optional<double> schedule_saving;
  /// Stopped by ValidateOptions::should_stop: the batches whose runs did not finish (the one under way
  /// and those after it; a schedule's run by its first phase's batch, with `schedule_not_trained`).
  /// `best_batch`, `good_batches` and `fastest_batch` then judge the finished runs alone.
  bool interrupted = false;
  std::vector<int64_t> not_trained;
  bool schedule_not_trained = false;
  /// That schedule ("64:0,256:2"), so that a comparison sets it beside the same schedule only.
  std::string untrained_schedule;
};

/// The JSON fields of a ValidationResult, in JSON order (fields.h).
template <class V, class T, IfRecord<T, ValidationResult> = 0>
void fields(V& v, T& r) {
  v("target", r.target);
  v("held_out", r.held_out);
  v("held_out_samples", r.held_out_samples, When{r.held_out_samples > 0});
  v("fastest_batch", r.fastest_batch);
  v("epochs", r.epochs, When{r.epochs > 0});
  v("lr_schedule", r.lr_schedule, When{r.epochs > 0});
  v("best_batch", r.best_batch, When{r.epochs > 0});
  v("good_batches", r.good_batches, When{r.epochs > 0});
  v("loss_before", r.loss_before, When{r.epochs > 0});
  v("accuracy_before", r.accuracy_before, When{r.epochs > 0});
  v("schedule_saving", r.schedule_saving, When{r.schedule_saving.has_value()});
  v("interrupted", r.interrupted, When{r.interrupted});
  v("not_trained", r.not_trained, When{r.interrupted});
  v("schedule_not_trained", r.schedule_not_trained, When{r.interrupted});
  v("untrained_schedule", r.untrained_schedule, When{!r.untrained_schedule.empty()});
  v("runs", r.runs);
}

/// The most any run of `validation` waited for a core (ValidationRun::cpu_wait_share); 0 where none
/// was read. Above kSharedCpuShare the validation shared the CPU: shared_cpu_warning says so, and a
/// validated answer's confidence is low (recommend.h).
double most_cpu_wait_share(const ValidationResult& validation);

/// Fewer held-out samples than this judge batches by chance: a loss or an accuracy over them moves between
/// batches by more than the differences compared (the standard error of an accuracy over 100 samples is up
/// to 5 points).
constexpr int64_t kFewHeldOutSamples = 100;

/// Empty, or that runs of `validation` shared the CPU (a ValidationRun::cpu_wait_share above
/// kSharedCpuShare): their train_s, which decides the fastest good batch, carries another process's
/// share of the cores.
std::string shared_cpu_warning(const ValidationResult& validation);

/// What the report says of `validation`'s figures, each caller alike: runs that shared the CPU
/// (shared_cpu_warning), and a target mode's runs judged on fewer than kFewHeldOutSamples held-out
/// samples, where a run can reach the target by chance (full runs' good set is wide by the same noise).
std::vector<std::string> validation_warnings(const ValidationResult& validation);

/// Empty, or that batches of `batch_sizes` are larger than the `training_samples`: each of their steps
/// repeats samples, which a run of the user's would not; they are trained as asked, and said so.
std::string larger_than_training_set_warning(const std::vector<int64_t>& batch_sizes, int64_t training_samples);

/// What a stopped validation did not train, as a person reads it: its batches in order, then
/// `schedule` (how the caller names the batch-size schedule) where it was not trained either.
std::vector<std::string> not_trained_names(const ValidationResult& validation,
                                           const std::string& schedule = "the batch-size schedule");

/// The batches full runs add below the smallest of `batch_sizes` where it ends best
/// (ValidateOptions::extend_below): a half of it, then a half of that, up to `extend_below` of them
/// while a batch stays at least 1; validate() trains each only where the one above it ended best.
std::vector<int64_t> halvings_below(const std::vector<int64_t>& batch_sizes, int extend_below);

/// The halvings_below() of a stage line, as a person reads them: " (8 too where 16 ends best, then 4
/// where 8 does)", or "" where there are none.
std::string halvings_below_text(const std::vector<int64_t>& batch_sizes, int extend_below);

/// The fixed-batch run of `batch` in `validation` (not a batch-size schedule's); null if none ran.
const ValidationRun* fixed_run(const ValidationResult& validation, int64_t batch);

/// Throws ConfigError where what a run is judged by is asked twice: `epochs` (> 0: full runs, compared
/// by their final quality) beside a target (a run stopped when it is met), or two targets at once.
/// validate() and tune() check it; the CLI before it loads the data.
void check_targets(double epochs, double target_accuracy, double target_loss);

/// Throws ConfigError where, to a target (no --epochs), `options`' eval_every_samples is at or past where a
/// candidate's run over a training set of `dataset` samples ends (its whole steps within max_epochs): that run is
/// judged once, at its end, where any batch "reaches" the target. validate() checks it; tune's validation too,
/// before it trains, and warns instead.
void check_eval_interval(const ValidateOptions& options, int64_t dataset);

/// Throws ConfigError where `options`' target (target mode, no --epochs) is already met by `workload`'s
/// current weights on the held-out samples validate reads: every run would meet it at its first
/// evaluation, and the soonest would say nothing. The message names the flag and where training
/// starts. validate() checks it; the CLI before it says what it will train. Trains nothing.
void check_target_unmet_at_start(Workload& workload, const Dataset& held_out, const ValidateOptions& options);

/// Trains `workload` from its current state at each candidate batch (restoring the state before
/// each and after the last), evaluating on `held_out` (eval mode, no gradients). Throws ConfigError
/// for a workload that is not a ModuleWorkload, no target and no epochs (or both), or no candidates.
ValidationResult validate(Workload& workload, const Dataset& held_out, const ValidateOptions& options);

}  // namespace batchwise
