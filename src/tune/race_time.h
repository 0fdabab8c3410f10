// The tune's races' time, planned before they run: each race's training budget and the wall time
// it is expected to take (from the sweep's step times, or those the fit predicts), its options, and
// the most it may take, which is also its wall limit. tune states these figures (src/tune/tune.cpp).
// And the batches it could not order against its pick, for the run plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchwise/race.h"
#include "batchwise/record.h"
#include "batchwise/run_race.h"
#include "batchwise/time_plan.h"
#include "batchwise/tune.h"

namespace batchwise::detail {

/// The most a race trains by default: twice what tune took before the race (doctor, fit, sweep, profile, noise
/// scale), at least 30 s.
double race_ceiling_s(double spent_s);

/// Seconds of slack on top of a stated limit for a short run's fixed costs (its range tests,
/// evaluations, the process's start), which the step times it is planned from leave out.
constexpr double kFixedCostSlackS = 30;

/// The race's training and wall time. --advice-budget is the wall time the race may take, its range
/// tests and evaluations (`overhead_s`) in it; by default the training budget is
/// default_race_budget_s's and the overhead comes on top.
struct RaceTime {
  double train_s = 0, wall_s = 0;  // the budget given, and the wall time expected
  // The run race only: the candidates it races and leaves out (raced_options), and what it trains
  // the raced ones for.
  std::vector<int64_t> raced, not_raced;
  double raced_train_s = 0;
};

/// Either race's options over `candidates` at their `rates`.
BatchRaceOptions batch_race_options(const TuneOptions& o, const Report& report, const std::vector<int64_t>& candidates,
                                    const std::vector<double>& rates);
RunRaceOptions run_race_options(const TuneOptions& o, const Report& report, const std::vector<int64_t>& candidates,
                                const std::vector<double>& rates);

/// The race over `points` (a sweep's, or those `cost` predicts), with `cost`'s step times.
RaceTime race_time(const TuneOptions& o, const Report& report, const std::vector<Trial>& points, const StepCost& cost,
                   double spent_s, int64_t dataset_size, int64_t held_out_size);

/// The run race's time (race_time with --epochs): the candidates larger than the fastest and no
/// faster do not race, and the training falls by their share (raced_options). The batch race that
/// follows a run race stuck on the plateau keeps race_time's.
RaceTime run_race_time(const TuneOptions& o, const Report& report, const std::vector<Trial>& points,
                       const StepCost& cost, double spent_s, int64_t dataset_size, int64_t held_out_size);

/// The most a batch race takes (its wall time as planned, `t`): its training again, what a plateau at
/// the start may add, and kFixedCostSlackS. Its wall limit too: tune states it as the race's share of
/// the whole run's "at most", as it does the run race's (run_race_most_s). It had been 3x the wall
/// time and 30 s, past what tune stated: a lenet tune stopped for 95 s during its race ended 1.6x
/// past its "at most".
double batch_race_most_s(const RaceTime& t);

/// The most a run race takes (its wall time as planned, `t`): its reserve's race (one more), its
/// rounds past the plateau (kPlateauBudgets more budgets) or a longer round (one more budget), and
/// kFixedCostSlackS, as the batch race's limit has. Its wall limit: tune states it.
double run_race_most_s(const RaceTime& t);

/// The good batches the race that answered could not order against its pick (within_5_percent: the
/// batch race's, or the run race's where it answered), each with the rate it trained at, the pick
/// and `base_batch` left out: the run plan's "within 5 %" rows. For a run of `epochs` (tune --epochs), the
/// batch race's rates fit the run (for_the_run: a warm-up of a quarter of it at most), as the run race's
/// and the recommendation's do.
std::vector<LrAdvice> flat_range_rates(const Report& report, int64_t pick, int64_t base_batch, double epochs = 0,
                                       LrSchedule shape = LrSchedule::Constant);

/// "12 s", "4 min", "1.5 h": a duration as a person plans with it.
std::string duration_text(double s);

/// A race that stopped at its wall limit (`limit_s`, 0: not stated): what the user reads, `then` saying
/// what came of it.
std::string wall_limit_warning(const char* which, double limit_s, const char* then);

/// Before a race: the plan stated again, when what is left of the phases it counted (the race's
/// expected wall time `left_s`, at most `most_left_s`) is off what it stated for them
/// (`stated_left_s`: its expected end less the time spent in them) by more than 15 s and 30 % of the
/// larger. Its words say where the time went: each phase finished since the plan (`since_plan`) and
/// the race's figure against the one stated (`stated_race_s`; the default race's budget follows the
/// time spent before it), where it moved the end by a fifth of the move or more. `more`: the
/// validation or the precision comparison comes on top, as the plan said. Empty where the plan holds
/// or stated no race. Example: "expected now: about 57 s more, at most 2 min (the sweep took 21 s,
/// not the 56 s stated; the race about 57 s, not 3 min)".
std::string restated_plan(double stated_left_s, double left_s, double most_left_s,
                          const std::vector<PhaseTime>& since_plan, double stated_race_s, bool more);

/// Before a batch race the plan did not count (after a run race stuck on the plateau, which gave no
/// answer): what it adds, `wall_s` and at most `most_s`; `more` as restated_plan's. Example:
/// "expected now: about 40 s more, at most 2 min (the run race found no answer: its reference did not
/// leave the plateau at the start; a batch race follows, which the plan did not count)".
std::string unplanned_race_plan(double wall_s, double most_s, bool more);

/// A compressed run's live line: the run-start line's words (RunRaceOptions::on_progress), then how
/// far it has come.
std::string run_race_step_text(double run_epochs, const RunRaceStep& p);

}  // namespace batchwise::detail
