#pragma once
/// The report record: everything one command measured, as plain data (google/benchmark's Run).
/// Library calls fill it (tune returns one); reports only read it (report.h: JSON and the console
/// table; html.h, compare.h and history.h read it back from JSON through report_from_json). Each
/// record's JSON fields are listed once, beside its struct (fields.h says how); adding a field: the
/// member, its line in the field list, and its line in docs/report-schema.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/context.h"
#include "batchwise/convergence.h"
#include "batchwise/fields.h"
#include "batchwise/fit.h"
#include "batchwise/loader.h"
#include "batchwise/lr.h"
#include "batchwise/plan.h"
#include "batchwise/race.h"
#include "batchwise/recommend.h"
#include "batchwise/run_race.h"
#include "batchwise/sweep.h"
#include "batchwise/trial.h"
#include "batchwise/validate.h"

namespace batchwise {

/// One precision in tune --compare-precision.
struct PrecisionPoint {
  Precision precision = Precision::Fp32;
  std::optional<int64_t> fit_batch;  ///< its largest fitting batch
  bool fit_limited_by_max = false;
  int64_t batch = 0;  ///< the batch its throughput was measured at (the same for all)
  double samples_per_s = 0;
  int64_t peak_bytes = 0;   ///< at `batch`
  double speed_ratio = 1;   ///< samples_per_s over the run's own precision's
  double memory_ratio = 1;  ///< peak_bytes over the run's own precision's
  std::string verdict;      ///< whether it pays here, in one sentence
};

/// The JSON fields of a PrecisionPoint, in JSON order (fields.h).
template <class V, class T, IfRecord<T, PrecisionPoint> = 0>
void fields(V& v, T& p) {
  v("precision", p.precision);
  v("fit_batch", p.fit_batch);
  v("fit_limited_by_max", p.fit_limited_by_max);
  v("batch", p.batch);
  v("samples_per_s", p.samples_per_s);
  v("peak_bytes", p.peak_bytes);
  v("speed_ratio", p.speed_ratio);
  v("memory_ratio", p.memory_ratio);
  v("verdict", p.verdict);
}

/// A data-parallel run (--nproc, or torchrun's environment): who took part, with what budget.
struct DistributedRun {
  int world_size = 1;
  Backend backend = Backend::Gloo;
  std::vector<int64_t> rank_budget_bytes;  ///< each rank's own budget; the run's budget is the smallest
  double timeout_s = 0;                    ///< a collective waiting longer than this ends the run
};

/// The JSON fields of a DistributedRun, in JSON order (fields.h).
template <class V, class T, IfRecord<T, DistributedRun> = 0>
void fields(V& v, T& d) {
  v("world_size", d.world_size);
  v("backend", d.backend);
  v("rank_budget_bytes", d.rank_budget_bytes);
  v("timeout_s", d.timeout_s);
}

/// Everything one command measured.
/// One of tune's phases and the wall time it took.
struct PhaseTime {
  std::string phase;  ///< "fit", "sweep", "noise scale", "race", "validation", "precisions", ...
  double wall_s = 0;
  double expected_s = 0;  ///< what tune expected it to take when it stated its plan (0: not stated)
};

template <class V, class T, IfRecord<T, PhaseTime> = 0>
void fields(V& v, T& p) {
  v("phase", p.phase);
  v("wall_s", p.wall_s);
  v("expected_s", p.expected_s, When{p.expected_s > 0});
}

/// tune's time, phase by phase as each ran (a phase with nothing to do is absent), and in all.
struct TuneTiming {
  std::vector<PhaseTime> phases;
  double total_s = 0;
  /// The whole run as tune stated it once the fit had timed the steps: the time by then plus the
  /// phases it expected after (0: not stated, e.g. the fit found no batch).
  double expected_s = 0;
  /// The most it stated the run could take: every batch swept, a race trained over its plateau.
  double at_most_s = 0;
  /// The whole run as tune stated it again before the race, where the rest was far off the first
  /// statement (restated_plan): the time by then plus the race's (0: not stated again).
  double restated_s = 0;
};

template <class V, class T, IfRecord<T, TuneTiming> = 0>
void fields(V& v, T& t) {
  v("phases", t.phases);
  v("total_s", t.total_s);
  v("expected_s", t.expected_s, When{t.expected_s > 0});
  v("at_most_s", t.at_most_s, When{t.at_most_s > 0});
  v("restated_s", t.restated_s, When{t.restated_s > 0});
}

struct Report {
  Context context;
  WorkloadInfo workload;
  int64_t budget_bytes = 0;
  double target = 0.9;
  std::optional<FitResult> fit;
  std::optional<SweepResult> sweep;
  std::optional<Recommendation> recommendation;
  std::optional<Plan> plan;  ///< --plan-for
  /// The learning rate for the recommended (tune) or planned (plan) batch.
  std::optional<LrAdvice> lr;
  std::optional<BatchRace> race;                 ///< tune: the race that chose the batch
  std::optional<RunRace> run_race;               ///< tune --epochs: the compressed runs that chose it
  std::optional<RunPlan> run_plan;               ///< tune, plan: the run at each batch that matters
  std::optional<AccumulationPlan> accumulation;  ///< batchwise plan
  std::optional<NoiseResult> noise;              ///< batchwise noise; tune
  std::optional<Goodput> goodput;                ///< tune, from the sweep and the noise scale
  std::optional<ValidationResult> validation;    ///< batchwise validate; tune --validate
  std::vector<StepProfile> step_profile;         ///< --profile: one per batch size that ran
  std::vector<PrecisionPoint> precisions;        ///< tune --compare-precision; the run's own first
  std::optional<LoaderSearch> loader;            ///< batchwise loader; tune when input-bound
  std::optional<DistributedRun> distributed;     ///< data-parallel runs: trials' batches are per device
  std::optional<TuneTiming> timing;              ///< tune: each phase's wall time, and the whole run's
};

/// The training samples a trial's batch draws from without repeating one within a step: the whole set, or, in a
/// data-parallel run (its batches per device; every rank draws its slice of one global batch from the same order),
/// each rank's share of it. 0: not known (a training command).
inline int64_t per_device_training_samples(const Report& r) {
  const int world = r.distributed ? std::max(r.distributed->world_size, 1) : 1;
  return r.workload.dataset_size / world;
}

/// The JSON report's fields, in JSON order (fields.h; docs/report-schema.md documents each).
template <class V, class T, IfRecord<T, Report> = 0>
void fields(V& v, T& r) {
  v.computed("schema_version", "1");
  v("context", r.context);
  v("workload", r.workload);
  v("budget_bytes", r.budget_bytes);
  v("target", r.target);
  v("distributed", r.distributed, When{r.distributed.has_value()});
  v("fit", r.fit, When{r.fit.has_value()});
  v("sweep", r.sweep, When{r.sweep.has_value()});
  v("recommendation", r.recommendation, When{r.recommendation.has_value()});
  v("plan", r.plan, When{r.plan.has_value()});
  v("lr", r.lr, When{r.lr.has_value()});
  v("race", r.race, When{r.race.has_value()});
  v("run_race", r.run_race, When{r.run_race.has_value()});
  v("run_plan", r.run_plan, When{r.run_plan.has_value()});
  v("accumulation_plan", r.accumulation, When{r.accumulation.has_value()});
  v("noise_scale", r.noise, When{r.noise.has_value()});
  v("loader", r.loader, When{r.loader.has_value()});
  v("precision_comparison", r.precisions, When{!r.precisions.empty()});
  v("step_profile", r.step_profile, When{!r.step_profile.empty()});
  v("validation", r.validation, When{r.validation.has_value()});
  v("goodput", r.goodput, When{r.goodput.has_value()});
  v("timing", r.timing, When{r.timing.has_value()});
}

}  // namespace batchwise
