#pragma once
/// tune: the whole of `batchwise tune` as one call. A fit (the largest batch that fits), a sweep
/// (samples/s at doublings up to it), the gradient noise scale and goodput, the batch race that picks
/// the batch and its learning rate, the run plan, and on request a validation to a target and a
/// precision comparison; when the recommended batch waits for its input, the loader setting that
/// feeds it. It returns the report record the CLI prints (record.h).
///
/// Example:
///   auto workload = make_workload(WorkloadOptions().model("lenet"));
///   Report report = tune(TuneSubject(*workload), TuneOptions().fit(FitOptions().budget_bytes(4LL << 30)));
///   std::cout << to_table(report);   // report.h
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "batchwise/fit.h"
#include "batchwise/race.h"
#include "batchwise/record.h"
#include "batchwise/run_race.h"
#include "batchwise/sweep.h"
#include "batchwise/validate.h"
#include "batchwise/workload.h"

namespace batchwise {

/// What tune measures. Trials run through `runner`; when batchwise trains the model itself
/// (`workload` is a ModuleWorkload) tune also measures the noise scale, races the batches, advises
/// the learning rate and follows up on the loader and the precision.
struct TuneSubject {
  /// A workload tune trains in this process: its trials run through a WorkloadRunner over it.
  explicit TuneSubject(Workload& workload);
  /// Trials through another runner (a user's command, data-parallel ranks); `workload` is the one the
  /// runner trains (a rank's own for data-parallel), null for a command.
  TuneSubject(TrialRunner& runner, Workload* workload);

