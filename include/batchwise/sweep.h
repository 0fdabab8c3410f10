#pragma once
/// Sweep: samples/s, step time and peak memory at each of a list of batch sizes, with
/// repetitions interleaved across sizes, and the knee where a bigger batch stops paying.
#include <torch/arg.h>

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
  /// < 0: never, in tune too.
  TORCH_ARG(int, stop_after_flat) = 0;
  TORCH_ARG(TrialCallback, on_trial);
  TORCH_ARG(TrialStartCallback, on_trial_start);
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
  int64_t budget_bytes = 0;
};

/// The JSON fields of a SweepResult, in JSON order (fields.h); its budget is the report's.
template <class V, class T, IfRecord<T, SweepResult> = 0>
void fields(V& v, T& s) {
  v("points", s.points);
  v("knee_batch", s.knee_batch);
  v("knee_tolerance", s.knee_tolerance);
  v("repetitions", s.repetitions);
  v("not_run", s.not_run, When{!s.not_run.empty()});
  v("not_run_reason", s.not_run_reason, When{!s.not_run.empty()});
}

/// The smallest batch whose samples/s is within `tolerance` of the best ok point; none if no point
/// is ok.
std::optional<int64_t> knee_batch(const std::vector<Trial>& points, double tolerance = 0.05);

/// Runs the sweep. A batch that runs out of memory is listed with outcome oom, and larger batches
/// are listed as oom without being run.
SweepResult sweep(Workload& workload, const SweepOptions& options);
SweepResult sweep(TrialRunner& runner, const SweepOptions& options);

/// The step profile (profile_steps) at each ok point of a sweep; a batch that cannot be profiled keeps
/// its sweep figures and adds a line to `warnings`.
std::vector<StepProfile> profile_sweep(Workload& workload, const SweepResult& sweep, std::vector<std::string>& warnings);

}  // namespace batchwise
