#pragma once
/// How long tune's phases will take, from the step times its first trials measured, and the time
/// left in a phase whose items are planned: what `batchwise tune` states before its sweep starts and
/// counts down while it runs.
///
/// Example:
///   const StepCost cost = step_cost(fit_result.trials);
///   const double sweep_s = sweep_seconds(cost, sweep_options);   // before the sweep runs
#include <cstdint>
#include <utility>
#include <vector>

#include "batchwise/trial.h"

namespace batchwise {

struct SweepOptions;

/// Seconds of one training step at a batch, read from trials that ran.
struct StepCost {
  /// (batch, seconds of its fastest measured step), ascending by batch, one per batch.
  std::vector<std::pair<int64_t, double>> step_s;
  /// A trial's seconds beyond its steps (restoring the state, starting the input pipeline): the
  /// median over the trials.
  double trial_overhead_s = 0;

  /// The step at `batch`: interpolated on log-log axes between the batches measured; below the
  /// smallest, that one's step time (a small batch is latency-bound); above the largest, its time per
  /// sample times the batch. 0 when nothing was measured.
  double at(int64_t batch) const;
  bool empty() const { return step_s.empty(); }
};

/// The step costs of `trials` (a fit's, a sweep's): those that ran ok with at least one timed step.
StepCost step_cost(const std::vector<Trial>& trials);

/// One sweep trial at `batch`: the overhead, the warm-up steps, and the measured steps (`steps`, or
/// as many as `min_time_s` takes, whichever is more).
double sweep_trial_seconds(const StepCost& cost, int64_t batch, int warmup, int steps, double min_time_s);

/// The whole sweep of `o` (every batch, every repetition), as if none stopped early.
double sweep_seconds(const StepCost& cost, const SweepOptions& o);

/// The batches a sweep of `o` is expected to run: all of them, or, when `o.stop_after_flat()` > 0,
/// those up to where the samples/s `cost` predicts stop rising by the knee tolerance.
std::vector<int64_t> expected_sweep_batches(const StepCost& cost, const SweepOptions& o);

/// Sweep points as `cost` predicts them (batch, samples/s, step time; outcome ok), for choosing what
/// follows a sweep before it has run.
std::vector<Trial> expected_points(const StepCost& cost, const std::vector<int64_t>& batches);

/// The noise scale at `batch` in micro-batches of `micro_batch`: each of `steps` steps computes a
/// gradient per micro-batch.
double noise_scale_seconds(const StepCost& cost, int64_t batch, int64_t micro_batch, int steps);

/// The time left in a phase of planned items whose seconds were predicted: the predictions not yet
/// run, scaled by how the finished items' times compare with theirs. When the predictions are off
/// by a factor, the estimate is right after the first item; when their proportions are right, it
/// never grows by more than the items' noise (a pace over items, elapsed / done x left, grows
/// whenever later items cost more, as a sweep's larger batches do).
class Eta {
 public:
  explicit Eta(double planned_s = 0) : planned_s_(planned_s) {}
  /// An item predicted at `predicted_s` took `actual_s`.
  void finished(double predicted_s, double actual_s);
  /// An item of the plan that will not run (a sweep stopped where samples/s flattened).
  void dropped(double predicted_s) { dropped_s_ += predicted_s; }
  /// An item added to the plan (a sweep's retry of a trial that shared the CPU).
  void added(double predicted_s) { planned_s_ += predicted_s; }
  /// Seconds left, 0 once the plan is run.
  double left_s() const;
  /// Actual over predicted for what finished (1 before anything did).
  double ratio() const { return predicted_done_s_ > 0 ? actual_done_s_ / predicted_done_s_ : 1; }

 private:
  double planned_s_ = 0, predicted_done_s_ = 0, actual_done_s_ = 0, dropped_s_ = 0;
};

}  // namespace batchwise