  TrialRunner* runner = nullptr;
  Workload* workload = nullptr;
  /// How `workload` was built: the precision comparison builds one per precision from it, and the
  /// held-out data is its dataset's test split.
  std::optional<WorkloadOptions> options;
  /// Ranks of a data-parallel run (batches are per device): > 1 skips the noise scale, the race and
  /// the loader search, which are one process's measurements.
  int world_size = 1;
  /// The held-out data the race evaluates on; unset: the test split of `options`' dataset (or a
  /// sample of the training data, named so, where it has none), read once, when first needed.
  std::function<Dataset()> held_out;
  /// Frees `workload` and `runner` before the precision comparison, whose fits measure the whole
  /// process's peak: it must not include this precision's model. Unset: the comparison does not run.
  std::function<void()> release;
  /// The WorkloadRunner the first constructor made.
  std::shared_ptr<TrialRunner> own_runner;
};

/// Where a tune stands, for the caller to show.
struct TuneStage {
  std::string what;  ///< "measuring the gradient noise scale: 20 training steps at batch 1024 ..."
  /// A phase's start (fit, sweep, noise scale, race, validation, precisions): its number from 1, of
  /// `phases` planned when tune began (a phase that turns out to have nothing to do is skipped, and
  /// the total stays). 0: a note within a phase (a doctor's warning, the loader search).
  int phase = 0;
  int phases = 0;
  /// A phase's expected seconds (0: not known), and, on the line that states the plan once the fit
  /// has timed the steps (`plan`), the seconds tune expects to take from here to its end.
  double expected_s = 0;
  bool plan = false;
  /// On a phase's start, its kind: "fit", "sweep", "noise", "race", "validation" or "precisions";
  /// "validation ended" on the note after the validation's last run; "" on other notes and the plan.
  /// (The CLI lets a Ctrl-C stop the validation's runs, asking ValidateOptions::should_stop,
  /// between these two lines.)
  std::string name;
};

/// Options of tune. Example: `TuneOptions().fit(FitOptions().budget_bytes(1LL << 30)).race_budget_s(60)`.
struct TuneOptions {
  /// The fit; its on_trial callbacks report progress.
  TORCH_ARG(FitOptions, fit);
  /// The sweep; batch_sizes empty: doublings of fit.min (a multiple of fit.multiple_of) up to the
  /// fit, stopping where samples/s flattens (stop_after_flat 0), all of them when given.
  TORCH_ARG(SweepOptions, sweep);
  /// A fit already known (tune --reuse takes it from the run history): no fit trial runs.
  TORCH_ARG(std::optional<FitResult>, reuse_fit);
  /// The doctor's warnings first (a slow BLAS or too few threads distort every figure after them).
  TORCH_ARG(bool, doctor) = true;
  /// Phase times (data, to device, forward, backward, optimizer) at each swept batch.
  TORCH_ARG(bool, profile) = false;
  /// The gradient noise scale and goodput after the sweep.
  TORCH_ARG(bool, noise) = true;
  TORCH_ARG(int, noise_steps) = 20;
  /// The batch race (race.h): the batch and learning rate that reach the lowest held-out loss in
  /// equal training time. false: goodput's optimum, or the knee without a noise scale.
  TORCH_ARG(bool, race) = true;
  /// Wall-clock seconds of the race (batch race or run race), its range tests and evaluations
  /// included: the training gets this less what they are expected to take (race_overhead_s,
  /// run_race_overhead_s), at least a quarter of it. 0: training of twice the time tune took before the race
  /// (doctor, fit, sweep, profile, noise scale), at least 30 s, at most 4 epochs at the best samples/s, with the
  /// overhead on top.
  TORCH_ARG(double, race_budget_s) = 0;
  /// The user's held-out target for the race (0: none; BatchRaceOptions::target_accuracy): where a
  /// candidate reaches it within the race's budget, the race measures the time to it and stops.
  TORCH_ARG(double, target_accuracy) = 0;
  TORCH_ARG(double, target_loss) = 0;
  /// The user's run (`tune --epochs N --lr-schedule cosine`): when set, the run race (run_race.h)
  /// replaces the batch race: the answer is the batch that finishes these epochs soonest without a
  /// worse final model. 0: the batch race, which answers for its own horizon (its rung leads say how
  /// the answer moved as it trained longer).
  TORCH_ARG(double, epochs) = 0;
  TORCH_ARG(LrSchedule, lr_schedule) = LrSchedule::Constant;
  TORCH_ARG(std::function<void(const std::string&)>, on_run_race);
  /// The batch the workload's learning rate is meant for: rates scale from it.
  TORCH_ARG(int64_t, base_batch) = 32;
  /// Train the recommendation, the knee, and half and twice the recommendation to a target, and
  /// recommend the one that got there soonest (its batch_sizes are chosen here).
  TORCH_ARG(std::optional<ValidateOptions>, validate);
  /// Fit and measure every other precision this device trains in at the recommended batch.
  TORCH_ARG(bool, compare_precision) = false;
  /// When the recommended batch waits for its input, search the loader setting that feeds it.
  TORCH_ARG(bool, loader_search) = true;
  TORCH_ARG(std::function<void(const TuneStage&)>, on_stage);
  TORCH_ARG(std::function<void(const RaceProgress&)>, on_race);
  /// Asked as each phase ends: true ends tune there, throwing Error (the Python API's Ctrl-C, which
  /// the CLI takes as a signal instead). Empty: never.
  TORCH_ARG(std::function<bool()>, should_stop);
};

/// Runs tune on `subject` and returns its report: `report` as given (the caller's context, workload
/// and budget; those left empty are filled here) with the fit, sweep, noise scale, goodput, race,
/// recommendation, learning rate, run plan, profile, validation, precision comparison and loader
/// search that ran, and warnings in report.context.warnings. A fit that finds no batch ends it
/// there (report.fit says why).
Report tune(TuneSubject subject, const TuneOptions& options, Report report = {});

/// Whether `report` (a tune's) ran on a machine that trained slower than its sweep measured, past
/// what the tune planned: its run race or batch race stopped at its wall limit, or the phases the
/// most it stated counts (timing.at_most_s: the doctor, fit, sweep, noise scale and races; not the
/// validation, precision comparison, profile or loader search, which come on top) took more than
/// twice that and 30 s on top (a short tune's fixed costs, its evaluations and the process's start,
/// are not all in that figure). Its time is not what a tune of the same kind should expect to take.
bool slowed_past_its_plan(const Report& report);

/// The race's training budget by default: twice what the fit and sweep took (`spent_s`), at least
/// 30 s (a shorter race sees only the first moments of training, where small batches always lead),
/// at most 4 epochs of `dataset_size` at the best samples/s (a small dataset is raced over a few
/// epochs, not for 30 s).
double default_race_budget_s(double spent_s, int64_t dataset_size, double best_samples_per_s);

/// Throws ConfigError where `o` asks what tune cannot answer as asked, whatever the data: a run's length
/// beside a target, or two targets (check_targets), and a race's budget where no race runs. tune()
/// checks it; the Python API before it reads the data.
void check_tune_options(const TuneOptions& o);

}  // namespace batchwise
