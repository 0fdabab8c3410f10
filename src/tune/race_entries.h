// Which batches tune's batch race trains from its first rung, and which it holds back: a rule over
// the sweep and what the run race found, tested without training (tests/tune/tune_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "batchwise/race.h"

namespace batchwise::detail {

struct RaceEntries {
  std::vector<int64_t> candidates;  ///< race from the first rung
  std::vector<int64_t> reserve;     ///< join only if no candidate leaves the start in the first rung
  std::vector<int64_t> early;       ///< the reserve's batches that race from the first rung instead
};

/// The batch race's candidates and reserve from a sweep (race_candidates, race_reserve). Where
/// `plateau_measured` (a run race whose references never left the start came first), the plateau is
/// measured already, over a longer stretch than the first rung: the reserve races from that rung
/// beside the candidates, and none is held back. Held back, it joins only if no candidate leaves the
/// start within the first rung, and a candidate that just leaves it at a stretched rung's end keeps
/// out the smaller batches, which take more steps in as many samples and leave it sooner in the run.
inline RaceEntries race_entries(const std::vector<Trial>& sweep_points, bool plateau_measured) {
  RaceEntries e;
  e.candidates = race_candidates(sweep_points);
  e.reserve = race_reserve(sweep_points, e.candidates);
  if (plateau_measured && e.candidates.size() >= 2) {
    e.candidates.insert(e.candidates.begin(), e.reserve.begin(), e.reserve.end());
    e.early.swap(e.reserve);
  }
  return e;
}

}  // namespace batchwise::detail
