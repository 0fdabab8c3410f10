// What the run race's units share: run_race.cpp trains the compressed runs and judges them,
// run_race_gaps.cpp reads the reference's learning curve and the candidates' gaps off them (and
// names the good batches as fast as the pick, within_5_percent), and
// run_race_schedule.cpp weighs a batch-size schedule against the pick.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "batchwise/run_race.h"

namespace batchwise::detail {

/// A noise scale the measurement could not tell from infinite (|G|^2 not above its noise): every
/// batch of the run is far below it.
constexpr double kNoiseUnbounded = 1e12;

/// A candidate's gap behind the reference is carried to the run's end shrinking per doubling as it
/// did between its two compressed runs, but at most halving: a steeper fall between two noisy
/// readings is not extrapolated over the run (lenet's 15 epochs are 5 doublings past the race).
constexpr double kLeastGapTrend = 0.5;
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
