// What the run race's units share: run_race_plan.cpp plans the compressed runs' lengths and states a race's
// cost, run_race.cpp trains the compressed runs and judges them,
// run_race_longer.cpp runs a race's compressed runs longer (its contested candidates, or all of them
// where its reference had not left the plateau at the start in its middle run), run_race_gaps.cpp
// reads the reference's learning curve and the candidates' gaps off them (and names the good batches
// as fast as the pick, within_5_percent), and run_race_schedule.cpp weighs a batch-size schedule
// against the pick.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/run_race.h"

namespace batchwise::detail {

/// What the rounds of one race_runs share: each batch's advised rate (its range test runs once),
/// every compressed run trained, by batch and steps: a later round of longer runs trains again only
/// what it has not (the same batch, rate and steps from the same state is the same run), and the
/// held-out loss before any.
struct Trained {
  std::map<int64_t, LrAdvice> advised;
  std::map<std::pair<int64_t, int64_t>, CompressedRun> runs;
  std::optional<double> loss_before;  // the held-out loss at the initial weights
  // RunRaceOptions::max_wall_s as a time on the race's clock, and whether a run passed it: no round
  // starts after that, and no compressed run.
  double deadline_s = std::numeric_limits<double>::infinity();
  bool out_of_time = false;
  double start_s = 0;  // the race's start on its clock, for RunRaceStep::elapsed_s
};

/// Seconds on the race's clock (RunRaceOptions::clock; unset: std::chrono::steady_clock).
double now_s(const RunRaceOptions& o);

/// Whether the race has passed its wall limit (Trained::deadline_s), read on its clock: once it has,
/// it stays so. Asked where the race would train more, so that a race which stopped had more to do.
bool out_of_time(const RunRaceOptions& o, Trained& trained);

/// The candidates, sorted, each with its full run's time; and the compressed lengths (run_race_plan.cpp).
void plan_race(RunRace& race, const RunRaceOptions& o, int64_t dataset);

/// The noise scale's batch, as tune measures it: the largest candidate up to 1024; where every candidate is larger,
/// the smallest; at least 8, for micro-batches of an eighth; at most the `dataset`'s training samples where given
/// (a step of more would repeat samples, which the noise scale refuses).
int64_t noise_batch_of(const std::vector<int64_t>& batches, int64_t dataset = 0);

/// The compressed runs' training seconds per unit of f (the share of the run in the shortest):
/// the reference's three runs (f, 2f, 4f: 7f of its full run) and every other candidate's two longer
/// ones (6f). `full_runs_s` in batch order, the reference first.
double compressed_cost_s(const std::vector<double>& full_runs_s);

/// One run race over o's candidates (the reserve aside); only_longest: its reference left the start
/// only in its longest compressed run. noise_along: the noise scale is measured after the
/// reference's two longer runs (run_longer's race does without it after the run it adds: only the
/// batch-size schedule and the notes read it there; about 0.5 s of mlp's 2.8 s round).
/// `noise_batch`: where the noise scale is measured; unset, o's (the first race passes the one of the
/// candidates given, as tune measured it at the start, before any was left out).
RunRace race_once(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, Trained& trained,
                  bool noise_along, bool& only_longest, std::optional<int64_t> noise_batch = std::nullopt);

/// The race over o's candidates (race_once), then what follows it: the reserve's race (o's reserve)
/// where its reference did not leave the start or led the whole run, the rounds past the plateau
/// where it (or the reserve's) is stuck, or a longer round for its contested candidates. `budget_s`:
/// the budget given, for a longer round's and the reserve's race (o's is the first race's);
/// `noise_batch`: the first race's; `not_raced`: the candidates left out of o, which the reserve's
/// race leaves out too; `trained`: what the rounds share, its deadline set.
RunRace race_with_rounds(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, double budget_s,
                         int64_t noise_batch, const std::vector<int64_t>& not_raced, Trained& trained);

/// Runs the contested candidates of `race` longer, once (contested_batches): its notes say how.
RunRace run_longer(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, RunRace race, Trained& trained);

/// `race`, whose reference did not leave the start in its middle compressed run (`only_longest`: it
/// left it in its longest), raced again with every compressed run twice as long until it has, where
/// that fits the run and kPlateauBudgets more of o's budgets of wall time: its notes say how.
RunRace past_the_plateau(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, RunRace race,
                         bool only_longest, Trained& trained);

/// The longest compressed run is at most the whole run: the shortest at most a quarter of it.
constexpr double kLongestShare = 0.25;

/// The reference's error (1 - accuracy, or the loss) at the end of a run of `run_samples`, on its
/// learning curve through `errors` after `samples` (three runs, each twice the one before), as
/// deficit reads it: where the gains shrink, the power law through all three, but never below the
/// law through the last two with its floor at zero (a floor below zero is no loss's, and a loss gap
/// as a share of a near-zero end would be any share); where they do not, the last gain per doubling,
/// at least half the last run's error; where the last run gained nothing, the last run's.
double error_at(const std::vector<double>& samples, const std::vector<double>& errors, double run_samples);

/// Why `pick` (one of race.entries, judged good) is the answer (RunRace::pick_reason): the reference
/// because every faster batch judged is predicted to end, or ended, further behind it than the
/// held-out noise; another batch by its gaps after the two longer compressed runs, carried to the
/// run's end (and where its gap took a smaller batch's, which one), or by its gap at the whole run's
/// end where the longest compressed run was the run.
std::string pick_reason(const RunRace& race, const RunRaceEntry& pick);

/// A noise scale the measurement could not tell from infinite (|G|^2 not above its noise): every
/// batch of the run is far below it.
constexpr double kNoiseUnbounded = 1e12;

/// The shorter run's gap must be this many times the held-out noise for the ratio of the two gaps to
/// be a trend: near the noise, the ratio is mostly noise's (lenet's 64 at 1.2 points, noise 0.81,
/// read a gap that grew).
constexpr double kTrendNoise = 2;

/// A contested candidate races longer only where its run is at least 5 % shorter than the pick's
/// and, once the longer race judged a contested batch good, than that one's: a smaller saving is
/// within the sweep's resolution (it calls a batch 5 % slower than a smaller one dominated,
/// race_candidates) and is the least a batch-size schedule must save (mlp AdamW, 35 epochs: 2,048's
/// run 1-4 % shorter than 1,024's, 0.7 s of a 4 s round). Good batches whose runs are closer than
/// that to the pick's are named beside it (RunRace::within_5_percent).
constexpr double kLeastSaving = 0.05;
inline bool saves_enough(double run_s, double than_s) { return run_s < (1 - kLeastSaving) * than_s; }

/// The candidates judged good whose full run is within kLeastSaving of the pick's, the pick among
/// them, in batch order.
std::vector<int64_t> within_5_percent(const std::vector<RunRaceEntry>& entries, const RunRaceEntry& pick);

/// Where a longer round moved the answer (`next`, its best batch one of its own entries): the first
/// race's verdicts on the candidates `next` did not race join its entries in batch order, marked
/// earlier_round (none can join within_5_percent: each good one is over 5 % slower than the pick); a
/// note names those kept within the first round's noise but still at the start there (judged not
/// good for that).
void keep_first_round_verdicts(const RunRace& first, RunRace& next);

/// Weighs batch-size schedules against the pick (race.entries judged): where the batch whose samples
/// buy the most progress per second grows 2x or more over the run, the fastest schedule of two or
/// three phases at judged batches (good or not), each batch at least twice the last and from where it
/// buys at least the progress per second of the one before, predicted to end within the tolerance of
/// the reference; proposed where it saves 5 % of the pick's time. `noise`: (samples trained, noise scale) along the
/// reference's runs; `samples`, `errors`: its learning curve.
void propose_schedule(RunRace& race, const std::vector<std::pair<double, double>>& noise,
                      const std::vector<double>& samples, const std::vector<double>& errors, double run_samples,
                      double loss_at_end, int64_t dataset, const RunRaceEntry& pick);

}  // namespace batchwise::detail
