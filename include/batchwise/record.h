#pragma once
/// The report record: everything one command measured, as plain data (google/benchmark's Run).
/// Library calls fill it (tune returns one); reports only read it (report.h: JSON and the console
/// table; html.h, compare.h and history.h read it back from JSON through report_from_json). Adding
/// a field: declare it here, write and read it in report.cpp, document it in docs/report-schema.md.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/advice.h"
#include "batchwise/context.h"
#include "batchwise/convergence.h"
#include "batchwise/fit.h"
#include "batchwise/loader.h"
#include "batchwise/recommend.h"
#include "batchwise/sweep.h"
#include "batchwise/trial.h"
#include "batchwise/validate.h"

namespace batchwise {

/// One precision in tune --compare-precision.
struct PrecisionPoint {
  Precision precision = Precision::Fp32;
  std::optional<int64_t> fit_batch; ///< its largest fitting batch
  bool fit_limited_by_max = false;
  int64_t batch = 0;                ///< the batch its throughput was measured at (the same for all)
  double samples_per_s = 0;
  int64_t peak_bytes = 0;           ///< at `batch`
  double speed_ratio = 1;           ///< samples_per_s over the run's own precision's
  double memory_ratio = 1;          ///< peak_bytes over the run's own precision's
  std::string verdict;              ///< whether it pays here, in one sentence
};

/// A data-parallel run (--nproc, or torchrun's environment): who took part, with what budget.
struct DistributedRun {
  int world_size = 1;
  Backend backend = Backend::Gloo;
  std::vector<int64_t> rank_budget_bytes;  ///< each rank's own budget; the run's budget is the smallest
  double timeout_s = 0;                 ///< a collective waiting longer than this ends the run
};

/// Everything one command measured.
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
  std::optional<RunPlan> run_plan;               ///< tune, plan: the run at each batch that matters
  std::optional<AccumulationPlan> accumulation;  ///< batchwise plan
  std::optional<NoiseResult> noise;              ///< batchwise noise; tune
  std::optional<Goodput> goodput;                ///< tune, from the sweep and the noise scale
  std::optional<ValidationResult> validation;    ///< batchwise validate; tune --validate
  std::vector<StepProfile> step_profile;         ///< --profile: one per batch size that ran
  std::vector<PrecisionPoint> precisions;        ///< tune --compare-precision; the run's own first
  std::optional<LoaderSearch> loader;            ///< batchwise loader; tune when input-bound
  std::optional<DistributedRun> distributed;     ///< data-parallel runs: trials' batches are per device
};

}  // namespace batchwise
