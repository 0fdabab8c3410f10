// The run race's rounds: one race over its candidates (run_race.cpp trains it), and the reserve's
// rounds after a first race whose reference did not leave the start or led the whole run
// (run_race_reserve.cpp decides who joins, and at which lengths).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "batchwise/run_race.h"

namespace batchwise::detail {

/// One run race over o's batches (the reserve aside): each candidate's advised rate is taken from
/// `advised` where a range test ran already, and those run here are added to it. The compressed
/// runs are those o's budget buys, or the three `lengths` (epochs) where given.
RunRace race_once(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o,
                  std::map<int64_t, LrAdvice>& advised, const std::vector<double>& lengths = {});

/// The reference left the start only in its longest compressed run: its quality did not change
/// beyond the held-out noise from its shortest run to its middle one, and did in its longest (in the
/// error's units: 1 - accuracy, or the loss, whose noise is race.tolerance of its last loss). It sits
/// at the end of the plateau, where a smaller batch, taking more steps in as many samples, leaves it
/// sooner and may end ahead.
inline bool left_the_start_late(const RunRace& race) {
  if (race.reference_stuck || !race.best_batch || race.gains.size() != 2 || race.runs.size() != 3 ||
      !race.runs.back().loss)
    return false;
  const double noise = race.measure == "accuracy" ? race.tolerance : race.tolerance * *race.runs.back().loss;
  return race.gains[0] <= noise && race.gains[1] > noise;
}

}  // namespace batchwise::detail
