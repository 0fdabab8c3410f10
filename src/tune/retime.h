// tune's second look at the batches its run race turns on: after the sweep, before the race, the
// close candidates timed again in alternated trials (retime, sweep.h), within a share of the race's
// time. Tested without training (tests/tune/tune_test.cpp, tests/search/sweep_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "batchwise/sweep.h"

namespace batchwise::detail {

/// A race candidate whose samples/s is within this share of the fastest candidate's is close: one
/// sweep of three repetitions reads such a pair 5-8 % apart either way (docs/benchmarks.md, "The pair
/// each mlp verdict turns on"), enough to drop it from the run race (a larger batch no faster) or to
/// make it the pick or not (the race's rules read 5 %, the benchmark's verdict 10 %).
constexpr double kCloseShare = 0.15;

/// At most this many close batches are timed again, the fastest first: their trials cost time the
/// issue's cost line counts (tune --epochs at most 1.5x tune).
constexpr int kMostClose = 4;

/// The retiming's budget: this share of the run race's planned wall time.
constexpr double kRetimeShare = 0.15;

/// The close batches among the run race's candidates (race_candidates over `points`, a sweep's
/// within the training set): the fastest candidate; those below it that read slower than a smaller
/// candidate (a dip: noise only slows a trial); then those within kCloseShare of the fastest's
/// samples/s, the faster first; at most kMostClose in all; ascending. Empty where fewer than two.
std::vector<int64_t> close_batches(const std::vector<Trial>& points);

/// Times the close batches of `sweep` (its points within `dataset` samples) again, within
/// `budget_s` of trials (RetimeOptions' other defaults), with what it does said on `say`: a line
/// before, naming them and why, and one after, with their figures and why it stopped. Where the
/// least rounds of them (RetimeOptions::min_rounds, at their sweep trials' time) would pass the
/// budget, those that count least are left out until they fit; where two still do not, none is
/// timed, and the line says so. Nothing, and no line, where fewer than two are close or the budget
/// is 0. Returns a warning for the report where a trial failed (the batch, and for out of memory
/// every larger one, then no longer races); empty otherwise.
std::string retime_close(TrialRunner& runner, const SweepOptions& s, SweepResult& sweep, int64_t dataset,
                         double budget_s, const std::function<void(const std::string&)>& say);

}  // namespace batchwise::detail
